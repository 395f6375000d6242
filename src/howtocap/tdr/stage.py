"""TDR frame features of one video: a frame every ``every`` seconds (4.5 s, the paper's rate)
with its image embedding and the embedding of the transcript words spoken around it, both from
a frozen image–text encoder. Retrieval models train and run on this table, never on pixels, so
the costly decoding and encoding happen once per video (and resume like every stage)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from howtocap.encoders.defaults import ENCODER
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import InputError
from howtocap.subtitles.policy import ASR_MODE, AsrMode, LazyASR
from howtocap.tdr.config import EVERY

TDR_TABLE = "tdr_frames"  # video_id, time, transcript, image (list), text (list)


def frame_times(duration: float, every: float) -> list[float]:
    """The centre of each ``every``-second interval that starts inside the video."""
    n = max(1, math.ceil(duration / every - 1e-6)) if duration > 0 else 0
    return [round(min((k + 0.5) * every, max(duration - 1e-3, 0.0)), 4) for k in range(n)]


def words_around(subs: pd.DataFrame, t: float, half: float) -> str:
    """Text of the cues that overlap ``[t - half, t + half]``, in spoken order."""
    if subs.empty:
        return ""
    hit = subs[(subs["end"] > t - half) & (subs["start"] < t + half)].sort_values("start")
    return " ".join(" ".join(str(x) for x in hit["text"]).split())


class TdrFramesStage(BaseStage):
    name = "tdr_frames"
    reads = ()
    writes = (TDR_TABLE,)
    resources = Resources(kind="encoder", models=True)

    def __init__(self, encoder: str = ENCODER, *, every: float = EVERY,
                 window: float | None = None, asr_mode: AsrMode = ASR_MODE,
                 asr_model: str = "default", source: Any | None = None,
                 device: str | None = None, model: Any | None = None) -> None:
        """``window``: seconds of transcript around each frame (default: ``every``, the
        frame's own interval). ``source``: a ``--subtitles`` collection. ``model``: an encoder
        already built (else ``encoder`` names it)."""
        self.encoder, self.every, self.window = encoder, every, window or every
        self.asr_mode, self.asr_model, self.source = asr_mode, asr_model, source
        self.device, self._model = device, model

    def load(self) -> None:
        if self._model is None:
            from howtocap.encoders import create

            self._model = create(self.encoder, device=self.device)
        self._asr = LazyASR(self.asr_model)

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.io.video import probe, sample_frames
        from howtocap.subtitles.policy import choose_subtitles

        path = video.item.video_file()
        info = probe(path)
        times = frame_times(info.duration, self.every)
        if not times:
            raise InputError(path, "video has no duration")
        subs = choose_subtitles(video.item, self.asr_mode, self.source, self._asr).to_pandas()
        model = self._model
        frames = sample_frames(path, times, size=getattr(model, "image_size", 224))
        img = model.encode_images(frames).astype(np.float32)
        texts = [words_around(subs, t, self.window / 2) for t in times]
        txt = np.zeros_like(img)
        said = [i for i, t in enumerate(texts) if t]
        if said:
            txt[said] = model.encode_texts([texts[i] for i in said]).astype(np.float32)
        df = pd.DataFrame({"video_id": video.video_id, "time": np.asarray(times, np.float64),
                           "transcript": texts, "image": list(img), "text": list(txt)})
        warn = [] if said else ["no transcript words near any frame"]
        return StageOutput({TDR_TABLE: df}, warn)
