"""Keeping a time window inside one shot: shared by align (``--within-shot``) and the clip
export, which must agree on where a video cuts."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

Bounds = Sequence[tuple[float, float]]


def read_shots(path: str | Path) -> dict[str, list[tuple[float, float]]]:
    """``shots.parquet`` as {video_id: [(start, end), …] sorted by start}; {} when the run has
    no shots table (a run without the shots stage keeps its windows as they are)."""
    path = Path(path)
    if not path.exists():
        return {}
    df = pd.read_parquet(path, columns=["video_id", "start", "end"])
    df = df.sort_values(["video_id", "start"], kind="stable")
    return {str(v): list(zip(g["start"].astype(float), g["end"].astype(float), strict=True))
            for v, g in df.groupby("video_id", sort=False)}


def shot_at(bounds: Bounds, t: float) -> tuple[float, float] | None:
    """The shot that holds time ``t`` (the later one on a cut); None outside every shot."""
    i = bisect.bisect_right([s for s, _ in bounds], t) - 1
    if i >= 0 and bounds[i][0] <= t < bounds[i][1]:
        return bounds[i]
    return None


def clamp_to_shot(bounds: Bounds, start: float, end: float) -> tuple[float, float]:
    """The part of ``[start, end]`` inside the shot that holds its middle: the window loses
    what lies across a cut rather than showing two scenes. Unchanged when no shot holds the
    middle (no shots known for the video, or the window lies past the last shot)."""
    shot = shot_at(bounds, (start + end) / 2)
    if shot is None:
        return start, end
    return max(start, shot[0]), min(end, shot[1])
