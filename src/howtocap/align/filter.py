"""Filter & align (HowToCaption stage 2, after the reference ``align_and_filter.py``): every
shift within ±T of a caption's clip is scored against the mean of its per-second frame
embeddings, the caption moves to its best shift, and a global filter keeps the best pairs. The
exact definitions (covered rows, clamping, the ±T guard, ties, ``within_shot``, ``null_z``) are
in docs/align.md. All captions × all shifts of a video are one ``einsum`` over window means
from prefix sums: the image encoder runs once per second of video.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from howtocap.align.config import DEFAULT_NULL_Z, AlignConfig
from howtocap.encoders.windows import rows_covering, window_means
from howtocap.errors import HowtocapError
from howtocap.schemas import empty_table
from howtocap.shots.bounds import Bounds, clamp_windows

if TYPE_CHECKING:
    from howtocap.encoders.cache import FrameEmbeddings

_TIE_EPS = 1e-6


MIN_REFERENCE = 10  # fewer references from other videos: no z (the caption is kept)


def filter_mode(cfg: AlignConfig) -> str:
    """Which filter applies: an explicit one, ``keep_all``, or the default ``null_z``."""
    for name in ("threshold", "quantile", "keep_top"):
        if getattr(cfg, name) is not None:
            return name
    return "keep_all" if cfg.keep_all else "null_z"


def describe_filter(cfg: AlignConfig, threshold: float) -> str:
    """One phrase for the CLI line and the report."""
    mode = filter_mode(cfg)
    if mode == "keep_all":
        return "no filter (--keep-all)"
    if mode == "null_z":
        z = DEFAULT_NULL_Z if cfg.null_z is None else cfg.null_z
        return (f"default filter: null z >= {z:g} against other videos' captions and clips"
                + (", and channel chatter dropped" if cfg.drop_chatter else ""))
    return f"--{mode.replace('_', '-')}: score >= {threshold:.4f}"


# -- the vectorised core ---------------------------------------------------------------------

def offset_grid(cfg: AlignConfig) -> np.ndarray:
    """Shifts in seconds, ``-T … T`` in ``offset_step`` steps, 0 always included."""
    k = int(math.floor(cfg.offset_seconds / cfg.offset_step + 1e-9))
    return np.arange(-k, k + 1, dtype=np.float64) * cfg.offset_step


def video_extent(n_rows: int, duration: float, fps: float) -> float:
    """Seconds of video we have embeddings for (see the module docstring)."""
    covered = n_rows / fps
    return min(duration, covered) if duration and duration > 0 else covered


def candidate_windows(starts: np.ndarray, n_rows: int, duration: float, cfg: AlignConfig,
                      shots: Bounds | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clamped windows of every caption × shift: ``(win_start, win_end, lo, hi, offsets)``,
    seconds and covered rows ``(n_cap, n_off)``; ``shots``: each cut back to one shot."""
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
    if shots:
        ws, we = clamp_windows(shots, ws, we)
    lo, hi = rows_covering(ws, we, n_rows, cfg.fps)
    return ws, we, lo, hi, offsets


def window_scores(frame_emb: np.ndarray, text_emb: np.ndarray, starts: np.ndarray,
                  duration: float, cfg: AlignConfig, pool: Any = None,
                  shots: Bounds | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of each caption to each shifted window: ``(scores (n_cap, n_off), offsets)``.

    ``pool(frame_emb, lo, hi, renormalize)`` replaces the window mean: an encoder's
    ``pool_clips`` (the MEE baseline's is the max pooling it was trained with)."""
    _, _, lo, hi, offsets = candidate_windows(starts, len(frame_emb), duration, cfg, shots)
    return _scores(frame_emb, text_emb, lo, hi, cfg, pool)[0], offsets


def _scores(frame_emb: np.ndarray, text_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            cfg: AlignConfig, pool: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """``window_scores`` on windows already cut, and the pooled windows themselves: the
    chosen window's embedding is one of them, so the caller never pools it a second time."""
    text = np.asarray(text_emb, dtype=np.float64)
    if text.ndim != 2 or len(text) != len(lo):
        raise ValueError(f"text embeddings {text.shape} do not match {len(lo)} captions")
    if len(text) == 0:
        return np.zeros((0, lo.shape[1] if lo.ndim == 2 else 0)), None
    means = (pool or window_means)(frame_emb, lo, hi, cfg.renormalize)
    return np.einsum("cd,cod->co", text, means), means


def best_offsets(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Index of the best shift per caption; near-ties go to the smallest ``|δ|``."""
    if scores.size == 0:
        return np.zeros(len(scores), dtype=np.int64)
    top = scores.max(axis=1, keepdims=True)
    dist = np.where(scores >= top - _TIE_EPS, np.abs(offsets)[None, :], np.inf)
    return dist.argmin(axis=1)


def align_video(video_id: str, captions: pd.DataFrame, frames: Sequence[FrameEmbeddings],
                text_embs: Sequence[np.ndarray], encoder_names: Sequence[str],
                cfg: AlignConfig, pools: Sequence[Any] | None = None,
                reference: Sequence[np.ndarray] | None = None,
                reference_videos: Sequence[str] | None = None,
                clips: Sequence[np.ndarray] | None = None,
                clip_videos: Sequence[str] | None = None,
                shots: Bounds | None = None) -> pd.DataFrame:
    """One video's captions moved to their best window, with scores (``kept`` is set later).
    ``pools``: per encoder, its ``pool_clips`` (``None`` = the mean).

    The guard: only shifts whose (clamped) window starts within ±T of the caption count; a
    caption with none gets ``outside = True``, no score, and is dropped by the reduce step, as
    the reference drops it; each caption is scored on its own row, so a dropped one never
    shifts another's (the reference's text index falls out of step there). Per encoder,
    ``reference`` (other captions' text embeddings, of ``reference_videos``) gives ``z_text``
    and ``clips`` (other videos' clips, of ``clip_videos``) ``z_clip``; ``null_z`` is their
    mean. ``shots``: each window cut back to one shot (``within_shot``)."""
    if not (len(frames) == len(text_embs) == len(encoder_names)) or not frames:
        raise ValueError("need one frame table and one text table per encoder")
    starts = np.asarray(captions["start"], dtype=np.float64).reshape(-1)
    if len(starts) == 0:
        return empty_aligned()
    n_rows = min(len(f.emb) for f in frames)
    if n_rows == 0:
        raise HowtocapError(f"{video_id}: no video frames could be decoded")
    duration = min(float(f.duration or 0) for f in frames) if all(
        f.duration for f in frames) else 0.0
    partial = any(bool(f.partial) for f in frames)
    # the windows are cut once (they depend on the video, not on the encoder)
    ws, we, lo, hi, offsets = candidate_windows(starts, n_rows, duration, cfg, shots)
    total = None
    pooled = []
    for f, t, pool in zip(frames, text_embs, pools or [None] * len(frames), strict=True):
        s, means = _scores(f.emb[:n_rows], t, lo, hi, cfg, pool)
        pooled.append(means)
        total = s if total is None else total + s
    assert total is not None
    total = total / len(frames)
    reach = np.abs(ws - np.nan_to_num(starts, nan=0.0)[:, None]) <= cfg.offset_seconds + 1e-9
    outside = ~reach.any(axis=1)
    total = np.where(reach, total, -np.inf)
    best = best_offsets(total, offsets)
    rows = np.arange(len(starts))
    new_start = np.where(outside, starts, ws[rows, best])
    new_end = np.where(outside, starts + cfg.clip_seconds, we[rows, best])
    score = np.where(outside, np.nan, total[rows, best])
    z_text = np.full(len(starts), np.nan)
    z_clip = np.full(len(starts), np.nan)
    if clips is not None and clip_videos is not None and len(clip_videos):
        # the caption against other videos' clips: its score there is linear in its text
        z_clip = reference_z(video_id, score, text_embs, clips, clip_videos)
    if reference is not None and reference_videos is not None and len(reference_videos):
        # each caption's chosen window, pooled above with the others (the same rows)
        z_text = reference_z(video_id, score, [m[rows, best] for m in pooled],  # type: ignore[index]
                             reference, reference_videos)
    n = len(starts)

    def text_col(name: str) -> np.ndarray:
        if name not in captions:
            return np.full(n, "", dtype=object)
        return np.array([str(v) for v in captions[name]], dtype=object)

    both = np.stack([z_text, z_clip])
    have = (~np.isnan(both)).sum(axis=0)
    null_z = np.where(have > 0, np.nansum(both, axis=0) / np.maximum(have, 1), np.nan)
    ends = (np.asarray(captions["end"], dtype=np.float64).reshape(-1) if "end" in captions
            else starts + cfg.clip_seconds)
    # built once in the schema's order and dtypes (what ``conform`` returns), extras after:
    # assembling and converting a frame column by column cost more than the scoring
    cols: dict[str, Any] = {
        "video_id": np.full(n, video_id, dtype=object),
        "start": new_start, "end": new_end, "text": text_col("text"),
        "orig_start": starts, "orig_end": ends,
        "offset": np.where(outside, 0.0, new_start - np.nan_to_num(starts, nan=0.0)),
        "score": score, "kept": np.zeros(n, dtype=bool),
        "encoders": np.full(n, ",".join(encoder_names), dtype=object),
        "source": text_col("source"),
        "block": (np.asarray(captions["block"], dtype=np.int64).reshape(-1)
                  if "block" in captions else np.full(n, -1, dtype=np.int64)),
        "model": text_col("model"),
        "config_id": np.full(n, "", dtype=object),
        "partial": np.full(n, partial, dtype=bool),
        "null_z": null_z, "z_text": z_text, "z_clip": z_clip, "outside": outside}
    return pd.DataFrame(cols, index=pd.RangeIndex(n), copy=False)


def reference_z(video_id: str, score: np.ndarray, windows: Sequence[np.ndarray],
                reference: Sequence[np.ndarray], reference_videos: Sequence[str]
                ) -> np.ndarray:
    """How far each caption's score stands above a null of *other videos'* items, in robust
    standard deviations (NaN: fewer than ``MIN_REFERENCE``), per encoder averaged.

    Windows = chosen clips vs other captions' texts: a clip that attracts every text (a
    talking head, an encoder hub) raises its own bar; windows = the captions' texts vs other
    videos' clips: a text that scores high everywhere raises its own. A caption naming what
    is shown clears both, chatter does not; in units of spread, it carries across encoders."""
    other = np.asarray(reference_videos, dtype=object) != video_id
    if int(other.sum()) < MIN_REFERENCE or len(score) == 0:
        return np.full(len(score), np.nan)
    every = bool(other.all())  # the usual case: no copy of the (large) reference
    sims = None
    for w, r in zip(windows, reference, strict=True):
        r64 = np.asarray(r, dtype=np.float64)
        part = np.asarray(w, dtype=np.float64) @ (r64 if every else r64[other]).T
        sims = part if sims is None else np.add(sims, part, out=sims)
    assert sims is not None
    sims /= len(windows)
    # robust centre and spread: other videos show the same things too (the same step in
    # another video of the task), and that right tail of true matches must not raise the bar
    if np.isnan(sims).any():  # (a NaN embedding) np.median's NaN rows, as before
        centre = np.median(sims, axis=1)
        spread = 1.4826 * np.median(np.abs(sims - centre[:, None]), axis=1)
    else:
        centre = _row_medians(sims)  # sims is reordered: the deviations below are a set
        np.subtract(sims, centre[:, None], out=sims)
        spread = 1.4826 * _row_medians(np.abs(sims, out=sims))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(spread > 1e-12, (score - centre) / spread, np.nan)


def _row_medians(a: np.ndarray) -> np.ndarray:
    """``np.median(a, axis=1)`` of a NaN-free array, bit for bit, reordering ``a`` in place:
    one selection per row (the lower middle of an even row is the largest value left of the
    upper one), several times faster than np.median's two-point partition on long rows."""
    n = a.shape[1]
    k = n // 2
    a.partition(k, axis=1)
    if n % 2:
        return a[:, k].copy()
    return (a[:, :k].max(axis=1) + a[:, k]) / 2


# -- the global filter -----------------------------------------------------------------------

ScoresArg = np.ndarray | Mapping[str, np.ndarray] | Sequence[np.ndarray]


def choose_threshold(scores: ScoresArg, cfg: AlignConfig,
                     rng: np.random.Generator | None = None) -> float:
    """The score a pair needs to be kept (``score >= threshold``; ``-inf``: all). ``quantile`` Q
    keeps the best fraction Q, ``keep_top`` N the N best pairs (ties all kept); with more
    videos than ``sample_videos`` both are estimated as the reference does: N becomes the
    fraction N / all pairs, the threshold that quantile of ``sample_videos`` random videos."""
    parts = scores.values() if isinstance(scores, Mapping) else \
        [scores] if isinstance(scores, np.ndarray) else scores
    groups = [np.asarray(v, dtype=np.float64).reshape(-1) for v in parts]
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
    return threshold_of(pool, total, sampled, cfg)


def threshold_of(pool: np.ndarray, total: int, sampled: bool, cfg: AlignConfig) -> float:
    """``choose_threshold``'s estimate from the scores it pools (all of them, or the sampled
    videos' in any order: only their values count) and ``total`` pairs: shared with the
    streamed filter (``align.run``), which pools them without holding the table."""
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


def chatter_flags(texts: pd.Series | Sequence[str]) -> np.ndarray:
    """The text test of the default filter per caption: the LLM stage's channel-chatter
    patterns (``howtocap.caption.chatter``), one regex per distinct text."""
    from howtocap.caption.chatter import is_chatter  # lazily: the CLI starts without the LLM code

    values = pd.Series(texts, dtype=object).astype(str)
    verdict = {t: is_chatter(t) for t in values.unique()}
    return values.map(verdict).to_numpy(dtype=bool)


def null_z_pass(df: pd.DataFrame, cfg: AlignConfig) -> np.ndarray:
    """Rows whose ``null_z`` reaches the default filter's bar (NaN, no reference: passes)."""
    if "null_z" not in df:
        return np.ones(len(df), dtype=bool)
    z = df["null_z"].to_numpy(dtype=np.float64)
    return ~(z < (DEFAULT_NULL_Z if cfg.null_z is None else cfg.null_z))


def apply_filter(aligned: pd.DataFrame, cfg: AlignConfig) -> tuple[pd.DataFrame, float]:
    """Set ``kept`` and ``chatter`` (the text test's verdict, recorded in every mode so a
    reader sees why a caption went); returns the table and the threshold. Only ``null_z``
    drops chatter: the paper's explicit modes and ``keep_all`` mean exactly what they say."""
    explicit = len(aligned) and filter_mode(cfg) not in ("keep_all", "null_z")
    groups = {vid: g.to_numpy(dtype=np.float64)
              for vid, g in aligned.groupby("video_id", sort=True)["score"]} if explicit else {}
    thr = choose_threshold(groups, cfg)
    return filter_window(aligned, cfg, thr), thr


def filter_window(aligned: pd.DataFrame, cfg: AlignConfig, thr: float) -> pd.DataFrame:
    """``apply_filter``'s per-row part with the threshold already chosen: a row's verdict
    needs only its own columns and ``thr``, so ``align.run`` filters a window at a time."""
    df = aligned.copy(deep=False)  # copy-on-write: the caller's table is never changed
    df["chatter"] = chatter_flags(df["text"]) if "text" in df else np.zeros(len(df), bool)
    if len(df) == 0:
        df["kept"] = pd.Series(dtype=bool)
        return df
    mode = filter_mode(cfg)
    if mode == "keep_all":
        df["kept"] = np.ones(len(df), dtype=bool)
    elif mode == "null_z":
        df["kept"] = null_z_pass(df, cfg) & ~(cfg.drop_chatter & df["chatter"].to_numpy(bool))
    else:
        df["kept"] = df["score"].to_numpy(dtype=np.float64) >= thr
    return df


def filter_counts(filtered: pd.DataFrame, cfg: AlignConfig) -> dict[str, int]:
    """What the default filter's parts did, for ``config/align.json`` and the report:
    captions without a ``null_z`` (kept untested), captions the text test dropped, and of
    those the ones the null z bar alone would have kept (0 when another filter applied)."""
    out = {"no_null_z": 0, "chatter_dropped": 0, "chatter_dropped_only_by_text": 0}
    if filter_mode(cfg) != "null_z":
        return out
    out["no_null_z"] = (int(filtered["null_z"].isna().sum()) if "null_z" in filtered
                        else len(filtered))
    if not cfg.drop_chatter or "chatter" not in filtered:
        return out
    flagged = filtered["chatter"].to_numpy(dtype=bool)
    out["chatter_dropped"] = int(flagged.sum())
    out["chatter_dropped_only_by_text"] = int((flagged & null_z_pass(filtered, cfg)).sum())
    return out


def empty_aligned() -> pd.DataFrame:
    """A video with no captions aligns to an empty table (with the ``partial`` column)."""
    return empty_table("aligned").assign(  # partial: the video decoded only partly
        partial=pd.Series(dtype=bool), null_z=pd.Series(dtype=np.float64),
        outside=pd.Series(dtype=bool))


__all__ = ["DEFAULT_NULL_Z", "align_video", "apply_filter",
           "candidate_windows", "chatter_flags", "choose_threshold", "describe_filter",
           "empty_aligned", "filter_counts", "filter_mode", "filter_window", "null_z_pass",
           "offset_grid", "reference_z", "threshold_of", "window_scores"]
