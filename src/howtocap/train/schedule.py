"""The optimizer and the learning-rate schedule: AdamW or Adam, no weight decay on biases,
norms and the temperature, linear warmup then cosine decay per step."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from howtocap.errors import HowtocapError
from howtocap.train.config import TrainConfig

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW,
                                                      "adam": torch.optim.Adam}


def warmup_cosine(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))
    return f


def param_groups(module: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices only: decaying biases, norm gains or the temperature only hurts."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise HowtocapError("the model has no trainable parameters")
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def make_optimizer(cfg: TrainConfig, module: nn.Module) -> torch.optim.Optimizer:
    return OPTIMIZERS[cfg.optimizer](param_groups(module, cfg.weight_decay), lr=cfg.lr)


def make_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int
                   ) -> torch.optim.lr_scheduler.LambdaLR:
    """Per optimizer step: ``warmup`` (a fraction of all steps) up, then cosine down to 0."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_cosine(total_steps, int(cfg.warmup * total_steps)))
