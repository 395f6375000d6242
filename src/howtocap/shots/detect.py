"""Cut detection on one video file with PySceneDetect, decoding through its PyAV backend (the
decoder the rest of howtocap uses; OpenCV only computes the frame differences)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.errors import InputError, short_reason
from howtocap.shots.config import ShotsConfig


@dataclass
class Detection:
    """The shots of one video, covering ``[0, duration]`` without gaps, and what was read."""

    shots: list[tuple[float, float]]
    frames: int
    duration: float


def make_detector(cfg: ShotsConfig, fps: float) -> Any:
    """The PySceneDetect detector of these settings (``min_shot_seconds`` in frames at
    ``fps``)."""
    from scenedetect.detectors import AdaptiveDetector, ContentDetector

    min_len = max(1, int(round(cfg.min_shot_seconds * fps)))
    if cfg.detector == "adaptive":
        return AdaptiveDetector(adaptive_threshold=cfg.adaptive_threshold,
                                min_scene_len=min_len, window_width=cfg.window_width,
                                min_content_val=cfg.min_content_val)
    return ContentDetector(threshold=cfg.threshold, min_scene_len=min_len)


def shots_from_cuts(cuts: list[float], duration: float) -> list[tuple[float, float]]:
    """Cut times -> consecutive shots covering ``[0, duration]`` (no cut: one shot)."""
    inner = sorted(c for c in set(cuts) if 0.0 < c < duration)
    edges = [0.0, *inner, duration]
    return [(round(a, 4), round(b, 4)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def detect_shots(path: str | Path, cfg: ShotsConfig) -> Detection:
    """The shots of the video at ``path``; one ``InputError`` line when it is no video or does
    not decode (the file is probed with ``io.video.probe`` first, which names the problem)."""
    from scenedetect import SceneManager
    from scenedetect.backends.pyav import VideoStreamAv

    from howtocap.io.video import probe

    path = Path(path)
    probe(path)  # no file / not a video / no video stream: one line naming it
    try:
        video = VideoStreamAv(str(path))
    except Exception as e:  # noqa: BLE001 - any open failure is this file's problem
        raise InputError(path, f"not a readable video file ({short_reason(e)})") from None
    manager = SceneManager()
    manager.auto_downscale = True  # compare at PySceneDetect's default width (256 px)
    manager.add_detector(make_detector(cfg, float(video.frame_rate)))
    try:
        frames = manager.detect_scenes(video)
    except Exception as e:  # noqa: BLE001 - a decode error mid-stream
        raise InputError(path, f"could not decode frames ({short_reason(e)})") from None
    if frames == 0:
        raise InputError(path, "no decodable video frames")
    duration = frames / float(video.frame_rate)
    cuts = [start.seconds for start, _ in manager.get_scene_list()[1:]]  # each scene's start
    return Detection(shots_from_cuts(cuts, duration), int(frames), duration)
