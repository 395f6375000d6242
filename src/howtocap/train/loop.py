"""The run loop shared by the dual encoder and the HowTo100M baseline (what is trained and on
what is the task's: ``train.tasks``): AMP on CUDA only, gradient clipping, DDP under torchrun.

Every epoch ends with a held-out evaluation, a row in ``train_log.csv``, ``train_log.png`` and
an atomic checkpoint. Epoch ``e`` draws all its randomness from ``(seed, e)`` and every state
(optimizer, scheduler, scaler, RNG, the task's extras) is saved, so ``resume`` continues
bit-for-bit (on the CPU; from shards, at epoch boundaries).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from rich.progress import TextColumn
from torch import nn

from howtocap.atomic import atomic_write_text
from howtocap.encoders import checkpoint as ck
from howtocap.encoders.base import Encoder
from howtocap.errors import HowtocapError
from howtocap.io.pairs import Clip
from howtocap.progress import console, progress_bar
from howtocap.train.config import TrainConfig
from howtocap.train.data import ShardSource
from howtocap.train.distributed import barrier, setup_distributed
from howtocap.train.logs import write_logs
from howtocap.train.schedule import make_optimizer, make_scheduler
from howtocap.train.tasks import DualTask, held_out_metrics, make_task, set_train_mode

__all__ = ["LoopResult", "run"]


class LoopResult(NamedTuple):
    checkpoint: Path
    history: list[dict[str, Any]]
    epochs_run: int
    resumed_from: int  # the epoch resumed from (0: a fresh start)
    model: nn.Module


def run(cfg: TrainConfig, encoder: Encoder, train_clips: list[Clip], eval_clips: list[Clip],
        *, resume: bool, device: str | torch.device | None, progress: bool = True,
        on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
        shards: ShardSource | None = None
        ) -> LoopResult:
    """Train; with ``shards`` the clips stream from WebDataset shards (the lists stay empty)."""
    rank, world, dev = setup_distributed(device)
    show = progress and rank == 0
    out = Path(cfg.out_dir)
    torch.manual_seed(cfg.seed)
    n_train = shards.n_train if shards is not None else len(train_clips)
    n_eval = shards.n_eval if shards is not None else len(eval_clips)
    task = make_task(cfg, encoder, train_clips, eval_clips, shards, dev, rank, world)
    identity = task.identity()

    use_amp = cfg.amp and dev.type == "cuda"
    opt = make_optimizer(cfg, task.model)
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    start_epoch, step, history = 0, 0, []
    run_id = uuid.uuid4().hex[:8]
    existing = out / "ckpt" / ck.CKPT_NAME
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
    sched = make_scheduler(opt, cfg, n_batches * cfg.epochs)
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
            {**cfg.model_dump(), "run_id": run_id, "train_clips": n_train,
             "eval_clips": n_eval, "world_size": world}, indent=2))

    if start_epoch == 0 and rank == 0 and task.eval_clips:
        history.append({"epoch": 0, "steps": 0, **held_out_metrics(task)})
    ckpt_path = existing
    for epoch in range(start_epoch, cfg.epochs):
        torch.manual_seed(cfg.seed * 100003 + epoch)  # dropout etc.: same draws after a resume
        set_train_mode(task)
        n, batches = task.batches(epoch)
        t0, pairs, loss_sum, parts_sum = time.perf_counter(), 0, 0.0, Counter[str]()
        with progress_bar(f"epoch {epoch + 1}/{cfg.epochs}",
                          TextColumn("loss {task.fields[loss]:.4f}"), transient=True,
                          disable=not show) as prog:
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
                parts_sum.update(parts)
                prog.update(bar, advance=1, loss=loss.item())
        secs = time.perf_counter() - t0
        row: dict[str, Any] = {"epoch": epoch + 1, "steps": step, "loss": loss_sum / max(1, n),
                               **{k: v / max(1, n) for k, v in parts_sum.items()},
                               "lr": sched.get_last_lr()[0], "seconds": round(secs, 3),
                               "pairs_per_s": pairs * world / max(secs, 1e-9)}
        if rank == 0:
            row.update(held_out_metrics(task))
            history.append(row)
            rng = {"torch": torch.get_rng_state(),
                   "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
            state_out = {"model": task.model.state_dict(), "optimizer": opt.state_dict(),
                         "scheduler": sched.state_dict(),
                         "scaler": scaler.state_dict() if use_amp else {},
                         "rng": rng, "epoch": epoch + 1, "step": step, "config": cfg.model_dump(),
                         "history": history, **task.extra_state()}
            ckpt_path = ck.save_checkpoint(existing.parent, state_out, meta)
            write_logs(out, history)
            if show:
                metrics = "  ".join(f"{k} {row[k]:.1f}" for k in ("R@1", "R@5", "R@10")
                                    if k in row)
                console.print(f"epoch {epoch + 1}: loss {row['loss']:.4f}  {metrics}",
                              highlight=False)
        barrier(world)
        if on_epoch_end is not None:
            on_epoch_end(row)
    epochs_run = max(0, cfg.epochs - start_epoch)
    if rank == 0 and history and epochs_run == 0:
        write_logs(out, history)
    return LoopResult(ckpt_path, history, epochs_run, start_epoch, task.model)

