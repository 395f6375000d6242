"""What each training epoch draws from the clips (``io.pairs``: reading pairs, grouping clips).

A clip may carry several captions (aligned captions often repeat a span); as in image
captioning, each epoch draws one per clip, so a clip with many does not dominate. All of an
epoch's randomness comes from ``(seed, epoch)``: a resumed run draws what an uninterrupted would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby, islice
from pathlib import Path
from typing import Any

import numpy as np
import torch

from howtocap.atomic import atomic_write_bytes
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text, safe_name
from howtocap.io.pairs import Clip, PairSet, frame_times


def held_out_videos(video_ids: Iterable[str], eval_fraction: float, seed: int) -> set[str]:
    """The videos held out for evaluation: the same set for pairs and for shards of them."""
    vids = sorted(set(video_ids))
    if eval_fraction <= 0 or len(vids) < 2:
        return set()
    rng = np.random.default_rng([seed, 7919])
    n_eval = min(len(vids) - 1, max(1, int(round(eval_fraction * len(vids)))))
    return set(rng.permutation(vids)[:n_eval].tolist())


def split_by_video(clips: Sequence[Clip], eval_fraction: float, seed: int
                   ) -> tuple[list[Clip], list[Clip]]:
    """Hold out whole videos (clips of one video look alike, so a clip split would leak)."""
    held = held_out_videos((c.video_id for c in clips), eval_fraction, seed)
    return ([c for c in clips if c.video_id not in held], [c for c in clips if c.video_id in held])


# -- epoch plans -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Draw:
    clip: int
    caption: int
    times: tuple[float, ...]
    crop: tuple[float, float, float, float] | None = None  # x0, y0, w, h as image fractions


CROP_RATIO = (3 / 4, 4 / 3)  # torchvision's RandomResizedCrop aspect-ratio range


def crop_box(rng: np.random.Generator, scale: tuple[float, float],
             ratio: tuple[float, float] = CROP_RATIO) -> tuple[float, float, float, float]:
    """A random-resized-crop box as fractions of a square frame, by torchvision's rule (area
    uniform in ``scale``, log-uniform aspect ``ratio``, 10 tries, then the whole frame)."""
    lo, hi = np.log(ratio[0]), np.log(ratio[1])
    for _ in range(10):
        area = float(rng.uniform(scale[0], scale[1]))
        r = float(np.exp(rng.uniform(lo, hi)))
        w, h = np.sqrt(area * r), np.sqrt(area / r)
        if 0 < w <= 1 and 0 < h <= 1:
            return float(rng.uniform(0, 1 - w)), float(rng.uniform(0, 1 - h)), float(w), \
                float(h)
    return 0.0, 0.0, 1.0, 1.0


def apply_crop(frames: np.ndarray, box: tuple[float, float, float, float] | None) -> np.ndarray:
    """The same crop of every frame ``(k, H, W, 3)`` uint8, resized back to ``H x W`` (bicubic)
    so the encoder sees its usual input size."""
    if box is None:
        return frames
    from PIL import Image

    k, h, w = frames.shape[:3]
    x0, y0, bw, bh = box
    region = (x0 * w, y0 * h, (x0 + bw) * w, (y0 + bh) * h)
    return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(f)).resize(
        (w, h), Image.Resampling.BICUBIC, box=region)) for f in frames]).astype(np.uint8)


def clip_key(video_id: str, start: float, end: float) -> int:
    """A stable integer id of a clip: the queue's positives are the rows with the same id."""
    return int(hash_text(f"{video_id}|{float(start):.3f}|{float(end):.3f}")) & ((1 << 62) - 1)


def epoch_draws(clips: Sequence[Clip], epoch: int, seed: int, frames_per_clip: int,
                *, train: bool = True, crop_scale: tuple[float, float] | None = None
                ) -> list[Draw]:
    """One draw per clip: shuffled, a random caption and random frame times when training,
    and with ``crop_scale`` one crop box per clip (the same for its frames) from a stream of
    its own, so turning crops on changes nothing else."""
    if not train:
        return [Draw(i, 0, frame_times(c, frames_per_clip, None)) for i, c in enumerate(clips)]
    rng = np.random.default_rng([seed, epoch, 1])
    order = rng.permutation(len(clips))
    draws = [Draw(int(i), int(rng.integers(len(clips[i].captions))),
                  frame_times(clips[i], frames_per_clip, rng)) for i in order]
    if crop_scale is None:
        return draws
    crng = np.random.default_rng([seed, epoch, 4])
    return [Draw(d.clip, d.caption, d.times, crop_box(crng, crop_scale)) for d in draws]


def shard_batches(draws: Sequence[Draw], batch_size: int, rank: int = 0, world: int = 1
                  ) -> list[list[Draw]]:
    """This rank's batches: every rank gets the same number of equally sized batches."""
    per_rank = len(draws) // world
    mine = list(draws[rank:per_rank * world:world])
    return [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]


def grouped_batches(clips: Sequence[Clip], batch_size: int, clips_per_video: int, epoch: int,
                    seed: int) -> list[list[int]]:
    """Batches of groups of up to ``clips_per_video`` clips of one video (HowTo100M): same-video
    clips in a batch are the ranking loss's hard negatives. With 1 there are none: a video's
    clips are dealt to different batches (while there are enough), the "without intra-video
    negatives" arm of HowTo100M's Table 3."""
    rng = np.random.default_rng([seed, epoch, 2])
    by_video: dict[str, list[int]] = {}
    for i, c in enumerate(clips):
        by_video.setdefault(c.video_id, []).append(i)
    if clips_per_video == 1:
        videos = [sorted(by_video)[j] for j in rng.permutation(len(by_video))]
        flat = [i for vid in videos for i in rng.permutation(by_video[vid]).tolist()]
        n_batches = -(-len(flat) // batch_size)
        return [flat[b::n_batches] for b in range(n_batches)]
    groups: list[list[int]] = []
    for vid in sorted(by_video):
        idx = rng.permutation(by_video[vid]).tolist()
        groups += [idx[i:i + clips_per_video] for i in range(0, len(idx), clips_per_video)]
    flat = [i for g in (groups[j] for j in rng.permutation(len(groups))) for i in g]
    return [flat[i:i + batch_size] for i in range(0, len(flat), batch_size)]


# -- frames ----------------------------------------------------------------------------------
@dataclass
class DecodeFrames:
    """Frames decoded from the video file for every draw (no disk cache, slow)."""

    size: int

    def __call__(self, clip: Clip, times: Sequence[float]) -> np.ndarray:
        from howtocap.io.video import sample_frames

        return sample_frames(clip.video_path, times, size=self.size)


class PixelCache:
    """Frames decoded once per video at ``fps`` into ``<dir>/<size>/<video>.npy`` (uint8
    memmap): training reads a clip's seconds from it instead of seeking in the video, for disk
    (147 KB per second at 224 px) and times snapped to the cache's 1/fps grid."""

    def __init__(self, root: Path, size: int, fps: float = 1.0) -> None:
        self.dir = Path(root) / f"{size}px-{fps:g}fps"
        self.size, self.fps = size, fps
        self._open: dict[str, np.ndarray] = {}

    def path(self, clip: Clip) -> Path:
        return self.dir / f"{safe_name(clip.video_id)}.npy"

    def build(self, clip: Clip) -> None:
        import io

        from howtocap.io.video import iter_frames

        path = self.path(clip)
        if path.exists():
            return
        frames = [img for _, img in iter_frames(clip.video_path, fps=self.fps, size=self.size)]
        if not frames:
            raise InputError(clip.video_path, "no decodable video frames")
        buf = io.BytesIO()
        np.save(buf, np.stack(frames))
        atomic_write_bytes(path, buf.getvalue())

    def __call__(self, clip: Clip, times: Sequence[float]) -> np.ndarray:
        arr = self._open.get(clip.video_id)
        if arr is None:
            arr = self._open[clip.video_id] = np.load(self.path(clip), mmap_mode="r")
        rows = np.clip((np.asarray(times) * self.fps).astype(int), 0, len(arr) - 1)
        return np.asarray(arr[rows])


class ClipBatches(torch.utils.data.Dataset):
    """Item ``b`` is batch ``b`` of a plan: frames ``(B, k, S, S, 3)`` uint8, texts, video ids
    and clip keys."""

    def __init__(self, clips: Sequence[Clip], batches: Sequence[Sequence[Draw]],
                 frames: Callable[[Clip, Sequence[float]], np.ndarray]) -> None:
        self.clips, self.batches, self.frames = clips, batches, frames

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, b: int) -> tuple[np.ndarray, list[str], list[str], list[int]]:
        draws = [(self.clips[d.clip], d) for d in self.batches[b]]
        return (np.stack([apply_crop(self.frames(c, d.times), d.crop) for c, d in draws]),
                [c.captions[d.caption] for c, d in draws], [c.video_id for c, _ in draws],
                [clip_key(c.video_id, c.start, c.end) for c, _ in draws])


def _identity(x: object) -> object:
    return x


def batch_loader(dataset: ClipBatches, num_workers: int) -> torch.utils.data.DataLoader:
    """Batches in plan order (the plan already decided everything random)."""
    return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers,
                                       collate_fn=_identity)


def require_pairs(ps: PairSet, source: object) -> None:
    if not ps.clips:
        extra = f" ({len(ps.skipped)} video(s) skipped as missing or unreadable)" \
            if ps.skipped else ""
        raise HowtocapError(f"{source}: no usable caption–clip pairs to train on{extra}")


# -- WebDataset shards (streamed): shard order, shuffle buffers and draws still come from
# (seed, epoch), so a run resumed at an epoch boundary reads what an uninterrupted one would.
@dataclass
class ShardSource:
    """Training's view of an export: held-out videos and training samples per shard."""

    shards: Any  # howtocap.io.webdataset.ShardSet
    held: frozenset[str]
    train_counts: dict[str, int]  # shard -> samples not held out
    n_train: int
    n_eval: int
    n_pairs: int

    def plan(self, epoch: int, seed: int, rank: int, world: int, batch_size: int
             ) -> tuple[list[str], int]:
        """This rank's shards (dealt round-robin from an epoch-seeded permutation) and the batch
        count every rank can fill: DDP needs equal step counts, so all stop after the smallest
        rank's full batches (the rest wait for another epoch's deal)."""
        names = self.shards.shards
        order = np.random.default_rng([seed, epoch, 5]).permutation(len(names))
        mine = [names[i] for i in order[rank::world]]
        per_rank = [sum(self.train_counts.get(names[i], 0) for i in order[r::world])
                    for r in range(world)]
        return [self.shards.url(n) for n in mine], min(per_rank) // batch_size


def shard_source(path: str | Path, eval_fraction: float, seed: int, world: int = 1
                 ) -> ShardSource:
    """Open an export for training; held-out videos are chosen as for pairs (by video)."""
    from howtocap.io.webdataset import open_shards

    ss = open_shards(path)
    if len(ss.shards) < world:
        raise HowtocapError(f"{ss.root}: {len(ss.shards)} shard(s) for {world} processes; "
                            "export with a smaller --shard-size so every process reads at "
                            "least one shard")
    idx = ss.index
    held = frozenset(held_out_videos(idx["video_id"].astype(str), eval_fraction, seed))
    train = idx[~idx["video_id"].isin(held)]
    counts = {str(k): int(v) for k, v in train.groupby("shard").size().items()}
    return ShardSource(ss, held, counts, int(len(train)), int(len(idx) - len(train)),
                       int(idx["n_captions"].sum()))


def _sample_rng(seed: int, epoch: int, key: str) -> np.random.Generator:
    """Per-sample randomness that does not depend on the order samples arrive in."""
    return np.random.default_rng([seed, epoch, 6, hash_text(key)])


def pick_frames(n_have: int, k: int, rng: np.random.Generator | None) -> np.ndarray:
    """``k`` of a sample's ``n_have`` frames: one per equal segment, random when training (the
    stored frames are segment centres, so this mirrors ``frame_times`` one level up)."""
    u = rng.random(k) if rng is not None else np.full(k, 0.5)
    return np.minimum(((np.arange(k) + u) * n_have / k).astype(int), n_have - 1)


@dataclass
class DualItem:
    """A frames sample -> ``(frames (k, S, S, 3) uint8, one caption, video id, clip key)``."""

    frame_keys: list[str]
    k: int
    seed: int
    epoch: int
    train: bool = True
    crop_scale: tuple[float, float] | None = None

    def __call__(self, s: dict[str, Any]) -> tuple[np.ndarray, str, str, int]:
        from howtocap.io.video import decode_jpeg

        j = s["json"]
        rng = _sample_rng(self.seed, self.epoch, s["__key__"]) if self.train else None
        cap = int(rng.integers(len(j["captions"]))) if rng is not None else 0
        idx = pick_frames(len(self.frame_keys), self.k, rng)
        frames = np.stack([decode_jpeg(s[self.frame_keys[i]]) for i in idx])
        if rng is not None and self.crop_scale is not None:
            frames = apply_crop(frames, crop_box(rng, self.crop_scale))
        return frames, j["captions"][cap], j["video_id"], clip_key(j["video_id"], j["start"],
                                                                   j["end"])


@dataclass
class MEEItem:
    """An embeddings sample -> ``(max-pooled clip feature (dim,) float32, caption, video id)``."""

    seed: int
    epoch: int
    train: bool = True

    def __call__(self, s: dict[str, Any]) -> tuple[np.ndarray, str, str]:
        from howtocap.encoders.mee import max_pool_frames
        from howtocap.io.webdataset import decode_npy

        j = s["json"]
        cap = int(_sample_rng(self.seed, self.epoch, s["__key__"]).integers(
            len(j["captions"]))) if self.train else 0
        return (max_pool_frames(decode_npy(s["emb.npy"])), j["captions"][cap], j["video_id"])


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of ``size`` items (the last may be shorter)."""
    it = iter(items)
    return iter(lambda: list(islice(it, size)), [])


def _by_video(samples: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Runs of up to ``size`` consecutive same-video samples (shards are in video order)."""
    for _, run in groupby(samples, key=lambda s: s["json"]["video_id"]):
        yield from _chunks(run, size)


class ShardStream(torch.utils.data.IterableDataset):
    """One rank's training samples for one epoch, in chunks of up to ``chunk`` items: each
    loader worker reads every ``num_workers``-th shard through a shuffle buffer of ``buffer``
    units (a sample, or ``group`` clips of one video kept as the mee loss's hard negatives)."""

    def __init__(self, urls: list[str], held: frozenset[str], item: Callable[[dict], Any], *,
                 seed: int, epoch: int, rank: int, buffer: int, chunk: int,
                 group: int = 1) -> None:
        super().__init__()
        self.urls, self.held, self.item = urls, held, item
        self.seed, self.epoch, self.rank = seed, epoch, rank
        self.buffer, self.chunk, self.group = max(1, buffer), max(1, chunk), max(1, group)

    def __iter__(self) -> Iterator[list[Any]]:
        import webdataset as wds

        from howtocap.io.webdataset import iter_samples

        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        rng = random.Random(f"{self.seed}/{self.epoch}/{self.rank}/{wid}")
        samples = (s for s in iter_samples(self.urls[wid::nw])
                   if s["json"]["video_id"] not in self.held)
        units = wds.shuffle(self.buffer, min(self.buffer, 100), rng=rng)(
            _by_video(samples, self.group))
        yield from _chunks((self.item(s) for unit in units for s in unit), self.chunk)


def stream_batches(ds: ShardStream, n_batches: int, batch_size: int, num_workers: int
                   ) -> Iterator[list[Any]]:
    """Exactly ``n_batches`` batches of ``batch_size`` items from the stream's chunks (workers
    end on partial chunks, so batches are cut here, in the loader's fixed worker order)."""
    if n_batches <= 0:
        return
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers,
                                         collate_fn=_identity)
    items = (x for chunk in loader for x in chunk)
    try:
        for _ in range(n_batches):
            batch = list(islice(items, batch_size))
            if len(batch) < batch_size:
                raise HowtocapError(f"the shards ran out after fewer samples than "
                                    f"index.parquet lists ({ds.urls[:1]}…); export again")
            yield batch
    finally:
        items.close()  # stops the loader's workers


def held_out_samples(source: ShardSource) -> list[dict[str, Any]]:
    """The raw samples of the held-out videos (read once, kept for every evaluation)."""
    from howtocap.io.webdataset import iter_samples

    if not source.held:
        return []
    idx = source.shards.index
    wanted = set(idx.loc[idx["video_id"].isin(source.held), "shard"])
    names = [n for n in source.shards.shards if n in wanted]
    return [s for s in iter_samples([source.shards.url(n) for n in names])
            if s["json"]["video_id"] in source.held]


def sample_clip(s: dict[str, Any]) -> Clip:
    j = s["json"]
    return Clip(j["video_id"], Path(j.get("video_path", "")), float(j["start"]),
                float(j["end"]), [str(c) for c in j["captions"]], float(j.get("duration", 0)))


class SampleFrames:
    """Frames of held-out samples for evaluation (segment centres: ``times`` are ignored)."""

    def __init__(self, samples: list[dict[str, Any]], item: DualItem) -> None:
        self.by_clip = {(c.video_id, c.start, c.end): s
                        for c, s in ((sample_clip(s), s) for s in samples)}
        self.item = item

    def __call__(self, clip: Clip, times: Sequence[float]) -> np.ndarray:
        return self.item(self.by_clip[(clip.video_id, clip.start, clip.end)])[0]
