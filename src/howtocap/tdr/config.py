"""``tdr train``'s settings, declared once: each field with a description is a flag of the
command (``cli.options``: default, bounds, help). No torch here, so ``--help`` stays fast."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError

EVERY = 4.5  # seconds between sampled frames: the paper's rate
SPLIT = "validation"  # what `tdr eval` scores


class TdrConfig(BaseModel):
    """Training settings, recorded in the checkpoint (eval/export reuse its encoder and rate)."""

    model_config = ConfigDict(extra="forbid")

    encoder: str = Field(ENCODER, description="Frozen image–text encoder.")
    every: float = Field(EVERY, gt=0, description="Seconds between sampled frames.")
    window: float | None = Field(None, gt=0, description=(
        "Seconds of transcript around a frame [default: --every]."))
    context: str = Field("lstm", description=(
        "I² context over the frame sequence: none, lstm, cnn, transformer."))
    modality: str = Field("joint", description=(
        "Frame query: joint (image + transcript), text, image."))
    aux: str = Field("kofcl", description=(
        "Auxiliary loss: kofcl (key-object IoU > --mu), fcl (same step), none."))
    lam: float = Field(0.05, ge=0, json_schema_extra={"flag": "--lambda"},
                       description="Weight of the auxiliary loss.")
    mu: float = Field(0.1, ge=0, le=1, description="KOFCL key-object IoU threshold.")
    epochs: int = Field(20, ge=1, description="Passes over the training videos.")
    lr: float = Field(1e-4, gt=0, description="Adam learning rate.")
    d_model: int = Field(256, ge=8)
    d_r: int = Field(256, ge=8)
    seed: int = Field(0, description="Seed of the weights' initialisation and batch order.")

    def model_post_init(self, _: Any) -> None:
        from howtocap.tdr.losses import AUX_KINDS
        from howtocap.tdr.model import CONTEXTS, MODALITIES

        for name, val, allowed in (("context", self.context, CONTEXTS),
                                   ("modality", self.modality, MODALITIES),
                                   ("aux", self.aux, AUX_KINDS)):
            if val not in allowed:
                raise HowtocapError(f"--{name} must be one of {', '.join(allowed)}, not {val!r}")
