"""The clip export's typed settings (in ``OUT/clips.json`` and every shard's fingerprint: other
settings redo the shards, never mix them); described fields are ``howtocap export`` flags."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from howtocap.errors import HowtocapError
from howtocap.io import JPEG_QUALITY, SHARD_SIZE

Cut = Literal["fast", "exact"]


class ClipsConfig(BaseModel):
    cut: Cut = Field("fast", description=(
        "clips: fast = stream copy from the keyframe at or before the window's start (an edit "
        "list starts playback at the window); exact = re-encoded to the window."))
    max_side: int | None = Field(None, ge=16, description=(
        "clips (--cut exact): scale the longer side down to this many pixels."))
    shard_size: int = Field(SHARD_SIZE, ge=1, description="webdataset, clips: clips per shard.")
    workers: int = Field(2, ge=1, description="clips: videos cut at a time.")
    cross_shots: bool = Field(False, description=(
        "clips: keep windows that cross a cut of DIR/shots/ (default: a window is cut back to "
        "the shot that holds its middle)."))
    crf: int = Field(23, ge=0, le=51)  # exact: x264 quality (lower = better, larger)
    preset: str = "veryfast"  # exact: x264 speed preset
    jpeg_quality: int = Field(JPEG_QUALITY, ge=1, le=100)

    def check(self) -> None:
        """Combinations no single field can refuse; one line, before any file is written."""
        if self.max_side is not None and self.cut == "fast":
            raise HowtocapError("--max-side scales the picture, which re-encodes it: use it "
                                "with --cut exact (--cut fast copies the stream as it is)")
