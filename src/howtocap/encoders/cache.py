"""Per-second frame embeddings, cached per (video content, encoder, fps) (docs/encoders.md).

Alignment, search, evaluation and a second encoder all need them, and decoding is the costly
part: each video is decoded once, encoded in batches as it streams (flat memory). A file not
matching its header exactly is rebuilt, never trusted; writes are atomic, so concurrent workers
at worst compute a file twice, and within a process a per-file lock prevents even that.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from howtocap.atomic import atomic_write_bytes
from howtocap.encoders.defaults import FPS, FRAME_BATCH
from howtocap.errors import InputError
from howtocap.io import video as _video

if TYPE_CHECKING:  # the encoder module loads torch; reading the cache needs numpy only
    from howtocap.encoders.base import Encoder

FORMAT_VERSION = 1
_CHUNK = 1 << 20  # bytes hashed from each of head, middle and tail
_locks: dict[str, list] = {}  # path -> [its lock, callers holding it]
_locks_guard = threading.Lock()


@dataclass
class FrameEmbeddings:
    """Row ``i`` of ``emb`` (float16, L2-normalised before rounding) is the frame at
    ``(i + 0.5) / fps`` seconds. ``partial``: the video stopped decoding early."""

    emb: np.ndarray
    fps: float
    duration: float
    partial: bool
    encoder: str
    key: str

    @property
    def times(self) -> np.ndarray:
        """Centre time (seconds) of every row."""
        return (np.arange(len(self.emb)) + 0.5) / self.fps


def content_key(path: str | Path) -> str:
    """A fast content hash: file size plus blake2b of 1 MiB at the head, middle and tail. Instant
    on multi-GB videos, yet any edit that moves bytes changes it; name and modification time
    are ignored, so a copied or renamed video reuses its cache."""
    path = Path(path)
    try:
        size = path.stat().st_size
        h = hashlib.blake2b(digest_size=16)
        h.update(str(size).encode())
        with path.open("rb") as fh:
            if size <= 3 * _CHUNK:
                h.update(fh.read())
            else:
                for off in (0, (size - _CHUNK) // 2, size - _CHUNK):
                    fh.seek(off)
                    h.update(fh.read(_CHUNK))
    except OSError as e:
        raise InputError(path, f"cannot read file ({e.strerror or e})") from None
    return h.hexdigest()


def encoder_slug(name: str) -> str:
    """A folder name for an encoder name (unique: a hash suffix when characters were replaced)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "encoder"
    if slug != name:
        slug += "-" + hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return slug


def cache_path(cache_dir: Path, encoder_name: str, key: str, fps: float) -> Path:
    return Path(cache_dir) / "frames" / encoder_slug(encoder_name) / f"{key}_{fps:g}fps.npz"


def _checksum(arr: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(arr).tobytes(), digest_size=16).hexdigest()


def save(path: Path, fe: FrameEmbeddings) -> None:
    emb = np.ascontiguousarray(fe.emb, dtype=np.float16)
    header = {"version": FORMAT_VERSION, "encoder": fe.encoder, "key": fe.key, "fps": fe.fps,
              "duration": fe.duration, "partial": fe.partial, "shape": list(emb.shape),
              "dtype": "float16", "checksum": _checksum(emb)}
    buf = io.BytesIO()
    np.savez(buf, emb=emb, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))
    atomic_write_bytes(path, buf.getvalue())


def load(path: Path, *, encoder: str, key: str, fps: float) -> FrameEmbeddings | None:
    """The cached embeddings, or ``None`` (with a warning if a file was there but is bad)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(z["header"].tobytes().decode())
            emb = z["emb"]
        problem = None
        if header.get("version") != FORMAT_VERSION:
            problem = f"format version {header.get('version')} != {FORMAT_VERSION}"
        elif (header.get("encoder"), header.get("key")) != (encoder, key) \
                or abs(float(header.get("fps", -1)) - fps) > 1e-9:
            problem = "header names another encoder, video or fps"
        elif emb.dtype != np.float16 or list(emb.shape) != header.get("shape") \
                or emb.ndim != 2:
            problem = f"array {emb.dtype}{list(emb.shape)} != header {header.get('shape')}"
        elif _checksum(emb) != header.get("checksum"):
            problem = "checksum mismatch"
        elif not np.isfinite(emb).all():
            problem = "non-finite values"
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
            json.JSONDecodeError) as e:
        problem = f"unreadable ({type(e).__name__})"
    if problem:
        warnings.warn(f"{path}: corrupt frame-embedding cache ({problem}); rebuilding",
                      stacklevel=3)
        return None
    return FrameEmbeddings(emb=emb, fps=fps, duration=float(header["duration"]),
                           partial=bool(header["partial"]), encoder=encoder, key=key)


@contextmanager
def _holding(paths: Sequence[Path]) -> Iterator[None]:
    """The per-file locks of ``paths`` (in sorted order: two callers never deadlock), each
    dropped from the table when its last caller is done: a lock per file ever used stayed for
    the whole run, memory growing with its videos (benchmarks/results/align_scale.md)."""
    keys = sorted({str(p) for p in paths})
    with _locks_guard:
        entries = [_locks.setdefault(k, [threading.Lock(), 0]) for k in keys]
        for entry in entries:
            entry[1] += 1
    try:
        with ExitStack() as stack:
            for lock, _ in entries:
                stack.enter_context(lock)
            yield
    finally:
        with _locks_guard:
            for k, entry in zip(keys, entries, strict=True):
                entry[1] -= 1
                if not entry[1]:
                    del _locks[k]


def frame_embeddings(video_path: str | Path, encoder: Encoder, *, fps: float = FPS,
                     cache_dir: Path, batch_size: int = FRAME_BATCH) -> FrameEmbeddings:
    """Per-second (``fps``) frame embeddings of one video, from the cache or computed once."""
    return frame_embeddings_multi(video_path, [encoder], fps=fps, cache_dir=cache_dir,
                                  batch_size=batch_size)[0]


def frame_embeddings_multi(video_path: str | Path, encoders: list[Encoder], *,
                           fps: float = FPS, cache_dir: Path,
                           batch_size: int = FRAME_BATCH) -> list[FrameEmbeddings]:
    """Like ``frame_embeddings`` for several encoders, decoding the video at most once (at the
    largest ``image_size`` of those that miss the cache; each resizes from there)."""
    video_path = Path(video_path)
    if not encoders:
        return []
    key = content_key(video_path)
    paths = [cache_path(Path(cache_dir), e.name, key, fps) for e in encoders]
    with _holding(paths):
        results: list[FrameEmbeddings | None] = [
            load(p, encoder=e.name, key=key, fps=fps) for p, e in zip(paths, encoders, strict=True)]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            computed = _compute(video_path, [encoders[i] for i in missing], key=key, fps=fps,
                                batch_size=batch_size)
            for i, fe in zip(missing, computed, strict=True):
                save(paths[i], fe)
                results[i] = fe
    return [r for r in results if r is not None]


def _compute(video_path: Path, encoders: list[Encoder], *, key: str, fps: float,
             batch_size: int) -> list[FrameEmbeddings]:
    info = _video.probe(video_path)
    size = max(int(e.image_size) for e in encoders)
    stream = _video.iter_frames(video_path, fps=fps, size=size)
    frames = (frame for _, frame in stream)
    parts: list[list[np.ndarray]] = [[] for _ in encoders]
    for batch in map(np.stack, iter(lambda: list(islice(frames, batch_size)), [])):
        for out, enc in zip(parts, encoders, strict=True):
            out.append(enc.encode_images(batch, batch_size=batch_size).astype(np.float16))
    partial = bool(getattr(stream, "partial", False))
    if not any(len(p) for p in parts):
        why = getattr(stream, "error", None) or "no frames"
        raise InputError(video_path, f"no decodable video frames ({why})")
    duration = info.duration
    if partial or duration <= 0:
        duration = float(getattr(stream, "last_time", 0.0)) or sum(map(len, parts[0])) / fps
    return [FrameEmbeddings(emb=np.concatenate(p), fps=fps, duration=round(duration, 6),
                            partial=partial, encoder=enc.name, key=key)
            for p, enc in zip(parts, encoders, strict=True)]
