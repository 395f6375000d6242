"""Planted videos for the signals step (tests and ``benchmarks/quality/bench_signals.py``):
each kind is what one signal should single out, encoded with PyAV (libx264) from frames drawn
here from real photographs (scikit-image's), so nothing is a hand-made pattern a detector
could not see in real footage."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

KINDS = ("slides", "talking_head", "still", "black", "blurred", "moving")
LINES = [["Step 1: remove the cover", "Loosen the four screws", "Keep them in a cup"],
         ["Step 2: check the filter", "Rinse it under water", "Let it dry fully"],
         ["Step 3: put it back", "Tighten by hand", "Then a quarter turn"],
         ["Tip: label the cables", "Take a photo first", "It saves time later"]]


def _photo(name: str) -> np.ndarray:
    from skimage import data

    img = getattr(data, name)()
    return np.stack([img] * 3, -1) if img.ndim == 2 else np.ascontiguousarray(img[..., :3])


def _cover(img: np.ndarray, w: int, h: int, zoom: float = 1.0, dx: float = 0.0,
           dy: float = 0.0) -> np.ndarray:
    """``img`` scaled to cover ``w x h`` (times ``zoom``), the crop shifted by (dx, dy) of the
    slack (-1..1) from the centre."""
    ih, iw = img.shape[:2]
    s = max(w / iw, h / ih) * zoom
    big = cv2.resize(img, (max(w, round(iw * s)), max(h, round(ih * s))),
                     interpolation=cv2.INTER_AREA)
    bh, bw = big.shape[:2]
    x = int(round((bw - w) / 2 * (1 + dx)))
    y = int(round((bh - h) / 2 * (1 + dy)))
    return big[y:y + h, x:x + w]


def _slide(w: int, h: int, k: int) -> np.ndarray:
    img = Image.new("RGB", (w, h), [(24, 40, 90), (245, 245, 240), (40, 90, 60)][k % 3])
    ink = (20, 20, 20) if k % 3 == 1 else (250, 250, 250)
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=max(12, h // 11))
    for i, line in enumerate(LINES[k % len(LINES)]):
        d.text((w // 12, h // 6 + i * h // 5), line, fill=ink, font=font)
    return np.asarray(img)


def frames(kind: str, seconds: float, w: int, h: int, fps: int, seed: int = 0) -> np.ndarray:
    """The frames of one planted video, ``(n, h, w, 3)`` uint8."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * fps))
    t = np.arange(n) / fps
    if kind == "slides":  # a new slide every 2 s, still in between
        cache: dict[int, np.ndarray] = {}
        return np.stack([cache.setdefault(int(x // 2) + seed, _slide(w, h, int(x // 2) + seed))
                         for x in t])
    if kind == "talking_head":  # the astronaut's portrait, swaying a little, as a presenter
        base = _cover(_photo("astronaut")[:400, 30:480], w, h)
        return np.stack([cv2.warpAffine(base, cv2.getRotationMatrix2D(
            (w / 2, h / 3), 0.5 * np.sin(2 * np.pi * 0.4 * x + seed), 1.0), (w, h),
            borderMode=cv2.BORDER_REFLECT) for x in t])
    if kind == "still":  # a photograph held on screen
        img = _cover(_photo(["coffee", "chelsea", "rocket"][seed % 3]), w, h)
        return np.repeat(img[None], n, axis=0)
    if kind == "black":
        return np.zeros((n, h, w, 3), np.uint8)
    if kind == "blurred":  # an out-of-focus shot drifting slowly
        img = _photo(["coffee", "rocket", "chelsea"][seed % 3])
        return np.stack([cv2.GaussianBlur(_cover(img, w, h, 1.2, -0.5 + x / seconds, 0), (0, 0),
                                          h / 40) for x in t])
    if kind == "moving":  # a fast pan and zoom across a photograph (handheld footage)
        img = _photo(["rocket", "coffee", "chelsea"][seed % 3])
        jitter = rng.normal(0, 0.05, size=(n, 2))
        return np.stack([_cover(img, w, h, 1.6 + 0.3 * np.sin(x), -0.9 + 1.8 * x / seconds
                                + j[0], 0.6 * np.sin(3 * x) + j[1])
                         for x, j in zip(t, jitter, strict=True)])
    raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")


def write_video(path: Path, rgb: np.ndarray, fps: int) -> Path:
    """Frames to an H.264 MP4 (yuv420p, CRF 23: a real codec's noise on stills)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = rgb.shape[2], rgb.shape[1], "yuv420p"
        s.options = {"crf": "23", "preset": "veryfast"}
        for f in rgb:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def make(out: Path, kind: str, *, seconds: float = 4.0, w: int = 480, h: int = 270,
         fps: int = 15, seed: int = 0, name: str | None = None) -> Path:
    return write_video(out / f"{name or kind}.mp4", frames(kind, seconds, w, h, fps, seed), fps)
