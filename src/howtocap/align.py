"""Filter & align: move every caption to the clip that matches it best, then keep the best pairs.

HowToCaption's stage 2 (after the reference ``align_and_filter.py``). A caption with start ``s``
owns the clip ``[s, s + clip)``. We try every shift ``δ ∈ {-T, …, T}`` (1-s steps), score the
caption text against the *mean of the per-second frame embeddings* of each shifted clip, move
the caption to its best shift and keep it when that best score passes a global filter.

Exact definitions (tested in ``tests/test_align.py``):

* Row ``i`` of a per-second embedding table covers ``[i/fps, (i+1)/fps)`` (its frame is taken at
  the middle, ``(i+0.5)/fps``). A window ``[a, b)`` covers the rows whose middle lies in
  ``[a, b)``; a window always covers at least one row.
* The video extent is ``L = min(duration, n_rows/fps)`` (so a partly decoded video is aligned on
  what decoded). "Clamped to the video": when ``L >= clip`` a shifted window keeps its length and
  is slid inside ``[0, L]``; when the video is shorter than one clip, every window is the whole
  video. Captions that start past the end (or before 0) are clamped the same way.
* The window embedding is the plain mean of the L2-normalised frame embeddings, *not*
  renormalised (as the reference's average pooling); a window whose frames disagree therefore
  scores lower. ``renormalize=True`` switches to cosine similarity.
* Several encoders: the similarities are averaged (the reference sums; averaging keeps
  thresholds on the same scale as one encoder).
* Ties (e.g. shifts that clamp to the same window) go to the smallest ``|δ|``; the ``offset``
  column holds the shift actually applied (``start - orig_start``).

Window means come from prefix sums over the cached rows, and all captions × all shifts of a
video are scored in one ``einsum``: the image encoder runs once per second of video.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, model_validator

from howtocap.encoders.cache import rows_covering, window_means
from howtocap.errors import HowtocapError, InputError
from howtocap.rundir import RunDir, conform, empty_table, hash_text

if TYPE_CHECKING:
    from howtocap.encoders.cache import FrameEmbeddings
    from howtocap.io.inputs import VideoItem
    from howtocap.pipeline.runner import Shard, StageSummary

STAGE = "align"
# Per-video scores live in their own part table: they do not depend on the filter, so changing
# the filter re-uses them, and ``DIR/aligned.parquet`` (filtered, with ``kept``) is never
# overwritten by a re-merge of unfiltered parts.
PART_TABLE = "align_scores"
_TIE_EPS = 1e-6


class AlignConfig(BaseModel):
    """Defaults are the paper's: ±10 s of 1-s shifts around 8-s clips, frames at 1 fps."""

    offset_seconds: float = Field(10.0, ge=0)
    clip_seconds: float = Field(8.0, gt=0)
    fps: float = Field(1.0, gt=0)
    offset_step: float = Field(1.0, gt=0)
    renormalize: bool = False
    threshold: float | None = None
    quantile: float | None = Field(None, gt=0, le=1)
    keep_top: int | None = Field(None, ge=0)
    sample_videos: int = Field(1000, ge=0)
    seed: int = 0

    @model_validator(mode="after")
    def _one_filter(self) -> AlignConfig:
        given = [n for n in ("threshold", "quantile", "keep_top") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"choose one filter, not {' and '.join(given)}")
        return self

    def scoring_key(self, encoder_names: Sequence[str]) -> str:
        """What the per-video scores depend on (not the filter): a change forces a recompute."""
        blob = json.dumps({"encoders": list(encoder_names), "offset": self.offset_seconds,
                           "clip": self.clip_seconds, "fps": self.fps, "step": self.offset_step,
                           "renorm": self.renormalize}, sort_keys=True)
        return format(hash_text(blob), "016x")


def align_config(**options: Any) -> AlignConfig:
    """``AlignConfig`` from CLI options (``None`` means "not given"); bad values -> one line."""
    from pydantic import ValidationError

    try:
        return AlignConfig(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        msgs = [f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()]
        raise HowtocapError("align: " + "; ".join(msgs)) from None


# -- the vectorised core ---------------------------------------------------------------------

def offset_grid(cfg: AlignConfig) -> np.ndarray:
    """Shifts in seconds, ``-T … T`` in ``offset_step`` steps, 0 always included."""
    k = int(math.floor(cfg.offset_seconds / cfg.offset_step + 1e-9))
    return np.arange(-k, k + 1, dtype=np.float64) * cfg.offset_step


def video_extent(n_rows: int, duration: float, fps: float) -> float:
    """Seconds of video we have embeddings for (see the module docstring)."""
    covered = n_rows / fps
    return min(duration, covered) if duration and duration > 0 else covered


def candidate_windows(starts: np.ndarray, n_rows: int, duration: float, cfg: AlignConfig
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clamped windows of every caption × shift: ``(win_start, win_end, lo, hi, offsets)``.

    ``win_*`` are seconds ``(n_cap, n_off)``; ``lo:hi`` the rows each window covers.
    """
    if n_rows <= 0:
        raise ValueError("no frame embeddings")
    offsets = offset_grid(cfg)
    starts = np.nan_to_num(np.asarray(starts, dtype=np.float64).reshape(-1), nan=0.0)
    extent = video_extent(n_rows, duration, cfg.fps)
    clip = cfg.clip_seconds
    shape = (len(starts), len(offsets))
    if extent >= clip:
        ws = np.clip(starts[:, None] + offsets[None, :], 0.0, extent - clip)
        we = ws + clip
    else:
        ws = np.zeros(shape)
        we = np.full(shape, extent)
    lo, hi = rows_covering(ws, we, n_rows, cfg.fps)
    return ws, we, lo, hi, offsets


def window_scores(frame_emb: np.ndarray, text_emb: np.ndarray, starts: np.ndarray,
                  duration: float, cfg: AlignConfig) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of each caption to each shifted window: ``(scores (n_cap, n_off), offsets)``."""
    text = np.asarray(text_emb, dtype=np.float64)
    if text.ndim != 2 or len(text) != len(np.asarray(starts).reshape(-1)):
        raise ValueError(f"text embeddings {text.shape} do not match {len(starts)} captions")
    _, _, lo, hi, offsets = candidate_windows(starts, len(frame_emb), duration, cfg)
    if len(text) == 0:
        return np.zeros((0, len(offsets))), offsets
    means = window_means(frame_emb, lo, hi, cfg.renormalize)
    return np.einsum("cd,cod->co", text, means), offsets


def best_offsets(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Index of the best shift per caption; near-ties go to the smallest ``|δ|``."""
    if scores.size == 0:
        return np.zeros(len(scores), dtype=np.int64)
    top = scores.max(axis=1, keepdims=True)
    dist = np.where(scores >= top - _TIE_EPS, np.abs(offsets)[None, :], np.inf)
    return dist.argmin(axis=1)


def align_video(video_id: str, captions: pd.DataFrame, frames: Sequence[FrameEmbeddings],
                text_embs: Sequence[np.ndarray], encoder_names: Sequence[str],
                cfg: AlignConfig) -> pd.DataFrame:
    """One video's captions moved to their best window, with scores (``kept`` is set later)."""
    if not (len(frames) == len(text_embs) == len(encoder_names)) or not frames:
        raise ValueError("need one frame table and one text table per encoder")
    if len(captions) == 0:
        return _with_partial(empty_table("aligned"), False)
    n_rows = min(len(f.emb) for f in frames)
    if n_rows == 0:
        raise HowtocapError(f"{video_id}: no video frames could be decoded")
    duration = min(float(f.duration or 0) for f in frames) if all(
        f.duration for f in frames) else 0.0
    partial = any(bool(f.partial) for f in frames)
    starts = captions["start"].to_numpy(dtype=np.float64)
    total = None
    for f, t in zip(frames, text_embs, strict=True):
        s, offsets = window_scores(f.emb[:n_rows], t, starts, duration, cfg)
        total = s if total is None else total + s
    assert total is not None
    total = total / len(frames)
    ws, we, _, _, offsets = candidate_windows(starts, n_rows, duration, cfg)
    best = best_offsets(total, offsets)
    rows = np.arange(len(starts))
    new_start, new_end = ws[rows, best], we[rows, best]
    out = pd.DataFrame({
        "video_id": video_id,
        "start": new_start,
        "end": new_end,
        "text": captions["text"].astype(str).to_numpy(),
        "orig_start": starts,
        "orig_end": captions["end"].to_numpy(dtype=np.float64) if "end" in captions
        else starts + cfg.clip_seconds,
        "offset": new_start - np.nan_to_num(starts, nan=0.0),
        "score": total[rows, best],
        "kept": False,
        "encoders": ",".join(encoder_names),
        "source": captions["source"].astype(str).to_numpy() if "source" in captions else "",
        "block": captions["block"].to_numpy(dtype=np.int64) if "block" in captions else -1,
        "model": captions["model"].astype(str).to_numpy() if "model" in captions else "",
    })
    return _with_partial(conform(out, "aligned"), partial)


def _with_partial(df: pd.DataFrame, partial: bool) -> pd.DataFrame:
    """An extra ``partial`` column: True when the video decoded only partly."""
    df = df.copy()
    df["partial"] = pd.Series([partial] * len(df), dtype=bool)
    return df


# -- the global filter -----------------------------------------------------------------------

ScoresArg = np.ndarray | Mapping[str, np.ndarray] | Sequence[np.ndarray]


def choose_threshold(scores: ScoresArg, cfg: AlignConfig,
                     rng: np.random.Generator | None = None) -> float:
    """The score a pair needs to be kept (``score >= threshold``); ``-inf`` keeps everything.

    ``quantile`` Q keeps the best fraction Q; ``keep_top`` N keeps the N best pairs overall
    (ties at the threshold are all kept). With per-video scores and more videos than
    ``cfg.sample_videos``, both are estimated like the reference does: N becomes the fraction
    N / all pairs, and the threshold is that quantile of ``sample_videos`` random videos.
    """
    if isinstance(scores, Mapping):
        groups = [np.asarray(v, dtype=np.float64).reshape(-1) for v in scores.values()]
    elif isinstance(scores, np.ndarray):
        groups = [scores.astype(np.float64).reshape(-1)]
    else:
        groups = [np.asarray(v, dtype=np.float64).reshape(-1) for v in scores]
    if cfg.threshold is not None:
        return float(cfg.threshold)
    if cfg.quantile is None and cfg.keep_top is None:
        return -math.inf
    total = sum(len(g) for g in groups)
    if total == 0:
        return -math.inf
    rng = rng if rng is not None else np.random.default_rng(cfg.seed)
    sampled = 0 < cfg.sample_videos < len(groups)
    if sampled:
        pick = rng.choice(len(groups), size=cfg.sample_videos, replace=False)
        pool = np.concatenate([groups[i] for i in pick])
    else:
        pool = np.concatenate(groups)
    if len(pool) == 0:
        return -math.inf
    if cfg.keep_top is not None:
        if cfg.keep_top == 0:
            return math.inf
        if not sampled:
            if cfg.keep_top >= len(pool):
                return float(pool.min())
            return float(np.partition(pool, len(pool) - cfg.keep_top)[len(pool) - cfg.keep_top])
        frac = min(1.0, cfg.keep_top / total)
    else:
        frac = float(cfg.quantile)  # type: ignore[arg-type]
    if frac >= 1.0:
        return float(pool.min())
    return float(np.quantile(pool, 1.0 - frac))


def apply_filter(aligned: pd.DataFrame, cfg: AlignConfig) -> tuple[pd.DataFrame, float]:
    """Set ``kept`` on every row; returns the table and the threshold that was used."""
    df = aligned.copy()
    if len(df) == 0:
        df["kept"] = pd.Series(dtype=bool)
        return df, (cfg.threshold if cfg.threshold is not None else -math.inf)
    groups = {vid: g.to_numpy(dtype=np.float64)
              for vid, g in df.groupby("video_id", sort=True)["score"]}
    thr = choose_threshold(groups, cfg, np.random.default_rng(cfg.seed))
    df["kept"] = df["score"].to_numpy(dtype=np.float64) >= thr
    return df, thr


# -- the run-directory stage -----------------------------------------------------------------

def _invalidate_if_changed(rundir: RunDir, key: str) -> bool:
    """Drop this stage's parts and status when they were made with other encoders/windows."""
    old = rundir.read_config(STAGE) or {}
    if old.get("scoring_key") == key:
        return False
    for d in (rundir.part_dir(PART_TABLE), rundir.root / "parts" / "status" / STAGE):
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
            rundir.part_path(PART_TABLE, vid).unlink(missing_ok=True)
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


def make_align_fn(rundir: RunDir, captions: pd.DataFrame, encoders: Sequence[Any],
                  cfg: AlignConfig) -> Any:
    """The per-video function ``run_stage`` calls (frames from the cache, texts in one batch)."""
    from howtocap.encoders.cache import frame_embeddings_multi

    by_video = {vid: g.reset_index(drop=True) for vid, g in captions.groupby("video_id")}
    names = [e.name for e in encoders]

    def fn(item: VideoItem) -> dict[str, pd.DataFrame]:
        caps = by_video.get(item.video_id, captions.iloc[0:0])
        if len(caps) == 0:
            return {PART_TABLE: _with_partial(empty_table("aligned"), False)}
        if item.video_path is None or not str(item.video_path):
            raise HowtocapError(f"{item.video_id}: no video file recorded for this video")
        path = Path(item.video_path)
        if not path.is_file():
            raise InputError(path, "video file not found")
        frames = frame_embeddings_multi(path, list(encoders), fps=cfg.fps,
                                        cache_dir=rundir.cache_dir)
        if not frames or min(len(f.emb) for f in frames) == 0:
            raise InputError(path, "no video frames could be decoded")
        texts = caps["text"].astype(str).tolist()
        text_embs = [np.asarray(e.encode_texts(texts), dtype=np.float32) for e in encoders]
        return {PART_TABLE: align_video(item.video_id, caps, frames, text_embs, names, cfg)}

    return fn


def read_aligned(rundir: RunDir) -> pd.DataFrame:
    """``DIR/aligned.parquet`` as written by ``align_run`` (filtered; ``kept`` is meaningful)."""
    path = rundir.table_path("aligned")
    if not path.exists():
        raise InputError(rundir.root, "no aligned.parquet (run `howtocap align` first)")
    return pd.read_parquet(path)


def finish_align(rundir: RunDir, cfg: AlignConfig, encoder_names: Sequence[str],
                 *, report: bool = True) -> tuple[pd.DataFrame, float]:
    """Merge the per-video scores, apply the filter, write aligned.parquet + report + config."""
    from howtocap.rundir import atomic_write_parquet

    merged = rundir.merge(PART_TABLE)
    if len(merged.columns) == 0:
        merged = _with_partial(empty_table("aligned"), False)
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
              workers: int = 1, device: str | None = None, progress: bool = True,
              encoders: Sequence[Any] | None = None, shard: Shard | None = None
              ) -> StageSummary:
    """``howtocap align DIR``: score every video (resumable), then filter globally.

    Re-running with only a different filter re-uses the per-video scores; different encoders
    or window settings recompute them, and so do re-captioned videos. No names: ``default``.
    ``encoders`` (already built, e.g. in tests) overrides the names. With a ``shard`` only that
    shard's videos are scored and the global filter is left to a final run without a shard.
    """
    from howtocap.io.inputs import VideoItem
    from howtocap.pipeline.runner import run_stage

    if encoders is None:
        from howtocap.encoders import create

        encoders = [create(n, device=device) for n in (list(encoder_names) or ["default"])]
    names = [e.name for e in encoders]
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
    # A video whose captioning failed has nothing to align: leave it out (its caption error
    # is already in the status table) instead of recording an empty "ok".
    uncaptioned = {it.video_id for it in items
                   if (st := rundir.status("caption", it.video_id)) and st.status == "error"}
    items = [it for it in items if it.video_id not in uncaptioned]
    _forget_changed_videos(rundir, captions, items)
    fn = make_align_fn(rundir, captions, encoders, cfg)
    summary = run_stage(rundir, items, STAGE, fn, main_table=PART_TABLE, workers=workers,
                        progress=progress, shard=shard)
    if shard is not None:  # the filter is global: it needs every shard's scores
        rundir.status_table()
        return summary
    finish_align(rundir, cfg, names)
    rundir.status_table()
    return summary


__all__ = ["AlignConfig", "align_config", "align_run", "align_video", "apply_filter",
           "candidate_windows", "choose_threshold", "finish_align", "offset_grid",
           "read_aligned", "window_scores"]
