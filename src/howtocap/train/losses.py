"""Training objectives: symmetric InfoNCE, HowTo100M's max-margin ranking, the frozen-copy pull.

All functions take L2-normalised embeddings; row ``i`` of the text batch belongs to row ``i`` of
the video batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# CLIP's initial temperature (0.07) and its cap on the logit scale (100).
INIT_LOGIT_SCALE = math.log(1 / 0.07)
MAX_LOGIT_SCALE = math.log(100.0)


class LogitScale(nn.Module):
    """``exp(s)`` multiplying cosine similarities; learnable (clamped) or fixed (``1/temperature``).

    A fixed temperature is a buffer, so it still travels with checkpoints but never trains.
    """

    def __init__(self, temperature: float | None = None) -> None:
        super().__init__()
        self.learnable = temperature is None
        init = INIT_LOGIT_SCALE if temperature is None else math.log(1.0 / temperature)
        if self.learnable:
            self.log_scale = nn.Parameter(torch.tensor(init))
        else:
            self.register_buffer("log_scale", torch.tensor(init))

    def forward(self) -> torch.Tensor:
        return self.log_scale.clamp(0.0, MAX_LOGIT_SCALE).exp()


def info_nce(text: torch.Tensor, video: torch.Tensor, logit_scale: torch.Tensor | float,
             *, text_all: torch.Tensor | None = None, video_all: torch.Tensor | None = None,
             offset: int = 0) -> torch.Tensor:
    """Symmetric InfoNCE: mean of text->video and video->text cross-entropy over the batch.

    Under DDP pass the gathered batches as ``text_all``/``video_all`` and this rank's first row
    index in them as ``offset``: the local rows are then scored against every rank's rows.
    """
    text_all = text if text_all is None else text_all
    video_all = video if video_all is None else video_all
    targets = torch.arange(len(text), device=text.device) + offset
    t2v = logit_scale * text @ video_all.t()
    v2t = logit_scale * video @ text_all.t()
    return 0.5 * (F.cross_entropy(t2v, targets) + F.cross_entropy(v2t, targets))


def max_margin_ranking(sim: torch.Tensor, video_ids: list[str] | None = None,
                       margin: float = 0.1, same_video_share: float = 0.5) -> torch.Tensor:
    """Bidirectional hinge ranking loss of HowTo100M with weighted negatives.

    ``sim[i, j]`` scores text ``i`` against clip ``j``; the diagonal holds the positives. For each
    positive both its row (other clips for the text) and its column (other texts for the clip)
    are negatives. When ``video_ids`` is given, negatives from the same video as the positive get
    ``same_video_share`` of the total negative weight (the paper's "half of the negatives from the
    same video": they differ only in *what happens*, not in the scene), the rest is spread over
    the other videos; a positive with no same-video negative in the batch weighs all others
    equally. Returns the weighted mean hinge over positives.
    """
    n = sim.shape[0]
    pos = sim.diag()
    # hinge[i, j] for j != i: text i vs clip j, plus clip i vs text j
    hinge = F.relu(margin + sim - pos.view(-1, 1)) + F.relu(margin + sim.t() - pos.view(-1, 1))
    off = ~torch.eye(n, dtype=torch.bool, device=sim.device)
    if n < 2:
        return sim.sum() * 0.0
    if video_ids is None:
        w = off.float() / (n - 1)
    else:
        codes = {v: k for k, v in enumerate(dict.fromkeys(video_ids))}
        vid = torch.tensor([codes[v] for v in video_ids], device=sim.device)
        same = (vid.view(-1, 1) == vid.view(1, -1)) & off
        other = ~(vid.view(-1, 1) == vid.view(1, -1))
        n_same = same.sum(1, keepdim=True).float()
        n_other = other.sum(1, keepdim=True).float()
        both = (n_same > 0) & (n_other > 0)
        w_same = torch.where(both, same_video_share / n_same.clamp(min=1),
                             1.0 / (n_same + n_other).clamp(min=1))
        w_other = torch.where(both, (1 - same_video_share) / n_other.clamp(min=1),
                              1.0 / (n_same + n_other).clamp(min=1))
        w = same.float() * w_same + other.float() * w_other
    return (hinge * w).sum(1).mean()


def frozen_copy_regulariser(text: torch.Tensor, video: torch.Tensor,
                            text_ref: torch.Tensor, video_ref: torch.Tensor) -> torch.Tensor:
    """``1 - (mean cos(f(c), f*(c)) + mean cos(g(v), g*(v))) / 2``: 0 while at the frozen copy.

    HowToCaption's second round keeps the fine-tuned model near its starting point by
    *maximising* the similarity of its embeddings to a frozen copy's (the reference code adds
    ``-weight * (cos_v + cos_t) / 2``). We add the constant 1 so the logged term is a distance
    (>= 0, 0 at initialisation); the gradient is the same. Multiply by alpha outside.
    """
    cos_t = F.cosine_similarity(text, text_ref.detach(), dim=-1).mean()
    cos_v = F.cosine_similarity(video, video_ref.detach(), dim=-1).mean()
    return 1.0 - 0.5 * (cos_t + cos_v)
