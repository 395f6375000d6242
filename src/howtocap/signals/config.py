"""The signals step's typed settings (flags of ``howtocap signals``), recorded in
``DIR/config/signals.json`` and fingerprinted: others are refused unless ``--redo``."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class SignalsConfig(BaseModel):
    """One decode pass per video at ``fps``: every sampled frame feeds brightness, sharpness and
    motion; the text and face detectors, the costly part, see every ``fps / detect_fps``-th."""

    fps: float = Field(4.0, gt=0, le=30, description=(
        "Frames sampled per second for motion, brightness and sharpness."))
    detect_fps: float = Field(1.0, gt=0, description=(
        "Frames per second the text and face detectors look at (at most --fps)."))
    frame_size: int = Field(360, ge=64, le=2160, description=(
        "Sampled frames are scaled down so their shorter side is at most this (px)."))
    window_seconds: float = Field(5.0, ge=1, description=(
        "A video without shots (no `howtocap shots` before) is scored in windows this long "
        "(s); the last one is shorter."))
    static_motion: float = Field(0.002, ge=0, description=(
        "A window whose motion is below this is static (slides, still images)."))
    min_face_score: float = Field(0.5, gt=0, lt=1, description=(
        "The face detector's confidence a face needs."))

    aesthetic: str | None = Field(None, description=(
        "A LAION-style aesthetic head: a .pt/.pth file holding one linear layer (weight "
        "(1, D), bias (1,)) over the L2-normalised image embedding of --aesthetic-encoder; "
        "adds the column aesthetic (its mean over the window's frames at 1 fps)."),
        json_schema_extra={"path": True})
    aesthetic_encoder: str = Field("openclip:ViT-L-14/openai", description=(
        "The image encoder the --aesthetic head was trained on (an --encoder name; LAION's "
        "heads: openclip:ViT-L-14/openai). Its frames come from the frame cache."))

    @model_validator(mode="after")
    def _rates(self) -> SignalsConfig:
        if self.detect_fps > self.fps:
            raise ValueError(f"--detect-fps ({self.detect_fps}) cannot exceed --fps "
                             f"({self.fps}): detection looks at sampled frames")
        return self

    @property
    def detect_every(self) -> int:
        """Run the detectors on every n-th sampled frame."""
        return max(1, round(self.fps / self.detect_fps))
