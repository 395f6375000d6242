"""The trainable dual encoder: any ``Encoder`` plus a temperature, as one ``nn.Module``.

Wrapping the encoder's torch-level methods in ``forward`` is what lets DDP see (and sync) the
gradients, and keeps the temperature in the same state dict as the weights.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.base import Encoder

# CLIP's initial temperature (0.07) and its cap on the logit scale (100).
INIT_LOGIT_SCALE = math.log(1 / 0.07)
MAX_LOGIT_SCALE = math.log(100.0)


class LogitScale(nn.Module):
    """``exp(s)`` multiplying cosine similarities; learnable (clamped) or fixed (``1/temperature``:
    a buffer, so it travels with checkpoints but never trains)."""

    def __init__(self, temperature: float | None = None) -> None:
        super().__init__()
        init = INIT_LOGIT_SCALE if temperature is None else math.log(1.0 / temperature)
        if temperature is None:
            self.log_scale = nn.Parameter(torch.tensor(init))
        else:
            self.register_buffer("log_scale", torch.tensor(init))

    def forward(self) -> torch.Tensor:
        return self.log_scale.clamp(0.0, MAX_LOGIT_SCALE).exp()


class DualModel(nn.Module):
    def __init__(self, encoder: Encoder, temperature: float | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.logit_scale = LogitScale(temperature)

    def encode_clips(self, frames: np.ndarray) -> torch.Tensor:
        """``(B, k, H, W, 3)`` uint8 -> ``(B, dim)``: mean of unit frame vectors, re-normalised."""
        b, k = frames.shape[:2]
        pix = self.encoder.preprocess_images(frames.reshape(b * k, *frames.shape[2:]))
        per_frame = F.normalize(self.encoder.image_features(pix).float(), dim=-1)
        return F.normalize(per_frame.view(b, k, -1).mean(1), dim=-1)

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        feats = self.encoder.text_features(self.encoder.tokenize(texts))
        return F.normalize(feats.float(), dim=-1)

    def forward(self, frames: np.ndarray, texts: list[str]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit text and clip embeddings, and the logit scale (inside forward so DDP sees it)."""
        return self.encode_texts(texts), self.encode_clips(frames), self.logit_scale()
