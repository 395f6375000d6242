"""Training objectives: symmetric InfoNCE, HowTo100M's max-margin ranking, the frozen-copy pull
(on L2-normalised embeddings; text row ``i`` belongs to video row ``i``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def info_nce(text: torch.Tensor, video: torch.Tensor, logit_scale: torch.Tensor | float,
             *, text_all: torch.Tensor | None = None, video_all: torch.Tensor | None = None,
             offset: int = 0) -> torch.Tensor:
    """Symmetric InfoNCE (mean of text->video and video->text cross-entropy). Under DDP the
    local rows are scored against every rank's (``text_all``/``video_all``), this rank's first
    row in them at ``offset``."""
    text_all = text if text_all is None else text_all
    video_all = video if video_all is None else video_all
    targets = torch.arange(len(text), device=text.device) + offset
    t2v = logit_scale * text @ video_all.t()
    v2t = logit_scale * video @ text_all.t()
    return 0.5 * (F.cross_entropy(t2v, targets) + F.cross_entropy(v2t, targets))


def max_margin_ranking(sim: torch.Tensor, video_ids: list[str] | None = None,
                       margin: float = 0.1, same_video_share: float = 0.5) -> torch.Tensor:
    """HowTo100M's bidirectional hinge ranking loss with weighted negatives.

    ``sim[i, j]`` scores text ``i`` against clip ``j`` (positives on the diagonal); a positive's
    row and column are its negatives. With ``video_ids``, those of the positive's video get
    ``same_video_share`` of the weight (the paper's "half of the negatives from the same video":
    they differ in *what happens*, not in the scene); lacking either kind, all weigh the same.
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
        eq = vid.view(-1, 1) == vid.view(1, -1)
        same, other = eq & off, ~eq
        n_same = same.sum(1, keepdim=True).float()
        n_other = other.sum(1, keepdim=True).float()
        both, even = (n_same > 0) & (n_other > 0), 1.0 / (n_same + n_other).clamp(min=1)
        w_same = torch.where(both, same_video_share / n_same.clamp(min=1), even)
        w_other = torch.where(both, (1 - same_video_share) / n_other.clamp(min=1), even)
        w = same.float() * w_same + other.float() * w_other
    return (hinge * w).sum(1).mean()


def frozen_copy_regulariser(text: torch.Tensor, video: torch.Tensor,
                            text_ref: torch.Tensor, video_ref: torch.Tensor) -> torch.Tensor:
    """``1 - (mean cos(f(c), f*(c)) + mean cos(g(v), g*(v))) / 2``: 0 while at the frozen copy.

    HowToCaption's second round keeps the model near its start by *maximising* the similarity
    to a frozen copy (its code adds ``-weight * (cos_v + cos_t) / 2``); the constant 1 makes the
    logged term a distance (0 at initialisation), with the same gradient. Times alpha outside.
    """
    cos_t = F.cosine_similarity(text, text_ref.detach(), dim=-1).mean()
    cos_v = F.cosine_similarity(video, video_ref.detach(), dim=-1).mean()
    return 1.0 - 0.5 * (cos_t + cos_v)


# -- HowToCaption's BLIP-style contrastive recipe: momentum model, queue, soft labels ---------
def soft_info_nce(text: torch.Tensor, video: torch.Tensor, logit_scale: torch.Tensor | float,
                  text_keys: torch.Tensor, video_keys: torch.Tensor,
                  t2v_targets: torch.Tensor, v2t_targets: torch.Tensor) -> torch.Tensor:
    """InfoNCE against any candidates (``text_keys``/``video_keys``: the batch, perhaps from
    the momentum model, then the queue) with target *distributions* over them (ALBEF/BLIP's
    ITC); with one-hot targets over the batch this is ``info_nce``."""
    t2v = logit_scale * text @ video_keys.t()
    v2t = logit_scale * video @ text_keys.t()
    lt = -(F.log_softmax(t2v, dim=1) * t2v_targets).sum(1).mean()
    lv = -(F.log_softmax(v2t, dim=1) * v2t_targets).sum(1).mean()
    return 0.5 * (lt + lv)


def itc_targets(ids: torch.Tensor, key_ids: torch.Tensor, teacher_logits: torch.Tensor | None,
                soft: float) -> torch.Tensor:
    """``soft * softmax(teacher) + (1 - soft) * positives`` per row (ALBEF's distillation).
    Positives are all candidates of the same clip, spread evenly (BLIP's image ids): on a small
    data set the queue holds other views of the batch's clips, which must not be negatives."""
    pos = (ids.view(-1, 1) == key_ids.view(1, -1)).float()
    hard = pos / pos.sum(1, keepdim=True).clamp(min=1.0)
    if soft <= 0 or teacher_logits is None:
        return hard
    return soft * F.softmax(teacher_logits.float(), dim=1) + (1.0 - soft) * hard


@torch.no_grad()
def ema_update(online: nn.Module, momentum_model: nn.Module, m: float) -> None:
    """``θ_m <- m θ_m + (1 - m) θ`` for every trained parameter (frozen ones are equal anyway)."""
    for p, pm in zip(online.parameters(), momentum_model.parameters(), strict=True):
        if p.requires_grad:
            pm.mul_(m).add_(p.detach(), alpha=1.0 - m)


class FeatureQueue(nn.Module):
    """A FIFO bank of the momentum model's text and video embeddings and their clip ids, in
    buffers (it travels in the checkpoint). It starts empty, not as BLIP's random unit vectors:
    an empty start adds no noise negatives to a short run."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.size = int(size)
        self.register_buffer("text", torch.zeros(self.size, dim))
        self.register_buffer("video", torch.zeros(self.size, dim))
        self.register_buffer("ids", torch.full((self.size,), -1, dtype=torch.long))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def enqueue(self, text: torch.Tensor, video: torch.Tensor, ids: torch.Tensor) -> None:
        n = len(ids)
        if n > self.size:  # only the newest rows fit
            text, video, ids, n = text[-self.size:], video[-self.size:], ids[-self.size:], self.size
        rows = (int(self.ptr) + torch.arange(n, device=self.ids.device)) % self.size
        self.text[rows] = text.detach().to(self.text.dtype)
        self.video[rows] = video.detach().to(self.video.dtype)
        self.ids[rows] = ids.to(self.ids.dtype)
        self.ptr.fill_((int(self.ptr) + n) % self.size)
        self.count.fill_(min(self.size, int(self.count) + n))

    def contents(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stored ``(text, video, ids)``, oldest first."""
        n = int(self.count)
        start = int(self.ptr) if n == self.size else 0
        rows = (start + torch.arange(n, device=self.ids.device)) % self.size
        return self.text[rows], self.video[rows], self.ids[rows]
