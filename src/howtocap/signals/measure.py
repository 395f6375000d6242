"""Per-frame measures and their per-window means, apart from decoding and the detectors so
they are testable on arrays (docs/signals.md). Measures are taken on luma in 0..1 at a fixed
working size (``WORK``), so resolutions compare; a window's ``motion`` is the median over its
pairs of frames, so a slide change or a cut inside a fixed window is not motion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

WORK = 144  # the working size's shorter side (px) for motion, sharpness and brightness

COLUMNS = ("motion", "static", "text_area", "face_area", "brightness", "sharpness")


def luma(rgb: np.ndarray) -> np.ndarray:
    """The frame's luma in 0..1 at the working size (shorter side ``WORK``, never upscaled
    beyond it: a smaller frame is scaled up so every video is measured on the same grid)."""
    import cv2  # here, not at the top: `howtocap status` imports every stage, never this

    h, w = rgb.shape[:2]
    s = WORK / min(h, w)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    small = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    return cv2.cvtColor(small, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0


def sharpness(gray: np.ndarray) -> float:
    """Variance of the Laplacian (a blurred or flat frame has little high-frequency energy)."""
    import cv2

    return float(cv2.Laplacian(gray, cv2.CV_32F, ksize=1).var())


def motion(prev: np.ndarray, cur: np.ndarray) -> float:
    return float(np.abs(cur - prev).mean())


def fixed_windows(duration: float, seconds: float) -> list[tuple[float, float]]:
    """``[0, duration]`` in consecutive windows of ``seconds`` (the last one shorter; a tail
    under a tenth of a window joins the one before)."""
    if duration <= 0:
        return []
    edges = list(np.arange(0.0, duration, seconds)) + [duration]
    if len(edges) > 2 and edges[-1] - edges[-2] < seconds / 10:
        del edges[-2]
    return [(round(float(a), 4), round(float(b), 4)) for a, b in zip(edges[:-1], edges[1:],
                                                                       strict=True)]


@dataclass
class Samples:
    """What was measured on one video's sampled frames, by time."""

    times: list[float] = field(default_factory=list)
    brightness: list[float] = field(default_factory=list)
    sharpness: list[float] = field(default_factory=list)
    # motion between two consecutive sampled frames, at times (motion_from, motion_times)
    motion_from: list[float] = field(default_factory=list)
    motion_times: list[float] = field(default_factory=list)
    motion: list[float] = field(default_factory=list)
    detect_times: list[float] = field(default_factory=list)
    text_area: list[float] = field(default_factory=list)
    face_area: list[float] = field(default_factory=list)


def _mean_in(times: np.ndarray, values: np.ndarray, a: float, b: float) -> float:
    inside = (times >= a) & (times < b)
    return float(values[inside].mean()) if inside.any() else float("nan")


def window_means(s: Samples, windows: Sequence[tuple[float, float]],
                 static_motion: float) -> dict[str, list[float] | list[bool]]:
    """Each window's mean of each measure over the samples inside it (NaN when none: a shot
    shorter than the sampling step has no motion; ``static`` is then False). Motion is the
    median over pairs of frames both inside the window, so a cut is not motion."""
    t = np.asarray(s.times, dtype=np.float64)
    m0 = np.asarray(s.motion_from, dtype=np.float64)
    m1 = np.asarray(s.motion_times, dtype=np.float64)
    mv = np.asarray(s.motion, dtype=np.float64)
    dt = np.asarray(s.detect_times, dtype=np.float64)
    out: dict[str, list] = {c: [] for c in COLUMNS}
    for a, b in windows:
        pairs = (m0 >= a) & (m1 < b)  # both frames in the window: never across a cut
        m = float(np.median(mv[pairs])) if pairs.any() else float("nan")
        out["motion"].append(m)
        out["static"].append(bool(m < static_motion))  # NaN compares False
        out["text_area"].append(_mean_in(dt, np.asarray(s.text_area), a, b))
        out["face_area"].append(_mean_in(dt, np.asarray(s.face_area), a, b))
        out["brightness"].append(_mean_in(t, np.asarray(s.brightness), a, b))
        out["sharpness"].append(_mean_in(t, np.asarray(s.sharpness), a, b))
    return out


def detect_at(times: Sequence[float], windows: Sequence[tuple[float, float]],
              every: int) -> set[int]:
    """Which sampled frames the detectors see: every ``every``-th one, plus, for a window
    holding none of those (a short shot), its sampled frame nearest its middle."""
    chosen = set(range(0, len(times), every))
    t = np.asarray(times, dtype=np.float64)
    picked = t[sorted(chosen)] if chosen else np.zeros(0)
    for a, b in windows:
        if ((picked >= a) & (picked < b)).any():
            continue
        inside = np.flatnonzero((t >= a) & (t < b))
        if len(inside):
            chosen.add(int(inside[np.argmin(np.abs(t[inside] - (a + b) / 2))]))
    return chosen
