"""The HowTo100M baseline (Miech et al. 2019): gated embedding units on frozen features of any
encoder (docs/train.md); ``MEEEncoder`` makes a trained one an ``Encoder`` like any other.

One pooling everywhere: the units were trained on the *max* over a clip's frame features, so
training (``max_pool_clip``) and ``MEEEncoder.pool_clips`` (align, eval, search) apply the video
unit once to that max; averaging the unit's per-frame outputs would give another embedding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.base import Encoder
from howtocap.encoders.windows import rows_covering


class GatedEmbeddingUnit(nn.Module):
    """``normalize((W1 x + b1) * sigmoid(W2 (W1 x + b1) + b2))``."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, out_dim)
        self.gate = nn.Linear(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return F.normalize(h * torch.sigmoid(self.gate(h)), dim=-1)


class JointEmbedding(nn.Module):
    """Two gated units; inputs are L2-normalised frozen features."""

    def __init__(self, video_dim: int, text_dim: int, dim: int = 256) -> None:
        super().__init__()
        self.video_unit = GatedEmbeddingUnit(video_dim, dim)
        self.text_unit = GatedEmbeddingUnit(text_dim, dim)
        self.dim = dim

    def forward(self, video: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
        return (self.video_unit(F.normalize(video.float(), dim=-1)),
                self.text_unit(F.normalize(text.float(), dim=-1)))


def max_pool_frames(frame_emb: np.ndarray) -> np.ndarray:
    """Max over the frames (axis -2) in float32: the MEE clip pooling of every path."""
    a = np.asarray(frame_emb, dtype=np.float32)
    if a.shape[-2] == 0:
        raise ValueError("no frame embeddings")
    return a.max(axis=-2)


def max_pool_clip(frame_emb: np.ndarray, fps: float, start: float, end: float) -> np.ndarray:
    """Max over the per-second rows a clip ``[start, end)`` covers (the rows alignment uses
    for that window: ``encoders.cache.rows_covering``)."""
    if len(frame_emb) == 0:
        raise ValueError("no frame embeddings")
    lo, hi = rows_covering(np.array([start]), np.array([end]), len(frame_emb), fps)
    return max_pool_frames(frame_emb[int(lo[0]):int(hi[0])])


class MEEEncoder(Encoder):
    """A frozen base encoder followed by the trained gated units. ``encode_images`` embeds
    single frames (one-frame clips); longer clips go through ``pool_clips``, as trained."""

    pooling = "max"

    def __init__(self, base: Encoder, joint: JointEmbedding) -> None:
        super().__init__()
        self.base, self.joint = base.requires_grad_(False), joint
        self.dim, self.image_size, self.name = joint.dim, base.image_size, f"mee[{base.name}]"

    def train(self, mode: bool = True) -> MEEEncoder:
        super().train(mode)
        self.base.eval()  # frozen: no dropout / batch-norm updates
        return self

    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        return self.base.preprocess_images(frames)

    def tokenize(self, texts: Sequence[str]) -> Any:
        return self.base.tokenize(texts)

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            feats = self.base.image_features(pixels)
        return self.joint.video_unit(F.normalize(feats.float(), dim=-1))

    def text_features(self, tokens: Any) -> torch.Tensor:
        with torch.no_grad():
            feats = self.base.text_features(tokens)
        return self.joint.text_unit(F.normalize(feats.float(), dim=-1))

    @torch.no_grad()
    def embed_pooled(self, pooled: np.ndarray) -> np.ndarray:
        """Max-pooled base features ``(..., base_dim)`` -> unit clip embeddings (as trained)."""
        x = torch.from_numpy(np.ascontiguousarray(pooled, dtype=np.float32)).to(self.device)
        return self.joint.video_unit(F.normalize(x, dim=-1)).float().cpu().numpy()

    @property
    def frame_encoder(self) -> Encoder:
        return self.base

    def pool_clips(self, frame_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   renormalize: bool = True) -> np.ndarray:
        """Max over the base rows ``lo:hi`` of each clip, then the unit (as trained; the unit's
        output is unit length, so ``renormalize`` changes nothing). Each distinct span is pooled
        and embedded once."""
        emb = np.asarray(frame_emb, dtype=np.float32)
        lo = np.asarray(lo)
        spans = np.stack([lo.ravel(), np.asarray(hi).ravel()], axis=1).astype(np.int64)
        keys, rows = np.unique(spans, axis=0, return_inverse=True)
        out = self.embed_pooled(np.stack([max_pool_frames(emb[a:b]) for a, b in keys]))
        return out[rows.ravel()].reshape(*lo.shape, out.shape[-1]).astype(np.float64)
