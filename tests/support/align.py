"""Synthetic frame embeddings, and a captioned run directory with cached frames: align
without a model."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform
from tests.support.stages import write_rows


@dataclass
class Frames:
    """Duck-typed stand-in for ``howtocap.encoders.cache.FrameEmbeddings``."""

    emb: np.ndarray
    fps: float = 1.0
    duration: float = 0.0
    partial: bool = False
    encoder: str = "synthetic"
    key: str = "k"


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


DIM = 16


def recorded_fingerprints(rundir: RunDir) -> dict[str, str]:
    """Every video's fingerprint recorded by align (``align_inputs/``), whole."""
    from howtocap.align.run import _inputs_dir, _recorded_fingerprints

    out: dict[str, str] = {}
    for path in sorted(_inputs_dir(rundir).glob("shard-*.parquet")):
        out.update(_recorded_fingerprints(path))
    return out


def whole_fingerprints(captions: pd.DataFrame, items: Sequence[VideoItem]) -> dict[str, str]:
    """The whole-table fingerprints ``align.run._fingerprint_stream`` streams: per video, a
    hash of its captions (each video's ``to_csv``) and video path."""
    from howtocap.align.run import _csv_per_group, _fingerprint

    cols = [c for c in ("start", "end", "text") if c in captions.columns]
    texts = _csv_per_group(captions, cols)
    return {it.video_id: _fingerprint(it, texts.get(it.video_id, "")) for it in items}


WORDS = ["add", "cut", "stir", "pour", "mix", "the board", "flour", "a screw", "the lid",
         "subscribe to my channel"]


class Stub:
    """An encoder without a model: a fixed random unit vector per text; frames only from
    the cache; clips pooled by the window mean."""

    name = "stub-16"
    dim = DIM
    pooling = "mean"

    def __init__(self) -> None:
        v = np.random.default_rng(3).standard_normal((512, DIM))
        self._table = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    @property
    def frame_encoder(self) -> Stub:
        return self

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        return self._table[[zlib.crc32(t.encode()) % len(self._table) for t in texts]]

    def encode_images(self, frames: np.ndarray, batch_size: int = 64) -> np.ndarray:
        raise RuntimeError("frames come from the cache")

    def pool_clips(self, frame_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   renormalize: bool = True) -> np.ndarray:
        from howtocap.encoders.windows import window_means

        return window_means(frame_emb, np.asarray(lo), np.asarray(hi), renormalize)


def make_run(root: Path, n: int = 24, seed: int = 0, shard_size: int = 10,
              late: int = 0) -> RunDir:
    """A captioned run of ``n`` short videos (frames in the cache) in shards of
    ``shard_size``, committed like the caption stage does, with rejected rows, repeated
    texts and chatter; ``late`` more videos appended after them whose ids sort first (``a…``:
    the run's shards are then not in id order)."""
    from howtocap.encoders.cache import FrameEmbeddings, cache_path, content_key, save

    rd = RunDir(root, shard_size=shard_size)
    for names in ([f"v{i:03d}" for i in range(n)], [f"a{i:03d}" for i in range(late)]):
        items, frames = [], []
        for vid in names:
            i = int(vid[1:]) + (1000 if vid[0] == "a" else 0)
            rng = np.random.default_rng([seed, i])
            path = root / "videos" / f"{vid}.mp4"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(f"video {i}\n".encode() * 4)
            items.append(VideoItem(vid, path))
            duration = float(rng.uniform(20, 40))
            k = int(rng.integers(1, 9))
            starts = np.sort(rng.uniform(-2, duration + 12, k)).round(1)  # some outside
            texts = [" ".join(rng.choice(WORDS, 2)) for _ in range(k)]
            frames.append(pd.DataFrame({
                "video_id": vid, "start": starts, "end": starts + 4, "text": texts,
                "source": "llm", "block": 0, "model": "m", "config_id": "",
                "rejected": np.where(rng.random(k) < 0.2, "filler", "")}))
            emb = rng.standard_normal((int(np.ceil(duration)), DIM))
            emb /= np.linalg.norm(emb, axis=1, keepdims=True)
            save(cache_path(rd.cache_dir, Stub.name, content_key(path), 1.0),
                 FrameEmbeddings(emb=emb.astype(np.float16), fps=1.0, duration=duration,
                                 partial=False, encoder=Stub.name, key=content_key(path)))
        if not items:
            continue
        rd.record_videos(items)
        write_rows(rd, "captions", conform(pd.concat(frames, ignore_index=True), "captions"))
    return rd
