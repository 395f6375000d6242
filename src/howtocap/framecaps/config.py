"""The framecaps step's typed settings (recorded in ``DIR/config/framecaps.json``); each field
with a ``description`` is a flag of ``howtocap framecaps`` (``cli.options``)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FrameCapsConfig(BaseModel):
    """The paper's defaults: M = 10 frames, top K = 2 captions per captioner."""

    frames: int = Field(10, ge=1, description="Frames captioned per video (M).")
    top_k: int = Field(2, ge=1, description="Captions kept per captioner (K).")
    clipscore_weight: float = 2.5  # CLIPScore = w · max(cos, 0) (Hessel et al. 2021)
