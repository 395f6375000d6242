"""Several processes under ``torchrun`` (``WORLD_SIZE`` > 1: gloo on CPU, NCCL on GPU). Each
rank takes an equal shard of the draws; as in CLIP, InfoNCE scores its texts against *all*
ranks' clips (an autograd-aware all-gather): the effective batch is ``batch_size * world_size``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


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
    """All ranks' rows, concatenated. Every rank's loss depends on every row, so a row's
    gradient is the sum over ranks (an all-reduce), sliced back to this rank."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.n = dist.get_rank(), len(x)
        return _all_gather(x)

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
    return x if world == 1 else _all_gather(x)


def _all_gather(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, 0)


def barrier(world: int) -> None:
    if world > 1:
        dist.barrier()
