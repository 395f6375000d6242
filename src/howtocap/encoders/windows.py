"""Which per-second frame rows a time window covers, and their mean: the window maths that
alignment, search, the encoders' clip pooling and the shard writer share (pure numpy, so the
encoder interface can pool without importing the frame cache)."""

from __future__ import annotations

import numpy as np


def rows_covering(starts: np.ndarray, ends: np.ndarray, n_rows: int,
                  fps: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``lo:hi`` of a ``FrameEmbeddings.emb`` that a window ``[start, end)`` covers: those
    whose frame time ``(i + 0.5) / fps`` lies inside. A window too short to hold one gets the
    row containing its middle, so every window has at least one row. Works elementwise."""
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    lo = np.ceil(s * fps - 0.5 - 1e-9)
    hi = np.ceil(e * fps - 0.5 - 1e-9)
    empty = hi <= lo
    mid = np.floor((s + e) / 2 * fps)
    lo = np.clip(np.where(empty, mid, lo), 0, n_rows - 1).astype(np.int64)
    hi = np.clip(np.where(empty, mid + 1, hi), lo + 1, n_rows).astype(np.int64)
    return lo, hi


def window_means(frame_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 renormalize: bool = False) -> np.ndarray:
    """Mean embedding of rows ``lo:hi`` for every entry, from one prefix sum (float64 sums):
    any number of windows costs one pass over the video, never a pass per window."""
    emb = np.asarray(frame_emb, dtype=np.float64)
    prefix = np.zeros((len(emb) + 1, emb.shape[1]), dtype=np.float64)
    np.cumsum(emb, axis=0, out=prefix[1:])
    means = (prefix[hi] - prefix[lo]) / (hi - lo)[..., None]
    if renormalize:
        means /= np.maximum(np.linalg.norm(means, axis=-1, keepdims=True), 1e-12)
    return means
