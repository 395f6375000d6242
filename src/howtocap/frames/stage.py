"""Frame embedding of one video with several encoders, decoding it once: fills the cache that
``align``, ``index`` and ``train`` read. The cache is the output (keyed by content + encoder),
so the stage writes no table and a repeat is a cheap cache hit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from howtocap.encoders.defaults import FPS, FRAME_BATCH
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput


class FramesStage(BaseStage):
    name = "frames"
    reads = ()
    writes = ()
    writes_cache = ("frames",)  # the per-second frame embeddings, keyed by content + encoder
    resources = Resources(kind="encoder", models=True)

    def __init__(self, encoders: Sequence[str], cache_dir: Path, *, fps: float = FPS,
                 batch_size: int = FRAME_BATCH, device: str | None = None,
                 models: Sequence[Any] | None = None) -> None:
        self.encoders = list(encoders)
        self.cache_dir = Path(cache_dir)
        self.fps, self.batch_size, self.device = fps, batch_size, device
        self._models = list(models) if models is not None else None

    def load(self) -> None:
        if self._models is None:
            from howtocap.encoders import create

            self._models = [create(n, device=self.device) for n in self.encoders]

    def fingerprint(self) -> dict[str, Any]:
        from howtocap.encoders.identity import encoder_identity

        return {**super().fingerprint(), "encoders": [encoder_identity(n) for n in self.encoders],
                "fps": self.fps}

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.encoders.cache import frame_embeddings_multi

        res = frame_embeddings_multi(video.item.video_file(), self._models or [], fps=self.fps,
                                     cache_dir=self.cache_dir, batch_size=self.batch_size)
        warn = ["video decoded only partly; kept the good part"] if res[0].partial else []
        return StageOutput({}, warn, metrics={"frames": float(len(res[0].emb))})
