"""Keeping a time window inside one shot: shared by align (``--within-shot``) and the clip
export, which must agree on where a video cuts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

Bounds = Sequence[tuple[float, float]]


def shots_by_video(df: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """The shots table as {video_id: [(start, end), …] by start}; {} when empty (a run without
    shots keeps its windows)."""
    df = df.sort_values(["video_id", "start"], kind="stable")
    return {str(v): list(zip(g["start"].astype(float), g["end"].astype(float), strict=True))
            for v, g in df.groupby("video_id", sort=False)}


def clamp_windows(bounds: Bounds, start: np.ndarray, end: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every window ``[start, end]`` (arrays of one shape) cut back to the shot that holds
    its middle, as ``clamp_to_shot`` does for one: align scores every caption x shift of a
    video this way, so it is one vectorised pass, not a Python call per window."""
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    if not len(bounds):
        return start, end
    s0 = np.asarray([s for s, _ in bounds], dtype=np.float64)
    s1 = np.asarray([e for _, e in bounds], dtype=np.float64)
    mid = (start + end) / 2
    i = np.searchsorted(s0, mid, side="right") - 1  # the last shot starting at or before
    j = np.clip(i, 0, None)
    held = (i >= 0) & (mid < s1[j])  # outside every shot: unchanged
    return (np.where(held, np.maximum(start, s0[j]), start),
            np.where(held, np.minimum(end, s1[j]), end))


def clamp_to_shot(bounds: Bounds, start: float, end: float) -> tuple[float, float]:
    """The part of ``[start, end]`` inside the shot that holds its middle: the window loses
    what lies across a cut rather than showing two scenes. Unchanged when no shot holds the
    middle (no shots known for the video, or the window lies past the last shot)."""
    a, b = clamp_windows(bounds, np.float64(start), np.float64(end))
    return float(a), float(b)
