"""Gradual transitions (dissolves): our own detector beside PySceneDetect's (docs/shots.md),
whose detectors compare a frame with the one before or a fixed brightness: a dissolve changes
each frame too little for any threshold camera motion does not also cross. Each smoothed peak
of the signal is a transition, cut at the middle of the peak at half its prominence."""

from __future__ import annotations

from typing import Any

import numpy as np

SMOOTH_SECONDS = 0.3  # the moving average over the signal: a noisy plateau becomes one peak
BINS = (8, 4, 4)  # hue, saturation, value


def gradual_cuts(signal: np.ndarray, fps: float, threshold: float,
                 min_shot_seconds: float) -> list[int]:
    """The frame index of each transition's middle, from the per-frame distance ``signal``
    (module docstring)."""
    from scipy.signal import find_peaks

    if len(signal) < 3:  # no peak fits
        return []
    width = max(1, int(round(SMOOTH_SECONDS * fps)))
    smooth = np.convolve(signal, np.ones(width) / width, mode="same")
    peaks, props = find_peaks(smooth, height=threshold, prominence=threshold / 2,
                              distance=max(1, int(round(min_shot_seconds * fps))),
                              width=0, rel_height=0.5)
    # the middle of each peak at half its prominence, not its top: a hard cut makes a
    # plateau, whose noisy top may lie anywhere on it
    middles = (props["left_ips"] + props["right_ips"]) / 2
    return [int(round(m)) for m in middles]


def make_gradual_detector(fps: float, threshold: float, seconds: float,
                          min_shot_seconds: float) -> Any:
    """A PySceneDetect ``SceneDetector`` (so ``SceneManager`` decodes once for every detector):
    it keeps the histograms of the last ``2 * lag + 1`` frames and one distance per frame, and
    reports its cuts when the video ends (a peak needs the frames after it); ``.cuts`` holds
    them in seconds, so the caller can tell them from the other detector's."""
    from collections import deque

    import cv2
    from scenedetect.detector import SceneDetector

    lag = max(1, int(round(seconds * fps)))

    class GradualDetector(SceneDetector):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.window: deque[np.ndarray] = deque(maxlen=2 * lag + 1)
            self.signal: list[float] = []
            self.times: list[Any] = []
            self.cuts: list[float] = []

        def process_frame(self, timecode: Any, frame_img: np.ndarray) -> list[Any]:
            hsv = cv2.cvtColor(frame_img, cv2.COLOR_BGR2HSV)  # its HSV histogram, summing to 1
            hist = cv2.calcHist([hsv], [0, 1, 2], None, list(BINS),
                                [0, 180, 0, 256, 0, 256]).ravel()
            self.window.append((hist / max(float(hist.sum()), 1.0)).astype(np.float32))
            self.times.append(timecode)
            # the total variation distance (0 same, 1 disjoint) centred on the frame ``lag``
            # back; 0 for the first ``lag`` frames
            full = len(self.window) == self.window.maxlen
            self.signal.append(0.5 * float(np.abs(self.window[0] - self.window[-1]).sum())
                               if full else 0.0)
            return []

        def post_process(self, timecode: Any) -> list[Any]:
            n = len(self.signal)
            centred = np.zeros(n)
            centred[:max(n - lag, 0)] = self.signal[lag:]  # each distance at its middle frame
            found = gradual_cuts(centred, fps, threshold, min_shot_seconds)
            self.cuts = [float(self.times[i].seconds) for i in found]
            return [self.times[i] for i in found]

    return GradualDetector()
