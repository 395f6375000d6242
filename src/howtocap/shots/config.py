"""The shots step's typed settings (``DIR/config/shots.json``, part of the fingerprint); each
field with a ``description`` is a flag of ``howtocap shots`` (``cli.options``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

Detector = Literal["content", "adaptive", "histogram", "hash", "none"]


class ShotsConfig(BaseModel):
    """Up to two detectors, their cuts combined: one of PySceneDetect's (each frame against the one
    before: hard cuts) and ``gradual`` (frames ``gradual_seconds`` apart: dissolves, which change
    each frame too little for the first). The defaults are ``benchmarks/quality/bench_shots.py``'s
    choice (docs/shots.md). Shot lengths are in seconds, not frames: a run's frame rates differ."""

    detector: Detector = Field("none", json_schema_extra={"text": True}, description=(
        "Frame-to-frame detector (PySceneDetect): content (HSV difference of two frames "
        "above --threshold), adaptive (that difference against its neighbours' average), "
        "histogram (luma histograms), hash (perceptual hashes), or none (--gradual "
        "alone, the default)."))
    threshold: float = Field(27.0, gt=0, description=(
        "content: the HSV difference (0-255) of two frames that makes a cut (PySceneDetect's "
        "default)."))
    adaptive_threshold: float = Field(3.0, gt=0, description=(
        "adaptive: how many times its neighbours' average a difference must be."))
    min_content_val: float = Field(15.0, ge=0, description=(
        "adaptive: the smallest difference that can be a cut."))
    window_width: int = Field(2, ge=1)  # adaptive: frames on each side of the average
    histogram_threshold: float = Field(0.05, gt=0, le=1, description=(
        "histogram: how far below 1 the correlation of two luma histograms makes a cut."))
    hash_threshold: float = Field(0.35, gt=0, le=1, description=(
        "hash: the share of a perceptual hash's bits that must change for a cut."))
    gradual: bool = Field(True, description=(
        "Also find gradual transitions (dissolves): a peak of the colour-histogram distance "
        "between the frames --gradual-seconds before and after each instant; the cut is "
        "the transition's middle."))
    gradual_threshold: float = Field(0.3, gt=0, le=1, description=(
        "gradual: the histogram distance (0-1, total variation) a transition's peak "
        "reaches at least."))
    gradual_seconds: float = Field(0.4, gt=0, le=2, description=(
        "gradual: how far before and after each instant the compared frames lie (s)."))
    min_shot_seconds: float = Field(0.6, ge=0, description=(
        "No cut closer than this to the previous one (s)."))

    @model_validator(mode="after")
    def _some_detector(self) -> ShotsConfig:
        if self.detector == "none" and not self.gradual:
            raise ValueError("--detector none needs --gradual (no detector would run)")
        return self
