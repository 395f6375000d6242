"""``howtocap align DIR``: the per-video scoring stage over every captioned video, then the
global filter as a reduce step.

Scores per video go to ``DIR/parts/align_scores/`` (independent of the filter), so changing only
the filter re-filters without rescoring; changing encoders or window settings rescores
everything, and a re-captioned (or re-pointed) video is rescored alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.align.config import AlignConfig
from howtocap.align.filter import apply_filter, describe_filter, empty_aligned, filter_counts
from howtocap.align.stage import SCORES, AlignStage
from howtocap.atomic import atomic_write_parquet
from howtocap.engine.core import MAX_ATTEMPTS, Shard, StageSummary, prepare_stages, run_stage
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform, kept_captions

STAGE = AlignStage.name


def _fingerprints(captions: pd.DataFrame, items: Sequence[VideoItem]) -> dict[str, str]:
    """Per video, a hash of its captions and video path: what its scores were computed from."""
    cols = [c for c in ("start", "end", "text") if c in captions.columns]
    texts = _csv_per_video(captions, cols)
    return {it.video_id: format(hash_text(f"{it.video_path}\n{texts.get(it.video_id, '')}"),
                                "016x") for it in items}


def _csv_per_video(captions: pd.DataFrame, cols: list[str],
                   chunk: int = 200_000) -> dict[str, str]:
    """Each video's ``cols`` exactly as ``g[cols].to_csv(index=False, header=False)`` writes
    them (the recorded fingerprints are hashes of that text, so it must not change): one
    ``to_csv`` per chunk of rows, split into lines, instead of a call per video (~1 ms each,
    20 min of a HowTo100M run). CSV formats every row on its own, so a row is one line unless
    a text holds a line break: such a video is written alone, as before."""
    if len(captions) == 0 or not cols:
        return _csv_per_group(captions, cols)
    keyed = captions["video_id"].notna().to_numpy()  # groupby leaves rows without an id out
    vids = captions["video_id"].astype(str).to_numpy(dtype=object)
    alone: set[str] = set()
    if "text" in cols:
        broken = captions["text"].astype(str).str.contains("\n", regex=False).to_numpy(bool)
        alone = set(vids[broken & keyed].tolist())
    lines: dict[str, list[str]] = {}
    for lo in range(0, len(captions), chunk):
        part = captions.iloc[lo:lo + chunk]
        rows = part[cols].to_csv(index=False, header=False).split("\n")
        if len(rows) != len(part) + 1:  # not one line per row after all: the old way
            return _csv_per_group(captions, cols)
        for vid, ok, row in zip(vids[lo:lo + chunk], keyed[lo:lo + chunk], rows, strict=False):
            if ok and vid not in alone:
                lines.setdefault(vid, []).append(row)
    out = {vid: "\n".join(rs) + "\n" for vid, rs in lines.items()}
    if alone:
        out.update(_csv_per_group(captions[np.isin(vids, list(alone)) & keyed], cols))
    return out


def _csv_per_group(captions: pd.DataFrame, cols: list[str]) -> dict[str, str]:
    """The per-video ``to_csv`` itself (what ``_csv_per_video`` reproduces)."""
    return {str(vid): g[cols].to_csv(index=False, header=False)
            for vid, g in captions.groupby("video_id", sort=False)}


def _forget_changed_videos(rundir: RunDir, captions: pd.DataFrame,
                           items: Sequence[VideoItem]) -> None:
    """Re-captioned (or re-pointed) videos lose their old scores, so they are aligned again."""
    now = _fingerprints(captions, items)
    old = rundir.read_config("align_inputs") or {}
    rundir.forget(STAGE, [vid for vid, fp in now.items() if vid in old and old[vid] != fp])
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
    # The guard's drops: captions with no window inside the video within ±T (not moved, not
    # scored). Like the reference they leave the table; they are counted and listed.
    out_mask = merged.pop("outside").fillna(False).to_numpy(dtype=bool) \
        if "outside" in merged else np.zeros(len(merged), dtype=bool)
    outside = merged[out_mask].reset_index(drop=True)
    merged = merged[~out_mask].reset_index(drop=True)
    # The text chatter test runs here, on the merged captions, not in the per-video stage:
    # it is part of the filter, so switching it (``--keep-chatter``) re-filters old scores.
    aligned, thr = apply_filter(merged, cfg)
    atomic_write_parquet(aligned, rundir.table_path("aligned"))
    config = {**cfg.model_dump(), "encoders": list(encoder_names),
              "scoring_key": cfg.scoring_key(encoder_names), "threshold_used": thr,
              "filter": describe_filter(cfg, thr),
              "kept": int(aligned["kept"].sum()), "pairs": len(aligned),
              "outside_video": len(outside), **filter_counts(aligned, cfg)}
    rundir.write_config(STAGE, config)
    if report:
        from howtocap.align.report import write_align_report

        write_align_report(aligned, thr, config, rundir.root / "align_report.html",
                           outside=outside)
    return aligned, thr


REFERENCE = "align_reference"


Reference = tuple[pd.DataFrame, list[str]]  # (video_id, text) of captions; clip video ids


def recorded_reference(rundir: RunDir, cfg: AlignConfig) -> Reference:
    """The default filter's references drawn for this run directory with these settings."""
    old = rundir.read_config(REFERENCE) or {}
    if (old.get("size"), old.get("videos"), old.get("seed")) != (
            cfg.reference_captions, cfg.reference_videos, cfg.seed):
        return pd.DataFrame(columns=["video_id", "text"]), []
    return (pd.DataFrame(old.get("captions", []), columns=["video_id", "text"]),
            [str(v) for v in old.get("clip_videos", [])])


def draw_reference(rundir: RunDir, captions: pd.DataFrame, videos: pd.DataFrame,
                   cfg: AlignConfig, *, redo: bool = False) -> Reference:
    """The default filter's references: ``reference_captions`` random captions of the run and
    the clips of ``reference_videos`` random videos, drawn once and recorded, so that later
    runs (more videos, a resumed run) score against the same ones and keep their results;
    ``redo`` or new settings draw again."""
    old = recorded_reference(rundir, cfg)
    if (len(old[0]) or old[1]) and rundir.has_results(STAGE) and not redo:
        return old
    rng = np.random.default_rng(cfg.seed)
    pool = captions[["video_id", "text"]].astype(str).drop_duplicates()
    pool = pool.sort_values(["video_id", "text"]).reset_index(drop=True)
    pick = np.sort(rng.choice(len(pool), size=min(cfg.reference_captions, len(pool)),
                              replace=False))
    ref = pool.iloc[pick].reset_index(drop=True)
    files = sorted(str(r.video_id) for r in videos.itertuples()
                   if r.video_path and Path(r.video_path).is_file())
    chosen = [files[i] for i in np.sort(rng.choice(
        len(files), size=min(cfg.reference_videos, len(files)), replace=False))]
    rundir.write_config(REFERENCE, {"size": cfg.reference_captions,
                                    "videos": cfg.reference_videos, "seed": cfg.seed,
                                    "captions": ref.to_numpy().tolist(), "clip_videos": chosen})
    return ref, chosen


def clip_bank(rundir: RunDir, clip_videos: Sequence[str], models: Sequence[Any],
              cfg: AlignConfig) -> tuple[list[np.ndarray], list[str]] | None:
    """Every clip (``clip_seconds`` long, 1-s steps) of the reference videos, per encoder,
    pooled as alignment pools them; from the frame cache the stage fills and reuses. A video
    that does not decode is left out (the stage reports it)."""
    from howtocap.encoders.cache import frame_embeddings_multi
    from howtocap.encoders.windows import rows_covering

    if not clip_videos or not models:
        return None
    paths = rundir.videos().set_index("video_id")["video_path"].to_dict()
    banks: list[list[np.ndarray]] = [[] for _ in models]
    owners: list[str] = []
    for vid in clip_videos:
        try:
            frames = frame_embeddings_multi(Path(paths[vid]), [m.frame_encoder for m in models],
                                            fps=cfg.fps, cache_dir=rundir.cache_dir)
        except Exception:  # noqa: BLE001 - a broken video fails in the stage, one line
            continue
        n = min(len(f.emb) for f in frames)
        if n == 0:
            continue
        extent = n / cfg.fps
        ws = np.arange(0.0, max(extent - cfg.clip_seconds, 0.0) + 1e-9, 1.0)
        lo, hi = rows_covering(ws, np.minimum(ws + cfg.clip_seconds, extent), n, cfg.fps)
        for bank, f, m in zip(banks, frames, models, strict=True):
            pooled = m.pool_clips(f.emb[:n], lo[:, None], hi[:, None], cfg.renormalize)
            bank.append(np.asarray(pooled, dtype=np.float32)[:, 0])
        owners += [vid] * len(ws)
    if not owners:
        return None
    return [np.concatenate(b) for b in banks], owners


def align_stage(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
                device: str | None = None, encoders: Sequence[Any] | None = None,
                from_names: bool = True, reference: Reference | None = None,
                clips: tuple[list[np.ndarray], list[str]] | None = None) -> AlignStage:
    """The align stage of these settings (its fingerprint is what a re-run is checked by);
    no ``reference``: the one recorded in the run directory. With ``within_shot`` the shots
    settings recorded in the run (the defaults before any) are part of it."""
    from howtocap.shots.run import recorded_config

    ref_caps, ref_videos = reference if reference is not None \
        else recorded_reference(rundir, cfg)
    shots = recorded_config(rundir).model_dump() if cfg.within_shot else None
    return AlignStage(list(encoder_names) or ["default"], cfg, rundir.cache_dir, device=device,
                      models=encoders, models_from_names=from_names, reference=ref_caps,
                      clip_videos=ref_videos, clips=clips, shots_settings=shots)


def ensure_shots(rundir: RunDir, items: Sequence[VideoItem], *, runner: Runner | None = None,
                 progress: bool = True, shard: Shard | None = None) -> StageSummary:
    """``--within-shot`` needs every video's shots: the shots stage with the run's recorded
    settings (a no-op for videos already done, so ``run`` may have run it just before)."""
    from howtocap.shots.run import shots_run

    return shots_run(rundir, items=[it for it in items if it.video_path], runner=runner,
                     progress=progress, shard=shard)


def align_run(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
              runner: Runner | None = None, device: str | None = None, progress: bool = True,
              encoders: Sequence[Any] | None = None, shard: Shard | None = None,
              redo: bool = False, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, shots_ready: bool = False) -> StageSummary:
    """Score every captioned video (resumable), then filter globally.

    Re-running with only a different filter re-uses the per-video scores; different encoders
    or window settings are refused unless ``redo`` (then every video is rescored);
    re-captioned videos are rescored alone. No names: ``default``.
    ``encoders`` (already built, e.g. in tests) overrides the names. ``shots_ready``: the
    caller has just run the shots stage over the run's videos (``run --within-shot``), so
    ``--within-shot`` does not run it, merge ``shots.parquet`` and rewrite the status table
    a second time. With a ``shard`` only that
    shard's videos are scored and the global filter is left to a final run without a shard.
    """
    in_process = runner is None or runner.in_process  # None: run_stage's LocalRunner
    names_in = list(encoder_names) or ["default"]
    from_names = encoders is None
    captions, videos = _load_inputs(rundir)
    # The default filter's reference is drawn from every caption the LLM wrote, rejected ones
    # too: they are "other captions" all the same, and so the rejection never changes which
    # of the other captions the filter keeps. Rejected captions themselves are not aligned:
    # not scored, not in aligned.parquet (they stay in captions.parquet with their reason).
    reference = draw_reference(rundir, captions, videos, cfg, redo=redo)
    captions = kept_captions(captions)
    stage = align_stage(rundir, names_in, cfg, device=device, encoders=encoders,
                        from_names=from_names, reference=reference)
    cid = prepare_stages(rundir, [stage], redo=redo)[STAGE]  # before any model is loaded
    if encoders is None and in_process:
        from howtocap.encoders import create  # loaded here once, shared with the stage

        encoders = [create(n, device=device) for n in names_in]
    names = [e.name for e in encoders] if encoders is not None else names_in
    if len(set(names)) != len(names):
        raise HowtocapError(f"the same encoder was given twice: {', '.join(names)}")
    key = cfg.scoring_key(names)
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
    # the whole table is not needed again (the stage reads each video's rows): ~340 MB at
    # 10k videos that were held through scoring and the reduce step, the run's peak
    del captions
    if cfg.within_shot and not shots_ready:  # a run without shots computes them first
        ensure_shots(rundir, items, runner=runner, progress=progress, shard=shard)
    clips = None
    if reference[1]:  # the default filter's reference clips, from the driver's encoders
        from howtocap.encoders import create

        clips = clip_bank(rundir, reference[1], encoders if encoders is not None
                          else [create(n, device=device) for n in names_in], cfg)
    stage = align_stage(rundir, names_in, cfg, device=device, encoders=encoders,
                        from_names=from_names, reference=reference, clips=clips)
    opts = {"runner": runner, "progress": progress, "shard": shard,
            "retry_failed": retry_failed, "max_attempts": max_attempts, "cid": cid}
    summary = run_stage(rundir, items, stage, **opts)
    if shard is None:  # the filter is global: it needs every shard's scores
        finish_align(rundir, cfg, names)
        if rundir.corrupted:  # a corrupt part was dropped at the merge: redo those videos
            rundir.corrupted.clear()
            summary.absorb(run_stage(rundir, items, stage, **opts))
            finish_align(rundir, cfg, names)
    rundir.write_status_table()
    return summary
