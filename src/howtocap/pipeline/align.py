"""``howtocap align DIR``: the per-video scoring stage over every captioned video, then the
global filter as a reduce step.

Scores per video go to ``DIR/parts/align_scores/`` (independent of the filter), so changing only
the filter re-filters without rescoring; changing encoders or window settings rescores
everything, and a re-captioned (or re-pointed) video is rescored alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.align import AlignConfig, apply_filter, empty_aligned
from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VideoItem
from howtocap.pipeline.core import Shard, StageSummary, run_stage
from howtocap.pipeline.runners import LocalRunner, Runner
from howtocap.rundir import RunDir, atomic_write_parquet, conform, hash_text
from howtocap.stages.align import SCORES, AlignStage

STAGE = AlignStage.name


def _invalidate_if_changed(rundir: RunDir, key: str) -> bool:
    """Drop this stage's parts and status when they were made with other encoders/windows."""
    old = rundir.read_config(STAGE) or {}
    if old.get("scoring_key") == key:
        return False
    for d in (rundir.part_dir(SCORES), rundir.status_dir / STAGE):
        if d.exists():
            shutil.rmtree(d)
    return bool(old)


def _fingerprints(captions: pd.DataFrame, items: Sequence[VideoItem]) -> dict[str, str]:
    """Per video, a hash of its captions and video path: what its scores were computed from."""
    texts: dict[str, str] = {}
    cols = [c for c in ("start", "end", "text") if c in captions.columns]
    for vid, g in captions.groupby("video_id", sort=False):
        texts[str(vid)] = g[cols].to_csv(index=False, header=False)
    return {it.video_id: format(hash_text(f"{it.video_path}\n{texts.get(it.video_id, '')}"),
                                "016x") for it in items}


def _forget_changed_videos(rundir: RunDir, captions: pd.DataFrame,
                           items: Sequence[VideoItem]) -> None:
    """Re-captioned (or re-pointed) videos lose their old scores, so they are aligned again."""
    now = _fingerprints(captions, items)
    old = rundir.read_config("align_inputs") or {}
    for vid, fp in now.items():
        if vid in old and old[vid] != fp:
            rundir.part_path(SCORES, vid).unlink(missing_ok=True)
            rundir.status_path(STAGE, vid).unlink(missing_ok=True)
    rundir.write_config("align_inputs", {**old, **now})


def _load_inputs(rundir: RunDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    has_captions = rundir.table_path("captions").exists() or rundir.part_dir("captions").exists()
    if not has_captions:
        raise InputError(rundir.root, "no captions.parquet (run `howtocap caption` first)")
    if not rundir.table_path("videos").exists():
        raise InputError(rundir.root, "no videos.parquet (run `howtocap caption` first: it "
                                      "records which file each video came from)")
    captions = rundir.read_table("captions")
    need = {"video_id", "start", "text"}
    if not need <= set(captions.columns):
        raise InputError(rundir.table_path("captions"),
                         f"lacks columns {sorted(need - set(captions.columns))}")
    return captions, rundir.videos()


def read_aligned(rundir: RunDir) -> pd.DataFrame:
    """``DIR/aligned.parquet`` as written by ``align_run`` (filtered; ``kept`` is meaningful)."""
    path = rundir.table_path("aligned")
    if not path.exists():
        raise InputError(rundir.root, "no aligned.parquet (run `howtocap align` first)")
    return pd.read_parquet(path)


def finish_align(rundir: RunDir, cfg: AlignConfig, encoder_names: Sequence[str],
                 *, report: bool = True) -> tuple[pd.DataFrame, float]:
    """The reduce step: merge the per-video scores, apply the global filter, write
    aligned.parquet + report + config."""
    merged = rundir.merge(SCORES)
    if len(merged.columns) == 0:
        merged = empty_aligned()
    merged = conform(merged, "aligned")
    aligned, thr = apply_filter(merged, cfg)
    atomic_write_parquet(aligned, rundir.table_path("aligned"))
    config = {**cfg.model_dump(), "encoders": list(encoder_names),
              "scoring_key": cfg.scoring_key(encoder_names), "threshold_used": thr,
              "kept": int(aligned["kept"].sum()), "pairs": len(aligned)}
    rundir.write_config(STAGE, config)
    if report:
        from howtocap.report.align_report import write_align_report

        write_align_report(aligned, thr, config, rundir.root / "align_report.html")
    return aligned, thr


def align_run(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
              runner: Runner | None = None, device: str | None = None, progress: bool = True,
              encoders: Sequence[Any] | None = None, shard: Shard | None = None
              ) -> StageSummary:
    """Score every captioned video (resumable), then filter globally.

    Re-running with only a different filter re-uses the per-video scores; different encoders
    or window settings recompute them, and so do re-captioned videos. No names: ``default``.
    ``encoders`` (already built, e.g. in tests) overrides the names. With a ``shard`` only that
    shard's videos are scored and the global filter is left to a final run without a shard.
    """
    runner = runner or LocalRunner()
    names_in = list(encoder_names) or ["default"]
    if encoders is None and isinstance(runner, LocalRunner):
        from howtocap.encoders import create  # loaded here once, shared with the stage

        encoders = [create(n, device=device) for n in names_in]
    names = [e.name for e in encoders] if encoders is not None else names_in
    if len(set(names)) != len(names):
        raise HowtocapError(f"the same encoder was given twice: {', '.join(names)}")
    captions, videos = _load_inputs(rundir)
    key = cfg.scoring_key(names)
    _invalidate_if_changed(rundir, key)
    # Record the key now, so an interrupted run resumes instead of recomputing.
    rundir.write_config(STAGE, {**cfg.model_dump(), "encoders": names, "scoring_key": key})
    known = set(videos["video_id"])
    items = [VideoItem(r.video_id, Path(r.video_path) if r.video_path else None)
             for r in videos.itertuples()]
    items += [VideoItem(v, None) for v in sorted(set(captions["video_id"]) - known)]
    # A video whose subtitles or captioning failed has nothing to align: leave it out (its
    # error is already in the status table) instead of recording an empty "ok". Captions
    # brought in without status records (a copied table) are aligned.
    def captioned(vid: str) -> bool:
        st = rundir.status("caption", vid)
        return st.status == "ok" if st is not None else rundir.status("subtitles", vid) is None

    items = [it for it in items if captioned(it.video_id)]
    _forget_changed_videos(rundir, captions, items)
    stage = AlignStage(names_in, cfg, rundir.cache_dir, device=device, models=encoders)
    summary = run_stage(rundir, items, stage, runner=runner, progress=progress, shard=shard)
    if shard is None:  # the filter is global: it needs every shard's scores
        finish_align(rundir, cfg, names)
    rundir.status_table()
    return summary
