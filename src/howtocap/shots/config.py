"""The shots step's typed settings: which PySceneDetect detector and its thresholds (recorded
in ``DIR/config/shots.json`` and part of the stage's fingerprint, so other settings are
refused on a finished run unless ``--redo``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

DETECTORS = ("content", "adaptive")


class ShotsConfig(BaseModel):
    """PySceneDetect's defaults but ``threshold``, with the minimum shot length in seconds
    rather than frames (videos of a run have different frame rates).

    ``content`` cuts where the HSV difference of two consecutive frames reaches
    ``threshold`` (``ContentDetector``); ``adaptive`` where that difference stands
    ``adaptive_threshold`` times above its neighbours' average and above ``min_content_val``
    (``AdaptiveDetector``: fewer false cuts on fast motion). ``benchmarks/quality/bench_shots.py``
    measures both on hard cuts and 1-s dissolves (docs/shots.md)."""

    detector: Literal["content", "adaptive"] = "content"
    # content: the HSV difference (0-255) that makes a cut. 17, not PySceneDetect's 27: the
    # choice of benchmarks/quality/bench_shots.py's written rule on its tuning set (more dissolves
    # found, precision kept above 90 %); docs/shots.md has the held-out figures
    threshold: float = Field(17.0, gt=0)
    adaptive_threshold: float = Field(3.0, gt=0)  # adaptive: ratio to the local average
    min_content_val: float = Field(15.0, ge=0)  # adaptive: the difference a cut needs at least
    window_width: int = Field(2, ge=1)  # adaptive: frames on each side of the average
    min_shot_seconds: float = Field(0.6, ge=0)  # no cut closer than this to the previous one

