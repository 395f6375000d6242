"""The align step's typed settings: scoring (windows, encoders' frame rate) and the filter.

Built from the CLI's options by ``align_config`` (a bad value is one line naming it) and
recorded in ``DIR/config/align.json``; ``scoring_key`` is what the per-video scores depend on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, model_validator

from howtocap.errors import HowtocapError
from howtocap.hashing import hash_text


class AlignConfig(BaseModel):
    """Defaults are the paper's: ±10 s of 1-s shifts around 8-s clips, frames at 1 fps."""

    offset_seconds: float = Field(10.0, ge=0)
    clip_seconds: float = Field(8.0, gt=0)
    fps: float = Field(1.0, gt=0)
    offset_step: float = Field(1.0, gt=0)
    renormalize: bool = False
    threshold: float | None = None
    quantile: float | None = Field(None, gt=0, le=1)
    keep_top: int | None = Field(None, ge=0)
    null_z: float | None = None  # the default filter's bar; None: DEFAULT_NULL_Z
    # the default filter also drops text-flagged channel chatter (``--keep-chatter``: off);
    # the explicit modes and ``keep_all`` never apply the text test
    drop_chatter: bool = True
    keep_all: bool = False
    reference_captions: int = Field(256, ge=0)
    reference_videos: int = Field(16, ge=0)
    sample_videos: int = Field(1000, ge=0)
    seed: int = 0
    # keep each caption's window inside one shot (needs DIR/shots.parquet: ``howtocap shots``,
    # run first by ``align``/``run`` when missing); see align.filter's docstring
    within_shot: bool = False

    @model_validator(mode="after")
    def _one_filter(self) -> AlignConfig:
        given = [n for n in ("threshold", "quantile", "keep_top", "null_z")
                 if getattr(self, n) is not None] + (["keep_all"] if self.keep_all else [])
        if len(given) > 1:
            raise ValueError(f"choose one filter, not {' and '.join(given)}")
        return self

    def scoring_key(self, encoder_names: Sequence[str]) -> str:
        """What the per-video scores depend on (not the filter): a change forces a recompute."""
        blob = json.dumps({"encoders": list(encoder_names), "offset": self.offset_seconds,
                           "clip": self.clip_seconds, "fps": self.fps, "step": self.offset_step,
                           "renorm": self.renormalize,
                           **({"within_shot": True} if self.within_shot else {})},
                          sort_keys=True)
        return format(hash_text(blob), "016x")


def align_config(**options: Any) -> AlignConfig:
    """``AlignConfig`` from CLI options (``None`` means "not given"); bad values -> one line."""
    from pydantic import ValidationError

    try:
        return AlignConfig(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        msgs = [f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()]
        raise HowtocapError("align: " + "; ".join(msgs)) from None
