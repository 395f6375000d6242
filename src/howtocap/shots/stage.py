"""The per-video shots stage: the cuts of one video (``shots.detect``) as rows of ``shots``
(one row per shot, covering the whole video; a video without a cut is one shot)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.shots.config import ShotsConfig

SHOTS = "shots"


class ShotsStage(BaseStage):
    name = "shots"
    reads = ()
    writes = (SHOTS,)
    resources = Resources(kind="cpu")

    def __init__(self, cfg: ShotsConfig | None = None) -> None:
        self.cfg = cfg or ShotsConfig()

    def fingerprint(self) -> dict[str, Any]:
        """The detector settings and PySceneDetect's version (its detectors' scores change
        between releases)."""
        import scenedetect

        return {**super().fingerprint(), "detector": self.cfg.model_dump(),
                "scenedetect": scenedetect.__version__}

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.shots.detect import detect_shots

        found = detect_shots(video.item.video_file(), self.cfg)
        table = pd.DataFrame({"video_id": video.video_id,
                              "start": [s for s, _ in found.shots],
                              "end": [e for _, e in found.shots]})
        return StageOutput({SHOTS: table}, metrics={"frames": float(found.frames),
                                                    "shots": float(len(found.shots))})
