"""The training loop shared by the dual encoder and the HowTo100M baseline.

AdamW (no decay on biases, norms and the temperature), linear warmup then cosine decay per
step, gradient clipping, autocast + GradScaler on CUDA only, DDP when launched by ``torchrun``
(``WORLD_SIZE`` > 1: gloo on CPU, NCCL on GPU). Each rank takes an equal shard of the epoch's
draws; InfoNCE scores each rank's texts against the clips of *all* ranks (an autograd-aware
all-gather), as CLIP does, so the effective batch is ``batch_size * world_size``.

Every epoch ends with an evaluation on held-out videos (text-to-video R@K), a row in
``train_log.csv``, a refreshed ``train_log.png`` and an atomic checkpoint. All randomness of
epoch ``e`` is drawn from ``(seed, e)`` and the optimizer/scheduler/scaler/RNG states are saved,
so ``resume`` continues bit-for-bit where an interrupted run stopped (on the CPU).

HowToCaption's BLIP-style recipe (``--recipe howtocaption``) adds, for the dual encoder: a
momentum model (EMA of the trained one), a FIFO queue of its text and video embeddings used as
extra candidates, soft targets mixing its softmax similarities with the positives, and
random-resized crops of the frames. Momentum model and queue are saved in the checkpoint, so
resume stays exact.

From WebDataset shards (``ShardDualTask``, ``ShardMEETask``) an epoch streams this rank's share
of the shards through a shuffle buffer instead of indexing clips held in memory; the epoch is
still a function of ``(seed, epoch)``, so resume works the same way, at epoch boundaries.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from rich.progress import TextColumn
from torch import nn

from howtocap.atomic import atomic_write_text
from howtocap.encoders import checkpoint as ck
from howtocap.encoders.base import Encoder
from howtocap.encoders.dual import DualModel
from howtocap.encoders.mee import JointEmbedding, max_pool_clip
from howtocap.errors import HowtocapError
from howtocap.io.pairs import Clip
from howtocap.metrics import retrieval_metrics
from howtocap.progress import console, progress_bar
from howtocap.train.data import (
    ClipBatches,
    DecodeFrames,
    DualItem,
    MEEItem,
    PixelCache,
    SampleFrames,
    ShardSource,
    ShardStream,
    batch_loader,
    epoch_draws,
    grouped_batches,
    held_out_samples,
    sample_clip,
    shard_batches,
    stream_batches,
)
from howtocap.train.losses import (
    FeatureQueue,
    ema_update,
    frozen_copy_regulariser,
    info_nce,
    itc_targets,
    max_margin_ranking,
    soft_info_nce,
)


@dataclass
class TrainConfig:
    out_dir: str
    model: str = "dual"  # dual | mee
    encoder: str = "default"
    epochs: int = 5
    batch_size: int = 32
    lr: float = 1e-5
    weight_decay: float = 0.05
    frames_per_clip: int = 4
    alpha: float = 0.0  # L_align: HowToCaption uses 0.1 only for the second-round fine-tune
    temperature: float | None = None
    warmup: float = 0.05  # fraction of all steps
    grad_clip: float = 20.0
    seed: int = 0
    eval_fraction: float = 0.1
    frames: str = "decode"  # decode | pixels | webdataset (dual); mee: cached frame embeddings
    cache_dir: str | None = None
    num_workers: int = 0
    amp: bool = True
    mee_dim: int = 256
    margin: float = 0.1
    clips_per_video: int = 2
    eval_batch_size: int = 64
    train_params: str | None = None  # regex over parameter names; None = all
    webdataset: str | None = None  # a shard folder streamed instead of pairs held in memory
    shuffle_buffer: int = 1000  # samples (mee: groups of clips) per loader worker
    optimizer: str = "adamw"  # adamw | adam
    momentum: float = 0.0  # EMA factor of the momentum model (0 = none)
    queue_size: int = 0  # momentum embeddings kept as extra candidates (0 = none)
    soft_labels: float = 0.0  # weight of the teacher's softmax in the targets (0 = one-hot)
    crop_scale: tuple[float, float] | None = None  # random-resized-crop area range
    eval_frames: int | None = None  # frames per clip at evaluation (None = frames_per_clip)
    recipe: str | None = None  # the preset the values came from (recorded, not read)


# -- distributed -----------------------------------------------------------------------------
def dist_info() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun's environment (``0, 1, 0`` alone)."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def setup_distributed(device: str | torch.device | None) -> tuple[int, int, torch.device]:
    rank, world, local = dist_info()
    if device is not None:
        dev = torch.device(device)
    elif torch.cuda.is_available():
        dev = torch.device("cuda", local if world > 1 else torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return rank, world, dev


class _GatherWithGrad(torch.autograd.Function):
    """All ranks' rows, concatenated; the gradient flows back to each rank's own rows.

    Every rank's loss depends on every rank's rows, so a row's gradient is the sum over ranks
    of the gathered gradient (an all-reduce), sliced back to this rank.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        ctx.rank, ctx.n = dist.get_rank(), len(x)
        return torch.cat(parts, 0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.n:(ctx.rank + 1) * ctx.n]


def gather_all(x: torch.Tensor, world: int) -> torch.Tensor:
    return x if world == 1 else _GatherWithGrad.apply(x)


@torch.no_grad()
def gather_nograd(x: torch.Tensor, world: int) -> torch.Tensor:
    """All ranks' rows, no gradient (momentum embeddings and ids for the queue)."""
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, 0)


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


# -- schedule --------------------------------------------------------------------------------
def warmup_cosine(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))
    return f


def param_groups(module: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices only: decaying biases, norm gains or the temperature only hurts."""
    decay, no_decay = [], []
    for _, p in module.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    if not decay and not no_decay:
        raise HowtocapError("the model has no trainable parameters")
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def freeze_except(model: DualModel, pattern: str) -> None:
    """Train only parameters whose name matches ``pattern`` (and a learnable temperature).

    Freezing the towers and training a small head is far cheaper: no backward pass runs through
    a frozen tower.
    """
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise HowtocapError(f"--train-params {pattern!r} is not a regular expression ({exc})"
                            ) from None
    names = [n for n, _ in model.named_parameters() if not n.startswith("logit_scale.")]
    hits = [n for n in names if rx.search(n)]
    if not hits:
        raise HowtocapError(f"--train-params {pattern!r} matches no parameter; names look like "
                            f"{', '.join(names[:3])} … {', '.join(names[-3:])}")
    for n, p in model.named_parameters():
        if not n.startswith("logit_scale.") and n not in hits:
            p.requires_grad_(False)


# -- tasks -----------------------------------------------------------------------------------
class DualTask:
    """Fine-tune the whole encoder (every parameter that requires grad) with InfoNCE."""

    kind = "dual"

    def __init__(self, cfg: TrainConfig, encoder: Encoder, train: list[Clip], held: list[Clip],
                 device: torch.device, rank: int, world: int) -> None:
        self.cfg, self.train_clips, self.eval_clips = cfg, train, held
        self.rank, self.world, self.device = rank, world, device
        self.model = DualModel(encoder, cfg.temperature).to(device)
        if cfg.train_params:
            freeze_except(self.model, cfg.train_params)
        self.frozen: DualModel | None = None
        if cfg.alpha > 0:
            self.frozen = copy.deepcopy(self.model).eval()
            for p in self.frozen.parameters():
                p.requires_grad_(False)
        self.momentum_model: DualModel | None = None
        if cfg.momentum > 0:
            self.momentum_model = copy.deepcopy(self.model).eval()
            for p in self.momentum_model.parameters():
                p.requires_grad_(False)
        self.queue = FeatureQueue(cfg.queue_size, encoder.dim).to(device) \
            if cfg.queue_size > 0 else None
        self.frames: Callable[..., np.ndarray] = self.frame_source(cfg, encoder.image_size)
        self.net: nn.Module = self.model
        self.soft_labels = cfg.soft_labels

    def frame_source(self, cfg: TrainConfig, size: int) -> Callable[..., np.ndarray]:
        if cfg.frames == "pixels":
            root = Path(cfg.cache_dir) if cfg.cache_dir else Path(cfg.out_dir) / "cache"
            return PixelCache(root / "pixels", size)
        if cfg.frames == "decode":
            return DecodeFrames(size)
        raise HowtocapError(f"--frames must be decode or pixels, not {cfg.frames!r}")

    def identity(self) -> dict:
        return ck.arch_identity("dual", self.cfg.encoder, self.model,
                                temperature=self.cfg.temperature)

    def prepare(self, show: bool) -> None:
        if not isinstance(self.frames, PixelCache):
            return
        if self.rank == 0:
            vids = {c.video_id: c for c in self.train_clips + self.eval_clips}
            for c in _track(list(vids.values()), "caching frames", show):
                self.frames.build(c)
        barrier(self.world)

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        draws = epoch_draws(self.train_clips, epoch, self.cfg.seed, self.cfg.frames_per_clip,
                            crop_scale=self.cfg.crop_scale)
        plan = shard_batches(draws, self.cfg.batch_size, self.rank, self.world)
        ds = ClipBatches(self.train_clips, plan, self.frames)
        return len(plan), batch_loader(ds, self.cfg.num_workers)

    @property
    def blip_style(self) -> bool:
        return self.momentum_model is not None or self.queue is not None or self.soft_labels > 0

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        frames, texts = batch[0], batch[1]
        t, v, scale = self.net(frames, texts)
        if self.blip_style:
            main = self.itc_loss(frames, texts, batch[3], t, v, scale)
        elif self.world > 1:
            main = info_nce(t, v, scale, text_all=gather_all(t, self.world),
                            video_all=gather_all(v, self.world), offset=self.rank * len(t))
        else:
            main = info_nce(t, v, scale)
        parts = {"loss_main": main.item(), "logit_scale": scale.item()}
        if self.frozen is None:
            return main, parts
        with torch.no_grad():
            t_ref, v_ref, _ = self.frozen(frames, texts)
        reg = frozen_copy_regulariser(t, v, t_ref, v_ref)
        parts["reg"] = reg.item()
        return main + self.cfg.alpha * reg, parts

    def itc_loss(self, frames: np.ndarray, texts: list[str], keys: list[int], t: torch.Tensor,
                 v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """BLIP's ITC: candidates are the momentum model's embeddings of every rank's batch
        plus the queue (the online ones without a momentum model); targets are the positives,
        mixed with the teacher's softmax when ``soft_labels`` > 0; then the batch is queued."""
        ids = torch.as_tensor(keys, dtype=torch.long, device=t.device)
        with torch.no_grad():
            if self.momentum_model is not None:
                t_m, v_m, _ = self.momentum_model(frames, texts)
            else:
                t_m, v_m = t.detach(), v.detach()
            t_all, v_all = gather_nograd(t_m, self.world), gather_nograd(v_m, self.world)
            ids_all = gather_nograd(ids, self.world)
            tk, vk, idk = t_all, v_all, ids_all
            if self.queue is not None:
                tq, vq, iq = self.queue.contents()
                tk, vk, idk = torch.cat([t_all, tq]), torch.cat([v_all, vq]), torch.cat([ids_all,
                                                                                          iq])
            s = scale.detach()
            t2v_m = s * t_m.float() @ vk.float().t() if self.soft_labels > 0 else None
            v2t_m = s * v_m.float() @ tk.float().t() if self.soft_labels > 0 else None
            tgt_t2v = itc_targets(ids, idk, t2v_m, self.soft_labels)
            tgt_v2t = itc_targets(ids, idk, v2t_m, self.soft_labels)
        if self.momentum_model is None:  # online keys keep their gradient (plain InfoNCE)
            tk, vk = gather_all(t, self.world), gather_all(v, self.world)
        loss = soft_info_nce(t, v, scale, tk, vk, tgt_t2v, tgt_v2t)
        if self.queue is not None:
            self.queue.enqueue(t_all, v_all, ids_all)
        return loss

    def after_step(self) -> None:
        if self.momentum_model is not None:
            ema_update(self.model, self.momentum_model, self.cfg.momentum)

    def extra_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.momentum_model is not None:
            out["momentum_model"] = self.momentum_model.state_dict()
        if self.queue is not None:
            out["queue"] = self.queue.state_dict()
        return out

    def load_extra_state(self, state: dict[str, Any], path: Path) -> None:
        for name, mod in (("momentum_model", self.momentum_model), ("queue", self.queue)):
            if mod is None:
                continue
            if name not in state:
                raise HowtocapError(f"{path}: the checkpoint has no {name.replace('_', ' ')}; "
                                    "resume with the recipe/options it was trained with")
            try:
                mod.load_state_dict(state[name])
            except RuntimeError:
                raise HowtocapError(f"{path}: its {name.replace('_', ' ')} does not match this "
                                    "run's (another --queue-size?); resume with the same "
                                    "options") from None

    @torch.no_grad()
    def embed_eval(self) -> tuple[torch.Tensor, torch.Tensor]:
        draws = epoch_draws(self.eval_clips, 0, 0, self.cfg.eval_frames or self.cfg.frames_per_clip,
                            train=False)
        plan = shard_batches(draws, self.cfg.eval_batch_size)
        ts, vs = [], []
        for frames, texts, *_ in batch_loader(ClipBatches(self.eval_clips, plan, self.frames),
                                             self.cfg.num_workers):
            t, v, _ = self.model(frames, texts)
            ts.append(t.float().cpu())
            vs.append(v.float().cpu())
        return torch.cat(ts), torch.cat(vs)


class MEETask:
    """HowTo100M's gated embedding units on frozen, cached features (max-margin ranking)."""

    kind = "mee"

    def __init__(self, cfg: TrainConfig, encoder: Encoder, train: list[Clip], held: list[Clip],
                 device: torch.device, rank: int, world: int) -> None:
        self.cfg, self.train_clips, self.eval_clips = cfg, train, held
        self.rank, self.world, self.device = rank, world, device
        self.encoder = encoder.eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        self.model = JointEmbedding(encoder.dim, encoder.dim, cfg.mee_dim).to(device)
        self.net: nn.Module = self.model

    def identity(self) -> dict:
        return ck.arch_identity("mee", self.cfg.encoder, self.model, video_dim=self.encoder.dim,
                                text_dim=self.encoder.dim, dim=self.cfg.mee_dim)

    def after_step(self) -> None:
        """No momentum model for the baseline."""

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any], path: Path) -> None:
        """Nothing beyond the weights."""

    def prepare(self, show: bool) -> None:
        """Frozen features, once: max-pooled frame embeddings per clip, one vector per caption."""
        from howtocap.encoders.cache import frame_embeddings

        cache = Path(self.cfg.cache_dir) if self.cfg.cache_dir else Path(self.cfg.out_dir) / "cache"
        clips = self.train_clips + self.eval_clips
        per_video: dict[str, Any] = {}
        for c in _track(list({c.video_id: c for c in clips}.values()), "frame embeddings", show):
            per_video[c.video_id] = frame_embeddings(c.video_path, self.encoder, fps=1.0,
                                                     cache_dir=cache)
        self.video = torch.from_numpy(np.stack([
            max_pool_clip(np.asarray(per_video[c.video_id].emb), per_video[c.video_id].fps,
                          c.start, c.end) for c in clips]))
        texts = [t for c in clips for t in c.captions]
        emb = torch.from_numpy(self.encoder.encode_texts(texts))
        self.text: list[torch.Tensor] = []
        i = 0
        for c in clips:
            self.text.append(emb[i:i + len(c.captions)])
            i += len(c.captions)
        self.n_train = len(self.train_clips)

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        groups = grouped_batches(self.train_clips, self.cfg.batch_size, self.cfg.clips_per_video,
                                 epoch, self.cfg.seed)
        n = len(groups) // self.world
        mine = groups[self.rank:n * self.world:self.world]
        rng = np.random.default_rng([self.cfg.seed, epoch, 3])
        pick = [int(rng.integers(len(c.captions))) for c in self.train_clips]
        out = [(self.video[idx], torch.stack([self.text[i][pick[i]] for i in idx]),
                [self.train_clips[i].video_id for i in idx]) for idx in mine]
        return len(out), out

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        video, text, vids = batch
        v, t = self.net(video.to(self.device), text.to(self.device))
        loss = max_margin_ranking(t @ v.t(), vids, margin=self.cfg.margin)
        return loss, {"loss_main": loss.item()}

    @torch.no_grad()
    def embed_eval(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = list(range(self.n_train, self.n_train + len(self.eval_clips)))
        v, t = self.model(self.video[idx].to(self.device),
                          torch.stack([self.text[i][0] for i in idx]).to(self.device))
        return t.cpu(), v.cpu()


class ShardDualTask(DualTask):
    """``DualTask`` streaming frames from WebDataset shards (``content: frames``)."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, source: ShardSource,
                 device: torch.device, rank: int, world: int) -> None:
        meta = source.shards.meta
        if meta["content"] != "frames":
            raise HowtocapError(f"{source.root}: holds frame embeddings; the dual encoder "
                                "fine-tunes on frames: export with --content frames (or train "
                                "--model mee on these shards)")
        if cfg.frames_per_clip > int(meta["frames_per_clip"]):
            raise HowtocapError(f"{source.root}: the shards hold {meta['frames_per_clip']} "
                                f"frames per clip; pass --frames-per-clip "
                                f"{meta['frames_per_clip']} or less, or export more frames")
        self.source = source
        self.frame_keys = list(meta["frame_keys"])
        super().__init__(cfg, encoder, [], [], device, rank, world)

    def frame_source(self, cfg: TrainConfig, size: int) -> Callable[..., np.ndarray]:
        return DecodeFrames(size)  # not used: frames come from the shards

    def item(self, epoch: int, train: bool = True) -> DualItem:
        k = self.cfg.frames_per_clip if train else min(
            self.cfg.eval_frames or self.cfg.frames_per_clip, len(self.frame_keys))
        return DualItem(self.frame_keys, k, self.cfg.seed, epoch, train,
                        self.cfg.crop_scale if train else None)

    def prepare(self, show: bool) -> None:
        if self.rank == 0:
            held = held_out_samples(self.source)
            self.eval_clips = [sample_clip(s) for s in held]
            self.frames = SampleFrames(held, self.item(0, train=False))

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        urls, n = self.source.plan(epoch, self.cfg.seed, self.rank, self.world,
                                   self.cfg.batch_size)
        ds = ShardStream(urls, self.source.held, self.item(epoch), seed=self.cfg.seed,
                         epoch=epoch, rank=self.rank, buffer=self.cfg.shuffle_buffer,
                         chunk=self.cfg.batch_size)
        batches = stream_batches(ds, n, self.cfg.batch_size, self.cfg.num_workers)
        return n, ((np.stack([b[0] for b in batch]), [b[1] for b in batch],
                    [b[2] for b in batch], [b[3] for b in batch]) for batch in batches)


class ShardMEETask(MEETask):
    """``MEETask`` streaming per-second frame embeddings from shards (``content: embeddings``);
    captions are embedded per batch by the frozen encoder."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, source: ShardSource,
                 device: torch.device, rank: int, world: int) -> None:
        meta = source.shards.meta
        if meta["content"] != "embeddings":
            raise HowtocapError(f"{source.root}: holds frames; mee trains on frozen frame "
                                "embeddings: export with --content embeddings --encoder "
                                f"{cfg.encoder} (or train mee on the run directory)")
        if meta["encoder_name"] != encoder.name:
            raise HowtocapError(f"{source.root}: holds embeddings of encoder "
                                f"{meta['encoder_name']!r}, not {encoder.name!r}; train with "
                                f"--encoder {meta['encoder']}")
        self.source = source
        super().__init__(cfg, encoder, [], [], device, rank, world)

    def prepare(self, show: bool) -> None:
        self.n_train = 0
        if self.rank != 0:
            return
        held = held_out_samples(self.source)
        self.eval_clips = [sample_clip(s) for s in held]
        if not held:
            return
        item = MEEItem(self.cfg.seed, 0, train=False)
        self.video = torch.from_numpy(np.stack([item(s)[0] for s in held]))
        emb = torch.from_numpy(self.encoder.encode_texts([c.captions[0]
                                                          for c in self.eval_clips]))
        self.text = [emb[i:i + 1] for i in range(len(held))]

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        urls, n = self.source.plan(epoch, self.cfg.seed, self.rank, self.world,
                                   self.cfg.batch_size)
        ds = ShardStream(urls, self.source.held, MEEItem(self.cfg.seed, epoch),
                         seed=self.cfg.seed, epoch=epoch, rank=self.rank,
                         buffer=self.cfg.shuffle_buffer, chunk=self.cfg.batch_size,
                         group=self.cfg.clips_per_video)
        batches = stream_batches(ds, n, self.cfg.batch_size, self.cfg.num_workers)

        def assemble(batch: list[Any]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
            texts = torch.from_numpy(self.encoder.encode_texts([b[1] for b in batch]))
            return torch.from_numpy(np.stack([b[0] for b in batch])), texts, \
                [b[2] for b in batch]

        return n, (assemble(b) for b in batches)


def set_train_mode(task: DualTask | MEETask) -> None:
    """Train mode, except batch norms: a few correlated frames per batch would wreck their
    running statistics (and they stay as pretrained, like the frozen copy's)."""
    task.model.train()
    if isinstance(task, MEETask):
        task.encoder.eval()
    for m in task.model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()


def _track(items: list[Any], what: str, show: bool) -> Iterable[Any]:
    if not show:
        yield from items
        return
    with progress_bar(what, transient=True) as prog:
        task = prog.add_task(what, total=len(items))
        for it in items:
            yield it
            prog.advance(task)


# -- evaluation, logs ------------------------------------------------------------------------
def evaluate(task: DualTask | MEETask) -> dict[str, float]:
    if len(task.eval_clips) < 2:
        return {}
    task.model.eval()  # the next epoch sets train mode again
    t, v = task.embed_eval()
    # a caption that several held-out clips share (a repeated step) is right for each of them
    caps = [c.captions[0].strip().lower() for c in task.eval_clips]
    gt = np.array([[a == b for b in caps] for a in caps])
    m = retrieval_metrics(t @ v.t(), gt)
    return {k: float(m[k]) for k in ("R@1", "R@5", "R@10", "R@50", "MedR", "MeanR")}


LOG_COLUMNS = ["epoch", "steps", "loss", "loss_main", "reg", "logit_scale", "lr", "seconds",
               "pairs_per_s", "R@1", "R@5", "R@10", "R@50", "MedR", "MeanR"]


def write_logs(out: Path, history: list[dict[str, Any]]) -> None:
    """``train_log.csv`` (one row per epoch; epoch 0 = before training) and ``train_log.png``."""
    rows = [{k: r.get(k, "") for k in LOG_COLUMNS} for r in history]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, LOG_COLUMNS)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / "train_log.csv", buf.getvalue())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    tr = [r for r in history if r["epoch"] > 0]
    a.plot([r["epoch"] for r in tr], [r["loss"] for r in tr], "o-", label="train loss")
    a.set_xlabel("epoch")
    a.set_ylabel("loss")
    a.legend()
    for k in ("R@1", "R@5", "R@10"):
        pts = [(r["epoch"], r[k]) for r in history if k in r]
        if pts:
            b.plot(*zip(*pts, strict=True), "o-", label=k)
    b.set_xlabel("epoch (0 = before training)")
    b.set_ylabel("held-out text→video recall (%)")
    if b.lines:
        b.legend()
    fig.tight_layout()
    fig.savefig(out / ".train_log.png.tmp.png", dpi=100)
    plt.close(fig)
    (out / ".train_log.png.tmp.png").replace(out / "train_log.png")


# -- the loop --------------------------------------------------------------------------------
@dataclass
class LoopResult:
    checkpoint: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    epochs_run: int = 0
    resumed_from: int = 0
    model: nn.Module | None = None


def run(cfg: TrainConfig, encoder: Encoder, train_clips: list[Clip], eval_clips: list[Clip],
        *, resume: bool, device: str | torch.device | None, progress: bool = True,
        on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
        shards: ShardSource | None = None) -> LoopResult:
    """Train; with ``shards`` the clips stream from WebDataset shards (the lists stay empty)."""
    rank, world, dev = setup_distributed(device)
    show = progress and rank == 0
    out = Path(cfg.out_dir)
    ckpt_dir = out / "ckpt"
    torch.manual_seed(cfg.seed)
    task: DualTask | MEETask
    n_train = shards.n_train if shards is not None else len(train_clips)
    n_eval = shards.n_eval if shards is not None else len(eval_clips)
    if cfg.model not in ("dual", "mee"):
        raise HowtocapError(f"--model must be dual or mee, not {cfg.model!r}")
    if shards is not None:
        task = (ShardDualTask if cfg.model == "dual" else ShardMEETask)(
            cfg, encoder.to(dev), shards, dev, rank, world)
    elif cfg.model == "dual":
        task = DualTask(cfg, encoder.to(dev), train_clips, eval_clips, dev, rank, world)
    else:
        task = MEETask(cfg, encoder.to(dev), train_clips, eval_clips, dev, rank, world)
    identity = task.identity()

    use_amp = cfg.amp and dev.type == "cuda"
    if cfg.optimizer not in ("adamw", "adam"):
        raise HowtocapError(f"--optimizer must be adamw or adam, not {cfg.optimizer!r}")
    opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    opt = opt_cls(param_groups(task.model, cfg.weight_decay), lr=cfg.lr)
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    start_epoch, step, history = 0, 0, []
    run_id = uuid.uuid4().hex[:8]
    existing = ckpt_dir / ck.CKPT_NAME
    state: dict[str, Any] | None = None
    if existing.exists():
        if not resume:
            raise HowtocapError(f"{out}: already holds a checkpoint; pass --resume to continue "
                                "it or choose another --out folder")
        state = ck.load_checkpoint(existing, map_location=dev)
        ck.check_same_arch(state["meta"], identity, existing)
    task.prepare(show)

    if world > 1:
        # encoders may hold parameters the towers never use (e.g. CLIP's own logit_scale)
        task.net = nn.parallel.DistributedDataParallel(
            task.model, device_ids=[dev.index] if dev.type == "cuda" else None,
            find_unused_parameters=isinstance(task, DualTask))
    n_batches, _ = task.batches(0)
    if n_batches == 0:
        raise HowtocapError(f"too few training clips ({n_train}) for {world} process(es) and "
                            f"batches of {cfg.batch_size}")
    total = n_batches * cfg.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(total, int(cfg.warmup * total)))
    if state is not None:
        task.model.load_state_dict(state["model"])
        try:
            opt.load_state_dict(state["optimizer"])
        except ValueError:
            raise HowtocapError(f"{existing}: its optimizer state trains other parameters; "
                                "resume with the same --train-params") from None
        sched.load_state_dict(state["scheduler"])
        task.load_extra_state(state, existing)
        if use_amp and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng"]["torch"])
        if torch.cuda.is_available() and state["rng"].get("cuda"):
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        start_epoch, step = int(state["epoch"]), int(state["step"])
        history = list(state.get("history", []))
        run_id = state["meta"].get("run_id", run_id)
        if show:
            console.print(f"resuming {out} after epoch {start_epoch}", highlight=False)
    meta = {**identity, "run_id": run_id, "encoder_name": encoder.name}
    if rank == 0:
        atomic_write_text(out / "train_config.json", json.dumps(
            {**asdict(cfg), "run_id": run_id, "train_clips": n_train,
             "eval_clips": n_eval, "world_size": world}, indent=2))

    if start_epoch == 0 and rank == 0 and task.eval_clips:
        history.append({"epoch": 0, "steps": 0, **evaluate(task)})
    ckpt_path = existing
    epochs_run = 0
    for epoch in range(start_epoch, cfg.epochs):
        torch.manual_seed(cfg.seed * 100003 + epoch)  # dropout etc.: same draws after a resume
        set_train_mode(task)
        n, batches = task.batches(epoch)
        t0, pairs, loss_sum, parts_sum = time.perf_counter(), 0, 0.0, {}
        prog = progress_bar(f"epoch {epoch + 1}/{cfg.epochs}",
                            TextColumn("loss {task.fields[loss]:.4f}"), transient=True,
                            disable=not show)
        with prog:
            bar = prog.add_task("train", total=n, loss=float("nan"))
            for batch in batches:
                with (torch.autocast(device_type="cuda", dtype=torch.float16) if use_amp
                      else contextlib.nullcontext()):
                    loss, parts = task.loss(batch)
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if cfg.grad_clip > 0:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(task.model.parameters(), cfg.grad_clip)
                scaler.step(opt)
                scaler.update()
                sched.step()
                task.after_step()
                step += 1
                pairs += len(batch[2])
                loss_sum += loss.item()
                for k, val in parts.items():
                    parts_sum[k] = parts_sum.get(k, 0.0) + val
                prog.update(bar, advance=1, loss=loss.item())
        secs = time.perf_counter() - t0
        row: dict[str, Any] = {"epoch": epoch + 1, "steps": step, "loss": loss_sum / max(1, n),
                               **{k: v / max(1, n) for k, v in parts_sum.items()},
                               "lr": sched.get_last_lr()[0], "seconds": round(secs, 3),
                               "pairs_per_s": pairs * world / max(secs, 1e-9)}
        if rank == 0:
            row.update(evaluate(task))
            history.append(row)
            rng = {"torch": torch.get_rng_state(),
                   "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
            state_out = {"model": task.model.state_dict(), "optimizer": opt.state_dict(),
                         "scheduler": sched.state_dict(),
                         "scaler": scaler.state_dict() if use_amp else {},
                         "rng": rng, "epoch": epoch + 1, "step": step, "config": asdict(cfg),
                         "history": history, **task.extra_state()}
            ckpt_path = ck.save_checkpoint(ckpt_dir, state_out, meta)
            write_logs(out, history)
            if show:
                metrics = "  ".join(f"{k} {row[k]:.1f}" for k in ("R@1", "R@5", "R@10")
                                    if k in row)
                console.print(f"epoch {epoch + 1}: loss {row['loss']:.4f}  {metrics}",
                              highlight=False)
        barrier(world)
        epochs_run += 1
        if on_epoch_end is not None:
            on_epoch_end(row)
    if rank == 0 and history and epochs_run == 0:
        write_logs(out, history)
    return LoopResult(ckpt_path, history, epochs_run, start_epoch, task.model)

