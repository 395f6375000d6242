"""A howtocap training checkpoint as a ready ``Encoder``: what ``encoders.create`` returns for
a ``*.pt`` path. It lives here, beside the other encoders, so the dependency runs one way:
encoders read training checkpoints; training never imports the encoder factory's module."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from howtocap.encoders.base import Encoder, pick_device
from howtocap.errors import InputError
from howtocap.train.checkpoint import (
    arch_identity,
    check_same_arch,
    find_checkpoint,
    load_checkpoint,
)


def _create(spec: str, device: torch.device) -> Encoder:
    from howtocap.encoders import create  # the base model a checkpoint was trained from

    return create(spec, device=device)


def load_encoder(path: str | Path, device: str | torch.device | None = None) -> Encoder:
    """A trained checkpoint as a ready ``Encoder`` (eval mode) for align, eval and search.

    The base architecture is rebuilt from the encoder spec recorded at training time, then the
    trained weights are loaded; the encoder's ``name`` gets the run id and epoch, so cached
    frame embeddings of the base model are never mistaken for the fine-tuned ones.
    """
    from howtocap.train.mee import JointEmbedding, MEEEncoder
    from howtocap.train.model import DualModel

    dev = pick_device(device)
    state = load_checkpoint(path)
    meta = state["meta"]
    pt = find_checkpoint(path)
    base = _create(meta["encoder"], dev)
    tag = f"ft-{meta.get('run_id', 'x')}-e{state.get('epoch', 0)}"
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
    enc.name = f"{base.name}+{tag}"
    enc.spec = str(pt)  # type: ignore[attr-defined]  # how to rebuild it (for further rounds)
    return enc.to(dev).eval()
