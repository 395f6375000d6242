"""Torch-side image preprocessing shared by every backend, by the CLIP/BLIP processors' recipe.

Why not the Hugging Face image processors: they work on PIL images one at a time (slow for
thousands of frames) and the fast ones need torchvision; a batched resize + crop + normalise of
the uint8 frames on the target device is faster and dependency-free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def frames_to_tensor(frames: np.ndarray | torch.Tensor, *, size: int, mean: Sequence[float],
                     std: Sequence[float], device: torch.device, crop: bool = True,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 ``(n, H, W, 3)`` -> normalised ``(n, 3, size, size)`` on ``device``: shorter side to
    ``size`` then centre crop (CLIP, BLIP), or with ``crop=False`` squashed (SigLIP)."""
    x = torch.as_tensor(np.ascontiguousarray(frames)) if isinstance(frames, np.ndarray) else frames
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"expected RGB frames (n, H, W, 3), got shape {tuple(x.shape)}")
    x = x.to(device).permute(0, 3, 1, 2).to(dtype) / 255.0
    h, w = x.shape[-2:]
    if (h, w) != (size, size):
        if crop:
            scale = size / min(h, w)
            nh, nw = max(size, round(h * scale)), max(size, round(w * scale))
            if (nh, nw) != (h, w):
                x = F.interpolate(x, size=(nh, nw), mode="bilinear", antialias=True,
                                  align_corners=False)
            top, left = (nh - size) // 2, (nw - size) // 2
            x = x[..., top:top + size, left:left + size]
        else:
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True,
                              align_corners=False)
    m = torch.tensor(mean, device=device, dtype=dtype).view(1, 3, 1, 1)
    s = torch.tensor(std, device=device, dtype=dtype).view(1, 3, 1, 1)
    return ((x - m) / s).contiguous()
