"""Small seeded models shared by tests: fast stand-ins that implement the real interfaces."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.base import Encoder
from howtocap.hashing import hash_text


class TinyEncoder(Encoder):
    """A small conv image tower and a hashed bag-of-words text tower, seeded."""

    def __init__(self, dim: int = 16, seed: int = 0) -> None:
        super().__init__()
        self.name, self.dim, self.image_size = f"tiny{dim}", dim, 32
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.img = nn.Sequential(nn.Conv2d(3, 8, 5, stride=3), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, dim))
            self.words = nn.EmbeddingBag(512, dim, mode="mean")
            self.text_proj = nn.Linear(dim, dim)

    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(frames)).to(self.device)
        x = x.permute(0, 3, 1, 2).float() / 255.0
        return F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)

    def tokenize(self, texts):
        ids, offsets = [], []
        for t in texts:
            offsets.append(len(ids))
            ids += [hash_text(w) % 512 for w in t.lower().split()] or [0]
        return (torch.tensor(ids, device=self.device), torch.tensor(offsets, device=self.device))

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.img(pixels)

    def text_features(self, tokens) -> torch.Tensor:
        return self.text_proj(self.words(*tokens))
