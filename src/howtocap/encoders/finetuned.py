"""A howtocap training checkpoint as a ready ``Encoder`` (``encoders.create`` of a ``*.pt``).
The models live in ``encoders``, so the trainer imports them, never the other way round; the
base model comes from the caller, so this module does not import the factory that imports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from howtocap.encoders.base import Encoder, pick_device
from howtocap.encoders.checkpoint import arch_identity, check_same_arch, find_checkpoint
from howtocap.encoders.dual import DualModel
from howtocap.encoders.mee import JointEmbedding, MEEEncoder
from howtocap.errors import InputError


def from_checkpoint(path: str | Path, state: dict[str, Any], base: Encoder,
                    device: str | torch.device | None = None) -> Encoder:
    """A loaded checkpoint on its freshly built ``base`` encoder, in eval mode; its ``name`` gets
    the run id and epoch, so the base model's cached frame embeddings are never taken for its."""
    meta, pt = state["meta"], find_checkpoint(path)
    module: nn.Module
    if meta["model"] == "dual":
        module = DualModel(base, temperature=meta.get("temperature"))
        enc: Encoder = base
    elif meta["model"] == "mee":
        module = JointEmbedding(meta["video_dim"], meta["text_dim"], meta["dim"])
        enc = MEEEncoder(base, module)
    else:
        raise InputError(pt, f"unknown model kind {meta['model']!r} in checkpoint")
    check_same_arch(meta, arch_identity(meta["model"], meta["encoder"], module), pt)
    module.load_state_dict(state["model"])
    enc.name = f"{base.name}+ft-{meta.get('run_id', 'x')}-e{state.get('epoch', 0)}"
    enc.spec = str(pt)  # type: ignore[attr-defined]  # how to rebuild it (for further rounds)
    return enc.to(pick_device(device)).eval()
