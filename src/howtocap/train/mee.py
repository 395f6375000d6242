"""The HowTo100M baseline: gated embedding units on frozen, pre-extracted features.

Miech et al. (2019) map max-pooled video features and pooled word vectors into a joint space
with one gated embedding unit per modality. Here the frozen features come from any encoder:
per-second frame embeddings (from the frame cache) max-pooled over the clip, and the encoder's
sentence embedding for the text (the embedded default's is MiniLM; no word2vec ships in a
package). ``MEEEncoder`` wraps the frozen encoder plus the two units as an ``Encoder``, so a
trained baseline can be used by align, eval and search like any other model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.base import Encoder


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


def max_pool_clip(frame_emb: np.ndarray, fps: float, start: float, end: float) -> np.ndarray:
    """Max over the per-second embeddings centred in ``[start, end]`` (the nearest if none)."""
    n = len(frame_emb)
    if n == 0:
        raise ValueError("no frame embeddings")
    centres = (np.arange(n) + 0.5) / fps
    rows = np.flatnonzero((centres >= start) & (centres <= end))
    if len(rows) == 0:
        rows = np.array([int(np.clip(np.argmin(np.abs(centres - 0.5 * (start + end))), 0, n - 1))])
    return frame_emb[rows].astype(np.float32).max(0)


class MEEEncoder(Encoder):
    """A frozen base encoder followed by the trained gated units (usable wherever an Encoder is).

    Per frame at inference (align scores single frames); the training clips were max-pooled,
    and both paths L2-normalise before the unit, so the spaces agree.
    """

    def __init__(self, base: Encoder, joint: JointEmbedding, name: str | None = None) -> None:
        super().__init__()
        self.base = base
        self.joint = joint
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.dim = joint.dim
        self.image_size = base.image_size
        self.name = name or f"mee[{base.name}]"

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
