"""Frame decoding with PyAV: probe a file, stream frames at a fixed rate, sample given times.
At HowTo100M scale decoding dominates: each video is decoded once, with codec threading;
frames not kept are never converted to RGB, the kept ones scaled by libswscale straight to the
encoder's size. Frame ``i`` at ``fps`` is the one nearest ``(i + 0.5) / fps`` seconds, which
is also what row ``i`` of the frame-embedding cache means."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import av
import numpy as np

from howtocap.errors import HowtocapError, InputError, short_reason
from howtocap.io import JPEG_QUALITY

if TYPE_CHECKING:
    from PIL import Image

@dataclass
class VideoInfo:
    path: Path
    duration: float
    width: int
    height: int
    fps: float
    has_video: bool
    has_audio: bool


def _open(path: Path) -> av.container.InputContainer:
    """The container, which has a video stream (``streams.video[0]``)."""
    if not path.exists():
        raise InputError(path, "file does not exist")
    if path.is_dir():
        raise InputError(path, "is a folder, not a video file")
    try:
        container = av.open(str(path), metadata_errors="ignore")
    except (av.FFmpegError, UnicodeDecodeError, ValueError) as e:
        raise InputError(path, f"not a readable video file ({short_reason(e)})") from None
    if not container.streams.video:
        container.close()
        raise InputError(path, "has no video stream")
    return container


def _declared_duration(container: av.container.InputContainer, vs: av.VideoStream) -> float:
    """Duration the header claims (0 when unknown): of the video stream, else the container."""
    if vs.duration is not None and vs.time_base is not None and vs.duration > 0:
        return float(vs.duration * vs.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / av.time_base
    return 0.0


def probe(path: str | Path) -> VideoInfo:
    """Container metadata without decoding; raises ``InputError`` when there is no video."""
    path = Path(path)
    with _open(path) as c:
        vs = c.streams.video[0]
        rate = vs.average_rate or vs.guessed_rate or vs.base_rate
        return VideoInfo(path=path, duration=max(_declared_duration(c, vs), 0.0),
                         width=int(vs.codec_context.width), height=int(vs.codec_context.height),
                         fps=float(rate) if rate else 0.0, has_video=True,
                         has_audio=bool(c.streams.audio))


def _to_rgb(frame: av.VideoFrame, size: int | None, fit: bool = False) -> np.ndarray:
    """Shorter side scaled to ``size`` (keeping aspect), then a centre crop ``size x size``;
    ``None`` keeps the frame's size."""
    w, h = frame.width, frame.height
    if fit and size is not None:  # the whole frame, shorter side down to ``size``, never up
        size = min(size, w, h)
    if size is not None:
        w, h = ((size, max(size, round(h * size / w))) if w <= h
                else (max(size, round(w * size / h)), size))
    # AREA filtering avoids aliasing on big downscales (720p -> 224) at a small cost.
    img = frame.to_ndarray(format="rgb24", width=w, height=h, interpolation="AREA")
    if fit or size is None:
        return img
    top, left = (h - size) // 2, (w - size) // 2
    return np.ascontiguousarray(img[top:top + size, left:left + size])


class FrameStream(Iterator[tuple[float, np.ndarray]]):
    """Iterator of ``(time, rgb)`` pairs that survives a broken stream: a file that stops
    decoding part-way ends the iteration normally and sets ``partial`` (``error``: the decoder's
    one line), so a caller keeps what decoded and knows it is incomplete (once exhausted)."""

    def __init__(self, path: Path, fps: float, size: int | None, fit: bool = False) -> None:
        if fps <= 0:
            raise HowtocapError(f"fps must be positive, got {fps}")
        self.path, self.fps, self.size, self.fit = path, fps, size, fit
        self.partial = False
        self.error: str | None = None
        self.n_decoded = 0  # decoded (not converted) frames: a cheap progress/throughput figure
        self.last_time = 0.0
        self._gen = self._run()

    def __next__(self) -> tuple[float, np.ndarray]:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def _frames(self, container: av.container.InputContainer,
                stream: av.VideoStream) -> Iterator[av.VideoFrame]:
        """Decoded frames; a decode/demux error ends the stream and marks it partial."""
        try:
            for packet in container.demux(stream):
                for frame in packet.decode():
                    self.n_decoded += 1
                    yield frame
        except (av.FFmpegError, EOFError) as e:
            self.partial = True
            self.error = short_reason(e)

    def _run(self) -> Iterator[tuple[float, np.ndarray]]:
        with _open(self.path) as container:  # closed with the generator, however it ends
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            tb = float(stream.time_base) if stream.time_base else 1.0 / av.time_base
            start = stream.start_time * tb if stream.start_time is not None else None
            rate = stream.average_rate or stream.guessed_rate
            frame_dur = 1.0 / float(rate) if rate else 1.0 / 25
            step = 1.0 / self.fps
            i = 0
            prev: tuple[float, av.VideoFrame] | None = None
            converted: tuple[av.VideoFrame | None, np.ndarray | None] = (None, None)
            for frame in self._frames(container, stream):
                if frame.pts is None:
                    t = (prev[0] + frame_dur) if prev else 0.0
                else:
                    t = frame.pts * tb
                    if start is None:
                        start = t
                    t -= start
                target = (i + 0.5) * step
                while t >= target:
                    # the previous frame or this one, whichever is nearer to the target time;
                    # several targets can share a frame when the source rate is below ``fps``
                    best = frame if prev is None or (t - target) <= (target - prev[0]) else prev[1]
                    if converted[0] is not best:
                        converted = (best, _to_rgb(best, self.size, self.fit))
                    yield round(target, 6), converted[1]
                    i += 1
                    target = (i + 0.5) * step
                prev = (t, frame)
                self.last_time = t + frame_dur
            declared = _declared_duration(container, stream)
            if not self.partial and declared > 0 and \
                    self.last_time < declared - max(1.0, 2 * step):
                # demuxers often stop quietly at a cut; the header still knows the real length
                self.partial = True
                self.error = f"stream ends at {self.last_time:.1f} s of {declared:.1f} s"
            # the last frame covers its own duration: emit the targets that fall inside it
            if prev is not None:
                end = prev[0] + frame_dur
                while (i + 0.5) * step < end - 1e-6:
                    if converted[0] is not prev[1]:
                        converted = (prev[1], _to_rgb(prev[1], self.size, self.fit))
                    yield round((i + 0.5) * step, 6), converted[1]
                    i += 1


def iter_frames(path: str | Path, fps: float = 1.0, size: int | None = 224,
                fit: bool = False) -> FrameStream:
    """Stream one RGB uint8 frame ``(H, W, 3)`` per ``1/fps`` seconds, decoding the file once.
    ``size``: shorter side scaled to it, centre-cropped square (what CLIP-style encoders
    expect); ``None`` keeps the full frame; ``fit`` keeps the whole frame, its shorter side
    scaled down to ``size`` (never up). ``.partial`` tells, once iterated, a cut-short file."""
    return FrameStream(Path(path), fps, size, fit)


def segment_times(start: float, end: float, n: int,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """One time in each of ``n`` equal segments of ``[start, end]``: the centres (evaluation,
    frame captioning) or, with ``rng``, a uniform draw inside each segment (training)."""
    u = rng.random(n) if rng is not None else np.full(n, 0.5)
    return start + (np.arange(n) + u) * ((end - start) / n)


def sample_frames(path: str | Path, times: Sequence[float],
                  size: int | None = 224, *, fit: bool = False) -> np.ndarray:
    """Frames nearest to each time (seconds), by seeking; for training and evaluation.
    ``fit``: keep the whole frame (no centre crop) with its shorter side scaled down to
    ``size`` (never up), as a multimodal LLM is sent it. Times past the end give the last
    frame. Raises ``InputError`` if nothing decodes."""
    path = Path(path)
    times = [float(t) for t in times]
    out: list[np.ndarray | None] = [None] * len(times)
    if not times:
        return np.zeros((0, size or 0, size or 0, 3), np.uint8)
    with _open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        tb = float(stream.time_base)
        start = stream.start_time * tb if stream.start_time is not None else 0.0
        rate = stream.average_rate or stream.guessed_rate
        frame_dur = 1.0 / float(rate) if rate else 1.0 / 25
        last: np.ndarray | None = None
        order = sorted(range(len(times)), key=lambda k: times[k])
        pos = 0
        while pos < len(order):
            try:
                container.seek(int((max(times[order[pos]], 0.0) + start) / tb), stream=stream,
                               backward=True, any_frame=False)
                prev: tuple[float, av.VideoFrame] | None = None
                pos_at_seek = pos
                for packet in container.demux(stream):
                    done = False
                    for frame in packet.decode():
                        t = frame.pts * tb - start if frame.pts is not None else 0.0
                        while pos < len(order) and t >= times[order[pos]] - frame_dur / 2:
                            want = times[order[pos]]
                            best = frame if prev is None or t - want <= want - prev[0] else prev[1]
                            out[order[pos]] = last = _to_rgb(best, size, fit)
                            pos += 1
                        prev = (t, frame)
                        # once this seek has served a time, a far-away next time is cheaper to
                        # reach by seeking again (each seek serves >= 1 time, so this ends)
                        if pos >= len(order) or (pos > pos_at_seek
                                                 and times[order[pos]] - t > 2.0):
                            done = True
                            break
                    if done:
                        break
                else:  # end of file: the remaining times get the last frame (below)
                    if prev is not None:
                        last = _to_rgb(prev[1], size, fit)
                    pos = len(order)
            except (av.FFmpegError, EOFError) as e:
                if last is None:
                    raise InputError(path, f"could not decode frames ({short_reason(e)})") from None
                pos = len(order)
    out = [last if o is None else o for o in out]
    if any(o is None for o in out):
        raise InputError(path, "no decodable video frames")
    return np.stack(out)  # type: ignore[arg-type]


def frame_at(path: str | Path, t: float) -> Image.Image:
    """The first frame at or after ``t`` seconds (the last one past the end), as a player shows
    it: the search page's thumbnails and the clip export's ``.jpg`` take it at a window's
    middle (``clips.window.window_middle``), so they show the same picture."""
    path = Path(path)
    with _open(path) as container:
        stream = container.streams.video[0]
        last = None
        try:
            if t > 0 and stream.time_base:
                container.seek(int(t / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                last = frame
                if frame.time is not None and frame.time >= t - 1e-3:
                    break
        except (av.FFmpegError, EOFError) as exc:
            if last is None:
                raise InputError(path, f"cannot decode video ({short_reason(exc)})") from None
        if last is None:
            raise InputError(path, f"no frame at {t:.2f} s")
        return last.to_image().convert("RGB")


def encode_jpeg(img: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def decode_jpeg(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))
