"""The TDR retriever (paper §3.2 and A.7.1), on frozen encoder features.

The paper's frame query is LXMERT over detector region features and the transcript; no detector
ships in a package, so here the frame query g fuses the frozen encoder's image embedding and
transcript embedding with a small trainable network. The I² context (a bidirectional LSTM over
the video's frames, or a 1-D CNN / one Transformer layer) and an FCN follow; sentences go
through Ω_R (a trainable head on the frozen text embedding); relevance is a dot product.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

CONTEXTS = ("none", "lstm", "cnn", "transformer")
MODALITIES = ("joint", "text", "image")


class TdrModel(nn.Module):
    def __init__(self, d_in: int, *, d_model: int = 256, d_r: int = 256,
                 context: str = "lstm", modality: str = "joint") -> None:
        super().__init__()
        if context not in CONTEXTS or modality not in MODALITIES:
            raise ValueError(f"context in {CONTEXTS}, modality in {MODALITIES}")
        self.context_kind, self.modality = context, modality
        self.d_model, self.d_r = d_model, d_r
        # [image; transcript; image ⊙ transcript] → g
        self.fuse = nn.Sequential(nn.Linear(3 * d_in, d_model), nn.GELU(),
                                  nn.Linear(d_model, d_model), nn.LayerNorm(d_model))
        self.context: nn.Module | None
        if context == "lstm":
            self.context = nn.LSTM(d_model, d_model // 2, batch_first=True, bidirectional=True)
        elif context == "cnn":
            self.context = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1)
        elif context == "transformer":
            self.context = nn.TransformerEncoderLayer(d_model, nhead=4,
                                                      dim_feedforward=2 * d_model,
                                                      dropout=0.1, batch_first=True)
        else:
            self.context = None
        self.fcn = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(),
                                 nn.Linear(d_model, d_r))
        self.omega = nn.Sequential(nn.Linear(d_in, d_r), nn.GELU(), nn.Linear(d_r, d_r))
        self.aux_w = nn.Parameter(torch.eye(d_model) / math.sqrt(d_model))  # bilinear W
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))

    def frames(self, image: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One video's frames ``(n, d_in)`` each → (frame representation g ``(n, d_model)``,
        L2-normalised query ``(n, d_r)``)."""
        if self.modality == "text":
            image = torch.zeros_like(image)
        elif self.modality == "image":
            text = torch.zeros_like(text)
        x = self.fuse(torch.cat([image, text, image * text], dim=-1))
        if isinstance(self.context, nn.LSTM):
            x = x + self.context(x[None])[0][0]
        elif isinstance(self.context, nn.Conv1d):
            x = x + F.relu(self.context(x.T[None])[0].T)
        elif self.context is not None:
            x = self.context(x[None])[0]
        return x, F.normalize(self.fcn(x), dim=-1)

    def sentences(self, emb: torch.Tensor) -> torch.Tensor:
        """Ω_R: frozen sentence embeddings ``(m, d_in)`` → L2-normalised ``(m, d_r)``."""
        return F.normalize(self.omega(emb), dim=-1)

    def relevance(self, query: torch.Tensor, sents: torch.Tensor) -> torch.Tensor:
        """Dot-product relevance ``(n, m)``, scaled by a learnt temperature for the softmax."""
        return self.logit_scale.exp() * query @ sents.T
