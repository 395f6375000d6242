"""The duplicates step's typed settings (``DIR/config/duplicates.json``); described fields
are flags of ``howtocap duplicates`` (``cli.options``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

# The per-second cosines for the embedded default encoder, chosen on the tuning set of
# benchmarks/quality/bench_duplicates.py (docs/duplicates.md): a matched second of a run
# (THRESHOLD) and a second that counts toward a whole-video match along a matched offset
# (COVER_THRESHOLD).
THRESHOLD = 0.85
COVER_THRESHOLD = 0.4


class DuplicatesConfig(BaseModel):
    """What makes two videos (or two pieces of them) the same footage."""

    threshold: float = Field(THRESHOLD, gt=0.0, le=1.0, description=(
        "Cosine of two seconds' frame embeddings at which they show the same footage (tuned "
        "for the default encoder; docs/duplicates.md)."))
    min_seconds: int = Field(3, ge=1, description=(
        "Matched seconds in temporal order that make a repeated clip."))
    cover_threshold: float = Field(COVER_THRESHOLD, gt=0.0, le=1.0, description=(
        "Cosine at which a second of the shorter video counts toward --video-cover, along the "
        "time offsets of the pair's matched runs (a scaled, re-encoded copy dips below "
        "--threshold here and there)."))
    video_cover: float = Field(0.8, gt=0.0, le=1.0, description=(
        "Share of the shorter video's seconds matched along those offsets that makes the pair "
        "near-duplicate videos (below: repeated clips)."))
    gap: int = Field(1, ge=0, description="Unmatched seconds a matched run may bridge.")
    neighbours: int = Field(10, ge=1, description=(
        "k of the FAISS k-NN over keyframes that proposes pairs to check."))
    keyframe_same: float = Field(0.95, gt=0.0, le=1.0)  # consecutive seconds this alike are
    # one keyframe in the k-NN index (the pair check compares every second)
