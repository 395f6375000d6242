"""Alignment scoring of one video: its captions against every shifted window of its frames.

The scores do not depend on the filter, so they are the stage's output (``align_scores``); the
global filter is a reduce step in ``pipeline.align``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.align import AlignConfig, align_video, empty_aligned
from howtocap.errors import HowtocapError, InputError
from howtocap.stage import BaseStage, Resources, StageOutput, VideoInput

SCORES = "align_scores"


class AlignStage(BaseStage):
    name = "align"
    reads = ("captions",)
    writes = (SCORES,)
    resources = Resources(kind="encoder", models=True)

    def __init__(self, encoders: Sequence[str], cfg: AlignConfig, cache_dir: Path, *,
                 device: str | None = None, models: Sequence[Any] | None = None) -> None:
        self.encoders = list(encoders)
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        self.device = device
        self._models = list(models) if models is not None else None  # built by the caller

    def load(self) -> None:
        if self._models is None:
            from howtocap.encoders import create

            self._models = [create(n, device=self.device) for n in self.encoders]

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.encoders.cache import frame_embeddings_multi

        caps = video.tables["captions"]
        if len(caps) == 0:
            return StageOutput({SCORES: empty_aligned()})
        path = video.item.video_path
        if path is None or not str(path):
            raise HowtocapError(f"{video.video_id}: no video file known for this video (give "
                                "`howtocap align DIR --videos FOLDER_OR_MANIFEST`)")
        if not Path(path).is_file():
            raise InputError(path, "video file not found")
        models = self._models or []
        frames = frame_embeddings_multi(Path(path), models, fps=self.cfg.fps,
                                        cache_dir=self.cache_dir)
        if not frames or min(len(f.emb) for f in frames) == 0:
            raise InputError(path, "no video frames could be decoded")
        texts = caps["text"].astype(str).tolist()
        text_embs = [np.asarray(m.encode_texts(texts), dtype=np.float32) for m in models]
        return StageOutput({SCORES: align_video(video.video_id, caps, frames, text_embs,
                                                [m.name for m in models], self.cfg)})
