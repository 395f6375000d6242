"""The one interface every image–text dual encoder implements: four torch-level methods (what
training uses); the batched numpy ``encode_*`` come for free. A clip is embedded in one place,
``pool_clips``, from the per-second rows of ``frame_encoder`` (what the frame cache holds), so
align, eval and search score a clip alike for every model (the MEE head pools its own way).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.windows import window_means


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """``cuda`` when present unless told otherwise."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Encoder(nn.Module, ABC):
    """An image–text dual encoder. ``name`` identifies weights (it keys the frame cache)."""

    name: str
    dim: int
    image_size: int = 224
    pooling: str = "mean"  # how ``pool_clips`` pools; keys cached clip vectors (eval, search)

    # -- torch level (used by training) ----------------------------------------------------
    @abstractmethod
    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        """uint8 RGB frames ``(n, H, W, 3)`` -> model-ready pixel tensor on ``self.device``."""

    @abstractmethod
    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor] | torch.Tensor:
        """Texts -> model-ready token tensors on ``self.device``."""

    @abstractmethod
    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """Unnormalised image embeddings ``(n, dim)`` (with grad when training)."""

    @abstractmethod
    def text_features(self, tokens: Any) -> torch.Tensor:
        """Unnormalised text embeddings ``(n, dim)`` (with grad when training)."""

    # -- numpy level (used by align, search, eval) -----------------------------------------
    @property
    def device(self) -> torch.device:
        first = next(chain(self.parameters(), self.buffers()), None)
        return torch.device("cpu") if first is None else first.device

    def encode_images(self, frames: np.ndarray, batch_size: int = 64) -> np.ndarray:
        """L2-normalised float32 embeddings ``(n, dim)`` of uint8 RGB frames ``(n, H, W, 3)``."""
        return self._encode(frames, batch_size,
                            lambda b: self.image_features(self.preprocess_images(b)))

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """L2-normalised float32 embeddings ``(n, dim)``."""
        return self._encode(texts, batch_size, lambda b: self.text_features(self.tokenize(list(b))))

    @torch.no_grad()
    def _encode(self, items: Any, batch_size: int, features: Callable[[Any], torch.Tensor],
                normalize: bool = True) -> np.ndarray:
        """``features`` of ``items`` a batch at a time, in eval mode (the mode is restored)."""
        if len(items) == 0:
            return np.zeros((0, self.dim), np.float32)
        was_training = self.training
        self.eval()
        feats = (features(items[i:i + batch_size]).float()
                 for i in range(0, len(items), batch_size))
        out = [(F.normalize(f, dim=-1) if normalize else f).cpu().numpy() for f in feats]
        self.train(was_training)
        return np.concatenate(out)

    # -- clips (align, eval, search) -------------------------------------------------------
    @property
    def frame_encoder(self) -> Encoder:
        """The encoder whose per-frame embeddings ``pool_clips`` reads (the frame cache's key)."""
        return self

    def pool_clips(self, frame_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   renormalize: bool = True) -> np.ndarray:
        """Clip embeddings ``(*lo.shape, dim)`` (float64): clip ``i`` pools rows ``lo[i]:hi[i]``
        of ``frame_encoder``'s embeddings. Here the mean of the unit frame vectors (re-normalised
        when ``renormalize``), computed from one prefix sum however many clips."""
        return window_means(frame_emb, np.asarray(lo), np.asarray(hi), renormalize)

    def encode_clip(self, frames: np.ndarray) -> np.ndarray:
        """One clip's decoded frames ``(k, H, W, 3)`` -> its embedding, pooled by ``pool_clips``
        (not re-normalised: callers that need a unit vector normalise it)."""
        rows = self.frame_encoder.encode_images(frames)
        return self.pool_clips(rows, np.array([0]), np.array([len(rows)]), renormalize=False)[0]
