"""The align step's typed settings: scoring (windows, encoders' frame rate) and the filter.

Built from the CLI's options (``cli.options``: a bad value is one line naming it) and
recorded in ``DIR/config/align.json``; ``scoring_key`` is what the per-video scores depend on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, Field, model_validator

from howtocap.hashing import hash_text

# The default filter's bar on ``null_z`` (the mean of two robust z-scores: the caption's score
# on its clip against other videos' captions there, and against its own scores on other
# videos' clips): the one benchmarks/quality/bench_filter.py chooses by its written rule
# (results in benchmarks/results/filter.md, quoted by docs/align.md).
DEFAULT_NULL_Z = 0.75


class AlignConfig(BaseModel):
    """Defaults are the paper's (shifts, clip length, frame rate).

    Each field is a flag of ``howtocap align`` and ``run`` (``cli.options`` reads its name,
    default, bounds and help from here)."""

    offset_seconds: float = Field(10.0, ge=0, description="Try shifts -T … T seconds.")
    clip_seconds: float = Field(8.0, gt=0, description="Length of a caption's clip (s).")
    fps: float = Field(1.0, gt=0, description="Frames embedded per second.")
    offset_step: float = Field(1.0, gt=0, description="Spacing of the shifts (s).")
    renormalize: bool = Field(False, description="Cosine to the clip mean instead of the "
                                                 "plain dot product.")
    threshold: float | None = Field(None, description="Keep pairs with score >= X.")
    quantile: float | None = Field(None, gt=0, le=1, description="Keep the best fraction Q.")
    keep_top: int | None = Field(None, ge=0, description="Keep the N best pairs overall.")
    null_z: float | None = Field(None, description=(  # None: DEFAULT_NULL_Z
        "The default filter's bar: keep a caption whose score stands at least Z standard "
        "deviations above other videos' captions on its clip and its own scores on other "
        "videos' clips (the mean of the two); it also drops channel chatter by its text "
        f"(see --keep-chatter). Default {DEFAULT_NULL_Z:g}."))
    # the explicit modes and ``keep_all`` never apply the text test
    drop_chatter: bool = Field(True, json_schema_extra={"flag": "--keep-chatter",
                                                        "invert": True}, description=(
        "The default filter without its text test: keep captions such as 'Subscribe to "
        "the channel.' when their null z passes (--threshold/--quantile/--keep-top/"
        "--keep-all never apply the text test)."))
    keep_all: bool = Field(False, description="No filter: keep every caption (chatter too).")
    reference_captions: int = Field(256, ge=0, description=(
        "Other captions of the run the default filter compares with (drawn once per run "
        "directory; 0: none)."))
    reference_videos: int = Field(16, ge=0, description=(
        "Videos of the run whose clips the default filter compares each caption with (drawn "
        "once per run directory; 0: none)."))
    sample_videos: int = Field(1000, ge=0, description=(
        "Above this many videos, estimate the quantile/keep-top threshold from a random "
        "sample of this many (0: exact)."))
    seed: int = Field(0, json_schema_extra={"flag": "--align-seed"}, description=(
        "Seed of that sample (and of the default filter's reference draw)."))
    within_shot: bool = Field(False, description=(  # see align.filter's docstring
        "Keep each caption's window inside one shot (PySceneDetect's cuts, DIR/shots/: "
        "detected first when the run has none; `howtocap shots` sets the detector). A window "
        "is cut back to the shot that holds its middle before it is scored."))

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

