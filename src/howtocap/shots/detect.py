"""Cut detection on one video file with PySceneDetect, decoding through its PyAV backend (the
decoder the rest of howtocap uses; OpenCV only computes the frame differences)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.errors import InputError
from howtocap.shots.config import ShotsConfig


@dataclass
class Detection:
    """The shots of one video, covering ``[0, duration]`` without gaps, and what was read."""

    shots: list[tuple[float, float]]
    frames: int
    duration: float


def make_detectors(cfg: ShotsConfig, fps: float) -> list[Any]:
    """The PySceneDetect detectors of these settings (``min_shot_seconds`` in frames at
    ``fps``), all fed by one decoding pass."""
    from scenedetect.detectors import AdaptiveDetector, ContentDetector

    min_len = max(1, int(round(cfg.min_shot_seconds * fps)))
    if cfg.detector == "adaptive":
        return [AdaptiveDetector(adaptive_threshold=cfg.adaptive_threshold,
                                 min_scene_len=min_len, window_width=cfg.window_width,
                                 min_content_val=cfg.min_content_val)]
    found = [ContentDetector(threshold=cfg.threshold, min_scene_len=min_len)]
    if cfg.detector == "content+dissolve":
        step = max(2, int(round(cfg.dissolve_step_seconds * fps)))
        found.append(_strided(ContentDetector(threshold=cfg.dissolve_threshold,
                                              min_scene_len=min_len), step))
    return found


def _strided(inner: Any, step: int) -> Any:
    """``inner`` fed one frame in ``step``: its frame difference spans ``step`` frames, so a
    gradual transition shows as one large change (PySceneDetect's detectors compare
    consecutive frames they are given)."""
    from scenedetect.detector import SceneDetector

    class Strided(SceneDetector):
        def __init__(self) -> None:
            super().__init__()
            self.seen = 0

        def process_frame(self, timecode: Any, frame_img: Any) -> list[Any]:
            self.seen += 1
            if (self.seen - 1) % step:
                return []
            return list(inner.process_frame(timecode, frame_img))

        def post_process(self, timecode: Any) -> list[Any]:
            return list(inner.post_process(timecode))

        @property
        def event_buffer_length(self) -> int:
            return int(inner.event_buffer_length)

    return Strided()


def shots_from_cuts(cuts: list[float], duration: float,
                    min_gap: float = 0.0) -> list[tuple[float, float]]:
    """Cut times -> consecutive shots covering ``[0, duration]`` (no cut: one shot). Cuts
    closer than ``min_gap`` to the one kept before are dropped (two detectors that saw the same
    cut: the earlier is the exact one, the strided pass lags)."""
    inner: list[float] = []
    for c in sorted(set(cuts)):
        if 0.0 < c < duration and (not inner or c - inner[-1] >= min_gap):
            inner.append(c)
    edges = [0.0, *inner, duration]
    return [(round(a, 4), round(b, 4)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def detect_shots(path: str | Path, cfg: ShotsConfig) -> Detection:
    """The shots of the video at ``path``; one ``InputError`` line when it is no video or does
    not decode (the file is probed with ``io.video.probe`` first, which names the problem)."""
    from scenedetect import SceneManager
    from scenedetect.backends.pyav import VideoStreamAv

    from howtocap.io.video import _short, probe

    path = Path(path)
    probe(path)  # no file / not a video / no video stream: one line naming it
    try:
        video = VideoStreamAv(str(path))
    except Exception as e:  # noqa: BLE001 - any open failure is this file's problem
        raise InputError(path, f"not a readable video file ({_short(e)})") from None
    manager = SceneManager()
    manager.auto_downscale = True  # PySceneDetect's default width (256 px): fast, as accurate
    for detector in make_detectors(cfg, float(video.frame_rate)):
        manager.add_detector(detector)
    try:
        frames = manager.detect_scenes(video)
    except Exception as e:  # noqa: BLE001 - a decode error mid-stream
        raise InputError(path, f"could not decode frames ({_short(e)})") from None
    if frames == 0:
        raise InputError(path, "no decodable video frames")
    duration = frames / float(video.frame_rate)
    cuts = [start.seconds for start, _ in manager.get_scene_list()[1:]]  # each scene's start
    return Detection(shots_from_cuts(cuts, duration, cfg.min_shot_seconds), int(frames), duration)
