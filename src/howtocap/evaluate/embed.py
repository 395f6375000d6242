"""Clip embeddings for evaluation (the zero-shot protocol): ``n_frames`` frames at the middles
of equal slices of the clip, pooled by ``Encoder.encode_clip`` as align and search pool (the
mean of L2-normalised frames, CLIP4Clip-style; MEE the max it was trained with). Decoding
(PyAV, releases the GIL) runs a few clips ahead of the encoder in a small thread pool, bounded
so memory stays flat on benchmarks with thousands of clips."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from howtocap.atomic import atomic_write_bytes
from howtocap.encoders.base import Encoder
from howtocap.errors import HowtocapError
from howtocap.evaluate import N_FRAMES
from howtocap.evaluate.benchmarks import EvalSample
from howtocap.hashing import hash_text
from howtocap.io.video import probe, sample_frames, segment_times
from howtocap.progress import progress_bar


@dataclass
class ClipEmbeddings:
    """``emb[i]`` belongs to ``samples[i]``; rows with ``ok[i] == False`` are zeros."""

    emb: np.ndarray
    ok: np.ndarray
    errors: dict[str, str] = field(default_factory=dict)  # video_id -> one-line reason


def _decode(sample: EvalSample, n_frames: int, size: int) -> np.ndarray:
    if sample.video_path is None:
        raise HowtocapError("video file not found under the video folder")
    start, end = sample.start, sample.end
    if start is None or end is None:
        start, end = 0.0, probe(sample.video_path).duration
        if end <= 0:
            raise HowtocapError(f"{sample.video_path}: unknown or zero duration")
    return sample_frames(sample.video_path, segment_times(start, end, n_frames), size=size)


def _cache_file(cache_dir: Path, sample: EvalSample, encoder: Encoder, n_frames: int) -> Path:
    p = sample.video_path
    assert p is not None
    st = p.stat()
    key = f"{encoder.name}|{p.resolve()}|{st.st_size}|{st.st_mtime_ns}|{sample.start}|" \
          f"{sample.end}|{n_frames}|{encoder.image_size}" + \
          ("" if encoder.pooling == "mean" else f"|{encoder.pooling}")
    return cache_dir / "eval" / f"{hash_text(key):016x}.npy"


def video_embeddings(samples: Sequence[EvalSample], encoder: Encoder, *, n_frames: int = N_FRAMES,
                     cache_dir: Path | None = None, progress: bool = True,
                     decode_workers: int = 2, prefetch: int = 8) -> ClipEmbeddings:
    """One L2-normalised float32 embedding per sample (clips shared by samples are encoded once).
    An unreadable or missing video leaves its rows zero, ``ok`` False and a reason in ``errors``:
    one broken download does not sink a 3,000-clip benchmark. ``cache_dir/eval/<key>.npy`` (key:
    encoder, file size/mtime, clip times, ``n_frames``) makes re-runs nearly free.
    """
    if n_frames < 1:
        raise HowtocapError("n_frames must be at least 1")
    by_key: dict[tuple, EvalSample] = {}
    for s in samples:
        by_key.setdefault((str(s.video_path), s.start, s.end), s)
    first = list(by_key.values())
    unique = {key: i for i, key in enumerate(by_key)}
    clip_emb = np.zeros((len(first), encoder.dim), np.float32)
    clip_ok = np.zeros(len(first), bool)
    errors: dict[str, str] = {}

    todo: list[int] = []
    for i, s in enumerate(first):
        if cache_dir is not None and s.video_path is not None and s.video_path.exists():
            f = _cache_file(Path(cache_dir), s, encoder, n_frames)
            if f.exists():
                with contextlib.suppress(OSError, ValueError):  # a damaged entry is recomputed
                    clip_emb[i] = np.load(f)
                    clip_ok[i] = True
                    continue
        todo.append(i)

    bar = progress_bar("[bold]embed clips", disable=not progress, transient=True)
    with bar, ThreadPoolExecutor(max_workers=max(1, decode_workers)) as pool:
        task = bar.add_task("embed", total=len(todo))
        pending: list[tuple[int, Future]] = []
        nxt = 0
        while nxt < len(todo) or pending:
            while nxt < len(todo) and len(pending) < max(1, prefetch):
                i = todo[nxt]
                pending.append((i, pool.submit(_decode, first[i], n_frames, encoder.image_size)))
                nxt += 1
            i, fut = pending.pop(0)
            s = first[i]
            try:
                frames = fut.result()
                v = encoder.encode_clip(frames)  # MEE: max-pooled, as trained
                norm = float(np.linalg.norm(v))
                if not np.isfinite(norm) or norm == 0:
                    raise HowtocapError("the encoder returned a zero or non-finite embedding")
                clip_emb[i] = v / norm
                clip_ok[i] = True
                if cache_dir is not None:
                    buf = io.BytesIO()
                    np.save(buf, clip_emb[i])
                    atomic_write_bytes(_cache_file(Path(cache_dir), s, encoder, n_frames),
                                       buf.getvalue())
            except Exception as exc:  # noqa: BLE001 - any per-video failure is a skip
                msg = str(exc) if isinstance(exc, HowtocapError) else f"{type(exc).__name__}: {exc}"
                errors.setdefault(s.video_id, " ".join(msg.split())[:300])
            bar.advance(task)

    idx = np.array([unique[(str(s.video_path), s.start, s.end)] for s in samples], np.int64)
    return ClipEmbeddings(clip_emb[idx], clip_ok[idx], errors)
