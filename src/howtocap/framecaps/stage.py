"""Image-caption labels of one video (Ventura et al.): M frames captioned by every captioner,
the K best captions per captioner by CLIPScore kept."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.framecaps.config import FrameCapsConfig


class FrameCapsStage(BaseStage):
    name = "framecaps"
    reads = ()
    writes = ("framecaps",)
    # Redone with the frames step, as before the graph was derived (``--redo frames`` cleared
    # framecaps); it samples and encodes its own frames, not the frame cache's rows.
    reads_cache = ("frames",)
    resources = Resources(kind="captioner", models=True)

    def __init__(self, captioners: Sequence[str], scorer: str, cfg: FrameCapsConfig, *,
                 device: str | None = None) -> None:
        self.captioners, self.scorer, self.cfg, self.device = list(captioners), scorer, cfg, device
        self._models: tuple[list[Any], Any] | None = None

    def load(self) -> None:
        from howtocap.encoders import create
        from howtocap.framecaps.label import create_captioner

        self._models = ([create_captioner(n, device=self.device) for n in self.captioners],
                        create(self.scorer, device=self.device))
        self._lock = threading.Lock()  # the models are shared; one video at a time uses them

    def fingerprint(self) -> dict[str, Any]:
        from howtocap.encoders.identity import encoder_identity

        return {**super().fingerprint(), "captioners": list(self.captioners),
                "scorer": encoder_identity(self.scorer), "framecaps": self.cfg.model_dump()}

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.framecaps.label import framecaps_video  # torch: not for `status`

        assert self._models is not None
        caps, scorer = self._models
        with self._lock:
            return StageOutput({"framecaps": framecaps_video(video.item, caps, scorer,
                                                             self.cfg)})
