"""Checkpoints that resume exactly and say what they contain: ``<out>/ckpt/last.pt`` holds every
training state; ``howtocap_checkpoint.json`` beside it (and a copy inside) names the model kind,
encoder spec and a signature of parameter names and shapes, so loading into another
architecture fails with both descriptions, not a wall of ``state_dict`` key errors.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from howtocap.atomic import atomic_write_bytes, atomic_write_text
from howtocap.errors import HowtocapError, InputError

FORMAT = "howtocap-checkpoint/1"
META_NAME = "howtocap_checkpoint.json"
CKPT_NAME = "last.pt"


def signature(module: nn.Module) -> str:
    """A short hash of parameter/buffer names and shapes: equal iff state dicts are swappable."""
    items = sorted((k, tuple(v.shape)) for k, v in module.state_dict().items())
    return hashlib.sha1(repr(items).encode()).hexdigest()[:16]


def arch_identity(kind: str, encoder_spec: str, module: nn.Module, **extra: Any) -> dict:
    return {"format": FORMAT, "model": kind, "encoder": encoder_spec,
            "class": f"{type(module).__module__}.{type(module).__qualname__}",
            "signature": signature(module), **extra}


def describe(meta: dict) -> str:
    return (f"{meta.get('model', '?')} model on encoder {meta.get('encoder', '?')!r} "
            f"({meta.get('class', '?')}, signature {meta.get('signature', '?')})")


def check_same_arch(found: dict, expected: dict, path: Path) -> None:
    if any(found.get(k) != expected.get(k) for k in ("model", "signature")):
        raise HowtocapError(f"{path}: checkpoint is a {describe(found)}, but this run builds a "
                            f"{describe(expected)}; use a matching --model/--encoder or another "
                            "--out folder")


def save_checkpoint(ckpt_dir: Path, state: dict[str, Any], meta: dict) -> Path:
    """Atomically write ``last.pt`` then its JSON description."""
    ckpt_dir = Path(ckpt_dir)
    buf = io.BytesIO()
    torch.save({**state, "meta": meta}, buf)
    atomic_write_bytes(ckpt_dir / CKPT_NAME, buf.getvalue())
    atomic_write_text(ckpt_dir / META_NAME, json.dumps(meta, indent=2))
    return ckpt_dir / CKPT_NAME


def find_checkpoint(path: str | Path) -> Path:
    """A ``.pt`` file, a ``ckpt`` folder, or a training ``--out`` folder -> the ``.pt`` file."""
    p = Path(path)
    for cand in (p, p / CKPT_NAME, p / "ckpt" / CKPT_NAME):
        if cand.is_file():
            return cand
    raise InputError(p, "no howtocap checkpoint here (expected a .pt file, or a folder "
                        f"holding {CKPT_NAME} or ckpt/{CKPT_NAME})")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu"
                    ) -> dict[str, Any]:
    """The saved dict; a clear error for files that are not howtocap checkpoints."""
    pt = find_checkpoint(path)
    try:
        state = torch.load(pt, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt/foreign file
        msg = " ".join(str(exc).split())[:200]
        raise InputError(pt, f"not a readable howtocap checkpoint ({msg})") from None
    meta = state.get("meta") if isinstance(state, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(pt, f"not a howtocap checkpoint (no {FORMAT} description); "
                             "plain state dicts are not accepted")
    return state
