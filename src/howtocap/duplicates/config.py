"""The duplicates step's typed settings (recorded in ``DIR/config/duplicates.json``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

# The per-second cosine above which two seconds show the same footage, for the embedded default
# encoder: chosen on the tuning set of benchmarks/quality/bench_duplicates.py (docs/duplicates.md).
THRESHOLD = 0.9


class DuplicatesConfig(BaseModel):
    """What makes two videos (or two pieces of them) the same footage."""

    threshold: float = Field(THRESHOLD, gt=0.0, le=1.0)  # per-second cosine of a matched second
    min_seconds: int = Field(3, ge=1)  # matched seconds of a repeated clip (and of any match)
    video_cover: float = Field(0.8, gt=0.0, le=1.0)  # share of the shorter video matched: a
    # near-duplicate video (a trimmed copy is all inside its source), below: repeated clips
    gap: int = Field(1, ge=0)  # unmatched seconds a run of matched seconds may bridge
    neighbours: int = Field(10, ge=1)  # k of the k-NN over keyframe vectors (candidate pairs)
    keyframe_same: float = Field(0.95, gt=0.0, le=1.0)  # consecutive seconds this alike are
    # one keyframe in the k-NN index (the pair check compares every second)
