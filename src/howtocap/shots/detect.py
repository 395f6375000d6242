"""Cut detection on one video file with PySceneDetect, decoding through its PyAV backend (the
decoder the rest of howtocap uses; OpenCV only computes the frame differences): one of its
frame-to-frame detectors and our gradual one (``shots.gradual``) on one ``SceneManager``, so
every frame is decoded once for both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.errors import InputError, short_reason
from howtocap.shots.config import ShotsConfig
from howtocap.shots.gradual import make_gradual_detector


@dataclass
class Detection:
    """The shots of one video, covering ``[0, duration]`` without gaps, and what was read."""

    shots: list[tuple[float, float]]
    frames: int
    duration: float


def make_detector(cfg: ShotsConfig, fps: float) -> Any:
    """The frame-to-frame PySceneDetect detector of these settings (``min_shot_seconds`` in
    frames at ``fps``); None for ``detector="none"``."""
    from scenedetect.detectors import (
        AdaptiveDetector,
        ContentDetector,
        HashDetector,
        HistogramDetector,
    )

    min_len = max(1, int(round(cfg.min_shot_seconds * fps)))
    if cfg.detector == "adaptive":
        return AdaptiveDetector(adaptive_threshold=cfg.adaptive_threshold,
                                min_scene_len=min_len, window_width=cfg.window_width,
                                min_content_val=cfg.min_content_val)
    if cfg.detector == "histogram":
        return HistogramDetector(threshold=cfg.histogram_threshold, min_scene_len=min_len)
    if cfg.detector == "hash":
        return HashDetector(threshold=cfg.hash_threshold, min_scene_len=min_len)
    if cfg.detector == "content":
        return ContentDetector(threshold=cfg.threshold, min_scene_len=min_len)
    return None


def combine_cuts(frame_cuts: list[float], gradual: list[float], snap_seconds: float,
                 merge_seconds: float) -> list[float]:
    """One cut per transition from both detectors' cuts. A frame-to-frame cut within
    ``snap_seconds`` of a gradual one takes its place (a hard cut: the frame-to-frame detector
    has its frame, the gradual one only its neighbourhood); one farther but within
    ``merge_seconds`` is dropped (a dissolve's first blended frames can cross the
    frame-to-frame threshold; its cut is the gradual one, the middle); the rest are kept."""
    g = np.sort(np.asarray(gradual, dtype=np.float64))
    kept = {float(c): float(c) for c in g}  # gradual cut -> the time it is reported at
    for c in sorted(frame_cuts):
        i = int(np.searchsorted(g, c))
        near = [j for j in (i - 1, i) if 0 <= j < len(g)]
        j = min(near, key=lambda j: abs(g[j] - c)) if near else -1
        if j < 0 or abs(g[j] - c) > merge_seconds:
            kept[c] = c
        elif abs(g[j] - c) <= snap_seconds and kept[float(g[j])] == float(g[j]):
            kept[float(g[j])] = c
    return sorted(set(kept.values()))


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
    fps = float(video.frame_rate)
    gradual = make_gradual_detector(fps, cfg.gradual_threshold, cfg.gradual_seconds,
                                    cfg.min_shot_seconds) if cfg.gradual else None
    for detector in (make_detector(cfg, fps), gradual):
        if detector is not None:
            manager.add_detector(detector)
    try:
        frames = manager.detect_scenes(video)
    except Exception as e:  # noqa: BLE001 - a decode error mid-stream
        raise InputError(path, f"could not decode frames ({short_reason(e)})") from None
    if frames == 0:
        raise InputError(path, "no decodable video frames")
    duration = frames / float(video.frame_rate)
    cuts = [start.seconds for start, _ in manager.get_scene_list()[1:]]  # each scene's start
    if gradual is not None:  # one cut per transition (within the gradual detector's reach)
        cuts = combine_cuts(cuts, gradual.cuts, cfg.gradual_seconds / 2,
                            max(cfg.min_shot_seconds, 2 * cfg.gradual_seconds))
    # consecutive shots covering [0, duration] (no cut: one shot)
    edges = [0.0, *sorted(c for c in set(cuts) if 0.0 < c < duration), duration]
    shots = [(round(a, 4), round(b, 4)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return Detection(shots, int(frames), duration)
