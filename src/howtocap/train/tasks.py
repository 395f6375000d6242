"""What is trained, on what, and how it is scored: one class per model and data source
(docs/train.md). The shard tasks stream this rank's share of WebDataset shards through a
shuffle buffer instead of holding clips in memory; an epoch is still a function of ``(seed,
epoch)``. A task's ``extras`` (momentum model, queue) travel in the checkpoint: resume is exact.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from howtocap.encoders import checkpoint as ck
from howtocap.encoders.base import Encoder
from howtocap.encoders.dual import DualModel
from howtocap.encoders.mee import JointEmbedding, max_pool_clip
from howtocap.errors import HowtocapError
from howtocap.io.pairs import Clip
from howtocap.metrics import retrieval_metrics
from howtocap.progress import progress_bar
from howtocap.train import data, losses
from howtocap.train.config import TrainConfig
from howtocap.train.distributed import barrier, gather_all, gather_nograd


def freeze_except(model: DualModel, pattern: str) -> None:
    """Train only parameters whose name matches ``pattern`` (and a learnable temperature): no
    backward pass runs through a frozen tower, so training a small head is far cheaper."""
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


class Task:
    """What every task holds and, by default, a task with nothing to keep but its weights."""

    model: nn.Module

    def __init__(self, cfg: TrainConfig, train: list[Clip], held: list[Clip],
                 device: torch.device, rank: int, world: int) -> None:
        self.cfg, self.train_clips, self.eval_clips = cfg, train, held
        self.rank, self.world, self.device = rank, world, device
        self.cache = Path(cfg.cache_dir) if cfg.cache_dir else Path(cfg.out_dir) / "cache"

    def after_step(self) -> None:
        """Nothing to update beside the optimiser's step."""

    def extras(self) -> dict[str, nn.Module]:
        """What the checkpoint holds beside the weights, by its key there."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        return {name: mod.state_dict() for name, mod in self.extras().items()}

    def load_extra_state(self, state: dict[str, Any], path: Path) -> None:
        for name, mod in self.extras().items():
            if name not in state:
                raise HowtocapError(f"{path}: the checkpoint has no {name.replace('_', ' ')}; "
                                    "resume with the recipe/options it was trained with")
            try:
                mod.load_state_dict(state[name])
            except RuntimeError:
                raise HowtocapError(f"{path}: its {name.replace('_', ' ')} does not match this "
                                    "run's (another --queue-size?); resume with the same "
                                    "options") from None


class DualTask(Task):
    """Fine-tune the whole encoder (every parameter that requires grad) with InfoNCE."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, train: list[Clip], held: list[Clip],
                 device: torch.device, rank: int, world: int) -> None:
        super().__init__(cfg, train, held, device, rank, world)
        self.model = DualModel(encoder, cfg.temperature).to(device)
        if cfg.train_params:
            freeze_except(self.model, cfg.train_params)
        self.frozen, self.momentum_model = (
            copy.deepcopy(self.model).requires_grad_(False).eval() if wanted else None
            for wanted in (cfg.alpha > 0, cfg.momentum > 0))
        self.queue = losses.FeatureQueue(cfg.queue_size, encoder.dim).to(device) \
            if cfg.queue_size > 0 else None
        self.frames: Callable[..., np.ndarray] = self.frame_source(cfg, encoder.image_size)
        self.net: nn.Module = self.model

    def frame_source(self, cfg: TrainConfig, size: int) -> Callable[..., np.ndarray]:
        if cfg.frames == "pixels":
            return data.PixelCache(self.cache / "pixels", size)
        if cfg.frames == "decode":
            return data.DecodeFrames(size)
        raise HowtocapError(f"--frames must be decode or pixels, not {cfg.frames!r}")

    def identity(self) -> dict:
        return ck.arch_identity("dual", self.cfg.encoder, self.model,
                                temperature=self.cfg.temperature)

    def prepare(self, show: bool) -> None:
        if not isinstance(self.frames, data.PixelCache):
            return
        if self.rank == 0:
            for c in _videos(self.train_clips + self.eval_clips, "caching frames", show):
                self.frames.build(c)
        barrier(self.world)

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        draws = data.epoch_draws(self.train_clips, epoch, self.cfg.seed, self.cfg.frames_per_clip,
                                 crop_scale=self.cfg.crop_scale)
        plan = data.shard_batches(draws, self.cfg.batch_size, self.rank, self.world)
        ds = data.ClipBatches(self.train_clips, plan, self.frames)
        return len(plan), data.batch_loader(ds, self.cfg.num_workers)

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        frames, texts = batch[0], batch[1]
        t, v, scale = self.net(frames, texts)
        if self.momentum_model is not None or self.queue is not None or self.cfg.soft_labels > 0:
            main = self.itc_loss(frames, texts, batch[3], t, v, scale)
        elif self.world > 1:
            main = losses.info_nce(t, v, scale, text_all=gather_all(t, self.world),
                                   video_all=gather_all(v, self.world), offset=self.rank * len(t))
        else:
            main = losses.info_nce(t, v, scale)
        parts = {"loss_main": main.item(), "logit_scale": scale.item()}
        if self.frozen is None:
            return main, parts
        with torch.no_grad():
            t_ref, v_ref, _ = self.frozen(frames, texts)
        reg = losses.frozen_copy_regulariser(t, v, t_ref, v_ref)
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
            batch_all = [gather_nograd(x, self.world) for x in (t_m, v_m, ids)]
            tk, vk, idk = batch_all
            if self.queue is not None:
                tk, vk, idk = (torch.cat(p) for p in zip(batch_all, self.queue.contents(),
                                                         strict=True))
            soft, s = self.cfg.soft_labels, scale.detach()
            t2v_m = s * t_m.float() @ vk.float().t() if soft > 0 else None
            v2t_m = s * v_m.float() @ tk.float().t() if soft > 0 else None
            tgt_t2v = losses.itc_targets(ids, idk, t2v_m, soft)
            tgt_v2t = losses.itc_targets(ids, idk, v2t_m, soft)
        if self.momentum_model is None:  # online keys keep their gradient (plain InfoNCE)
            tk, vk = gather_all(t, self.world), gather_all(v, self.world)
        loss = losses.soft_info_nce(t, v, scale, tk, vk, tgt_t2v, tgt_v2t)
        if self.queue is not None:
            self.queue.enqueue(*batch_all)
        return loss

    def after_step(self) -> None:
        if self.momentum_model is not None:
            losses.ema_update(self.model, self.momentum_model, self.cfg.momentum)

    def extras(self) -> dict[str, nn.Module]:
        return {name: mod for name, mod in (("momentum_model", self.momentum_model),
                                            ("queue", self.queue)) if mod is not None}

    @torch.no_grad()
    def embed_eval(self) -> tuple[torch.Tensor, torch.Tensor]:
        draws = data.epoch_draws(self.eval_clips, 0, 0,
                                 self.cfg.eval_frames or self.cfg.frames_per_clip, train=False)
        plan = data.shard_batches(draws, self.cfg.eval_batch_size)
        loader = data.batch_loader(data.ClipBatches(self.eval_clips, plan, self.frames),
                                   self.cfg.num_workers)
        ts, vs = zip(*((t.float().cpu(), v.float().cpu()) for t, v, _ in
                       (self.model(frames, texts) for frames, texts, *_ in loader)), strict=True)
        return torch.cat(ts), torch.cat(vs)


class MEETask(Task):
    """HowTo100M's gated embedding units on frozen, cached features (max-margin ranking)."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, train: list[Clip], held: list[Clip],
                 device: torch.device, rank: int, world: int) -> None:
        super().__init__(cfg, train, held, device, rank, world)
        self.encoder = encoder.requires_grad_(False).eval()
        self.model = JointEmbedding(encoder.dim, encoder.dim, cfg.mee_dim).to(device)
        self.net: nn.Module = self.model

    def identity(self) -> dict:
        return ck.arch_identity("mee", self.cfg.encoder, self.model, video_dim=self.encoder.dim,
                                text_dim=self.encoder.dim, dim=self.cfg.mee_dim)

    def prepare(self, show: bool) -> None:
        """Frozen features, once: max-pooled frame embeddings per clip, one vector per caption."""
        from howtocap.encoders.cache import frame_embeddings

        clips = self.train_clips + self.eval_clips
        per_video = {c.video_id: frame_embeddings(c.video_path, self.encoder, fps=1.0,
                                                  cache_dir=self.cache)
                     for c in _videos(clips, "frame embeddings", show)}
        self.video = torch.from_numpy(np.stack([
            max_pool_clip(np.asarray(per_video[c.video_id].emb), per_video[c.video_id].fps,
                          c.start, c.end) for c in clips]))
        emb = torch.from_numpy(self.encoder.encode_texts([t for c in clips for t in c.captions]))
        self.text: list[torch.Tensor] = list(emb.split([len(c.captions) for c in clips]))
        self.n_train = len(self.train_clips)

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        groups = data.grouped_batches(self.train_clips, self.cfg.batch_size,
                                      self.cfg.clips_per_video, epoch, self.cfg.seed)
        mine = groups[self.rank:len(groups) // self.world * self.world:self.world]
        rng = np.random.default_rng([self.cfg.seed, epoch, 3])
        pick = [int(rng.integers(len(c.captions))) for c in self.train_clips]
        out = [(self.video[idx], torch.stack([self.text[i][pick[i]] for i in idx]),
                [self.train_clips[i].video_id for i in idx]) for idx in mine]
        return len(out), out

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        video, text, vids = batch
        v, t = self.net(video.to(self.device), text.to(self.device))
        loss = losses.max_margin_ranking(t @ v.t(), vids, margin=self.cfg.margin)
        return loss, {"loss_main": loss.item()}

    @torch.no_grad()
    def embed_eval(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = list(range(self.n_train, self.n_train + len(self.eval_clips)))
        v, t = self.model(self.video[idx].to(self.device),
                          torch.stack([self.text[i][0] for i in idx]).to(self.device))
        return t.cpu(), v.cpu()


class ShardDualTask(DualTask):
    """``DualTask`` streaming frames from WebDataset shards (``content: frames``)."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, source: data.ShardSource,
                 device: torch.device, rank: int, world: int) -> None:
        meta = source.shards.meta
        if meta["content"] != "frames":
            raise HowtocapError(f"{source.shards.root}: holds frame embeddings; the dual encoder "
                                "fine-tunes on frames: export with --content frames (or train "
                                "--model mee on these shards)")
        if cfg.frames_per_clip > int(meta["frames_per_clip"]):
            raise HowtocapError(f"{source.shards.root}: the shards hold {meta['frames_per_clip']} "
                                f"frames per clip; pass --frames-per-clip "
                                f"{meta['frames_per_clip']} or less, or export more frames")
        self.source = source
        self.frame_keys = list(meta["frame_keys"])
        super().__init__(cfg, encoder, [], [], device, rank, world)

    def frame_source(self, cfg: TrainConfig, size: int) -> Callable[..., np.ndarray]:
        return data.DecodeFrames(size)  # not used: frames come from the shards

    def item(self, epoch: int, train: bool = True) -> data.DualItem:
        k = self.cfg.frames_per_clip if train else min(
            self.cfg.eval_frames or self.cfg.frames_per_clip, len(self.frame_keys))
        return data.DualItem(self.frame_keys, k, self.cfg.seed, epoch, train,
                             self.cfg.crop_scale if train else None)

    def prepare(self, show: bool) -> None:
        if self.rank == 0:
            held = data.held_out_samples(self.source)
            self.eval_clips = [data.sample_clip(s) for s in held]
            self.frames = data.SampleFrames(held, self.item(0, train=False))

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        n, batches = _stream(self, self.source, self.item(epoch), epoch)
        return n, ((np.stack(f), list(t), list(v), list(k))
                    for f, t, v, k in (zip(*batch, strict=True) for batch in batches))


class ShardMEETask(MEETask):
    """``MEETask`` streaming per-second frame embeddings from shards (``content: embeddings``);
    captions are embedded per batch by the frozen encoder."""

    def __init__(self, cfg: TrainConfig, encoder: Encoder, source: data.ShardSource,
                 device: torch.device, rank: int, world: int) -> None:
        meta = source.shards.meta
        if meta["content"] != "embeddings":
            raise HowtocapError(f"{source.shards.root}: holds frames; mee trains on frozen frame "
                                "embeddings: export with --content embeddings --encoder "
                                f"{cfg.encoder} (or train mee on the run directory)")
        if meta["encoder_name"] != encoder.name:
            raise HowtocapError(f"{source.shards.root}: holds embeddings of encoder "
                                f"{meta['encoder_name']!r}, not {encoder.name!r}; train with "
                                f"--encoder {meta['encoder']}")
        self.source = source
        super().__init__(cfg, encoder, [], [], device, rank, world)

    def prepare(self, show: bool) -> None:
        self.n_train = 0
        if self.rank != 0:
            return
        held = data.held_out_samples(self.source)
        self.eval_clips = [data.sample_clip(s) for s in held]
        if not held:
            return
        item = data.MEEItem(self.cfg.seed, 0, train=False)
        self.video = torch.from_numpy(np.stack([item(s)[0] for s in held]))
        emb = torch.from_numpy(self.encoder.encode_texts([c.captions[0] for c in self.eval_clips]))
        self.text = list(emb.split(1))

    def batches(self, epoch: int) -> tuple[int, Iterable[Any]]:
        n, batches = _stream(self, self.source, data.MEEItem(self.cfg.seed, epoch), epoch,
                             group=self.cfg.clips_per_video)

        def assemble(batch: list[Any]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
            video, texts, vids = zip(*batch, strict=True)
            emb = torch.from_numpy(self.encoder.encode_texts(list(texts)))
            return torch.from_numpy(np.stack(video)), emb, list(vids)

        return n, (assemble(b) for b in batches)


def _stream(task: Task, source: data.ShardSource, item: Callable[..., Any], epoch: int,
            **group: int) -> tuple[int, Iterable[list[Any]]]:
    """This rank's shuffled share of the shards for ``epoch``, in lists of decoded items."""
    cfg = task.cfg
    urls, n = source.plan(epoch, cfg.seed, task.rank, task.world, cfg.batch_size)
    ds = data.ShardStream(urls, source.held, item, seed=cfg.seed, epoch=epoch, rank=task.rank,
                          buffer=cfg.shuffle_buffer, chunk=cfg.batch_size, **group)
    return n, data.stream_batches(ds, n, cfg.batch_size, cfg.num_workers)


def set_train_mode(task: Task) -> None:
    """Train mode, except batch norms: a few correlated frames per batch would wreck their
    running statistics (and they stay as pretrained, like the frozen copy's)."""
    task.model.train()
    if isinstance(task, MEETask):
        task.encoder.eval()
    for m in task.model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()


def _videos(clips: list[Clip], what: str, show: bool) -> Iterator[Clip]:
    """One clip of each video, under a progress bar when ``show``."""
    with progress_bar(what, transient=True, disable=not show) as prog:
        yield from prog.track(list({c.video_id: c for c in clips}.values()), description=what)


def make_task(cfg: TrainConfig, encoder: Encoder, train_clips: list[Clip],
              eval_clips: list[Clip], shards: data.ShardSource | None, device: torch.device,
              rank: int, world: int) -> Task:
    """The task for ``cfg.model`` (the encoder moved to ``device``); ``shards``: streamed."""
    if shards is not None:
        return (ShardDualTask if cfg.model == "dual" else ShardMEETask)(
            cfg, encoder.to(device), shards, device, rank, world)
    return (DualTask if cfg.model == "dual" else MEETask)(
        cfg, encoder.to(device), train_clips, eval_clips, device, rank, world)


def held_out_metrics(task: Task) -> dict[str, float]:
    """Text-to-video R@1/5/10/50, MedR, MeanR on the held-out clips (none below two)."""
    if len(task.eval_clips) < 2:
        return {}
    task.model.eval()  # the next epoch sets train mode again
    t, v = task.embed_eval()
    # a caption that several held-out clips share (a repeated step) is right for each of them
    caps = [c.captions[0].strip().lower() for c in task.eval_clips]
    gt = np.array([[a == b for b in caps] for a in caps])
    m = retrieval_metrics(t @ v.t(), gt)
    return {k: float(m[k]) for k in ("R@1", "R@5", "R@10", "R@50", "MedR", "MeanR")}
