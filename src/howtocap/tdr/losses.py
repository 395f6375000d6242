"""The paper's training objective: L = L_TDR + λ L_aux (Jung et al. 2023, §3.3).

* L_TDR: for each frame inside an annotated step, softmax over the gold captions of the same
  video (one video per batch), the frame's own step caption the positive.
* L_aux: bilinear σ(g_i W g_n) with binary cross-entropy over pairs of annotated frames; FCL
  labels a pair positive when both frames lie in the same step, KOFCL when the IoU of their
  steps' key-object sets exceeds μ (0.1), so frames of *different* steps about the same object
  ("pour the coffee" … "now let it brew") are pulled together too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from howtocap.tdr.data import iou

AUX_KINDS = ("none", "fcl", "kofcl")


def tdr_loss(scores: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of frames × captions ``scores`` against ``gold`` caption indices
    (``-1``: the frame lies in no step and is left out). Zero when no frame counts."""
    keep = gold >= 0
    if not bool(keep.any()):
        return scores.sum() * 0.0
    return F.cross_entropy(scores[keep], gold[keep])


def fcl_labels(steps: Sequence[int]) -> torch.Tensor:
    """Pair labels for FCL: 1 where two frames share a step (``-1``: no step, label 0)."""
    s = torch.as_tensor(list(steps))
    return ((s[:, None] == s[None, :]) & (s[:, None] >= 0)).float()


def kofcl_labels(objects: Sequence[frozenset[str] | None], mu: float = 0.1) -> torch.Tensor:
    """Pair labels for KOFCL: 1 where the IoU of the two frames' key-object sets exceeds
    ``mu`` (``None``: the frame lies in no step, label 0)."""
    return torch.tensor([[float(a is not None and b is not None and iou(a, b) > mu)
                          for b in objects] for a in objects]).reshape(len(objects), len(objects))


def pair_mask(steps: Sequence[int]) -> torch.Tensor:
    """Which pairs the auxiliary loss sees: two different frames, both inside a step."""
    s = torch.as_tensor(list(steps)) >= 0
    return (s[:, None] & s[None, :]) & ~torch.eye(len(s), dtype=torch.bool)


def aux_loss(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
    """Mean BCE of σ(h_i W h_n) against ``labels`` over the pairs in ``mask``."""
    if not bool(mask.any()):
        return h.sum() * 0.0
    logits = h @ w @ h.T
    return F.binary_cross_entropy_with_logits(logits[mask], labels.to(logits)[mask])
