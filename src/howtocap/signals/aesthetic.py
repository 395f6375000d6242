"""The optional ``aesthetic`` column: a LAION-style linear head over an image encoder's
L2-normalised embedding (LAION's aesthetic predictor v1 is one ``nn.Linear(768, 1)`` over
CLIP ViT-L/14 image features). The embeddings are the frame cache's (1 fps, keyed by content
and encoder), so a run that aligned with the same encoder pays nothing more to decode."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.errors import HowtocapError

FPS = 1.0  # the frame cache's rate the head reads


def head_digest(path: str | Path) -> str:
    """The head file's SHA-256 (its fingerprint: other weights, other scores)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise HowtocapError(f"--aesthetic {path}: cannot read ({e.strerror})") from None


def load_head(path: str | Path) -> tuple[np.ndarray, float]:
    """``(w, b)`` of a linear head file: a state dict with one ``*weight`` of shape (1, D) or
    (D,) and its ``*bias`` (a bare ``nn.Linear``'s, or LAION's, which names them so)."""
    import torch

    head_digest(path)  # a missing file: one line naming it
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is this file's problem
        raise HowtocapError(f"--aesthetic {path}: not a torch state dict "
                            f"({type(e).__name__})") from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    weights = [k for k in state if str(k).endswith("weight")] if isinstance(state, dict) else []
    if len(weights) != 1:
        raise HowtocapError(f"--aesthetic {path}: expected one linear layer (a weight and a "
                            f"bias), found {len(weights)} weights")
    w = state[weights[0]].float().numpy().reshape(-1)
    b = state.get(weights[0][: -len("weight")] + "bias")
    return w, float(b.float().reshape(-1)[0]) if b is not None else 0.0


def window_scores(path: Path, encoder: Any, head: tuple[np.ndarray, float],
                  windows: Sequence[tuple[float, float]], *, cache_dir: Path | None
                  ) -> list[float]:
    """The head's mean score over each window's frames (the nearest frame for a window
    shorter than a second)."""
    from howtocap.encoders.cache import frame_embeddings

    if cache_dir is None:
        raise HowtocapError("--aesthetic needs the run's cache folder")
    fe = frame_embeddings(path, encoder, fps=FPS, cache_dir=cache_dir)
    w, b = head
    if fe.emb.shape[1] != len(w):
        raise HowtocapError(f"--aesthetic: the head takes {len(w)}-d embeddings, "
                            f"{fe.encoder} gives {fe.emb.shape[1]}-d")
    emb = fe.emb.astype(np.float32)
    emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    score = emb @ w + b
    t = fe.times

    def mean(a: float, e: float) -> float:
        if (inside := (t >= a) & (t < e)).any():
            return float(score[inside].mean())
        return float(score[np.argmin(np.abs(t - (a + e) / 2))]) if len(t) else float("nan")
    return [mean(a, e) for a, e in windows]
