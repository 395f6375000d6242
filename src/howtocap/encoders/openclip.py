"""open_clip models (``openclip:<arch>/<pretrained>``), an optional extra (``pip install
howtocap[openclip]``): open_clip needs torchvision, which would pull a second torch build.
Preprocessing uses its per-model mean/std and size, batched in torch like the other backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from howtocap.encoders.base import Encoder, pick_device
from howtocap.encoders.preprocess import CLIP_MEAN, CLIP_STD, frames_to_tensor
from howtocap.errors import HowtocapError


class OpenClipEncoder(Encoder):
    """``spec`` is ``<arch>/<pretrained>``, e.g. ``ViT-B-32/laion2b_s34b_b79k``."""

    def __init__(self, spec: str, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        arch, _, pretrained = spec.partition("/")
        if not arch or not pretrained:
            raise HowtocapError(f"openclip:{spec}: expected openclip:<arch>/<pretrained>, "
                                "e.g. openclip:ViT-B-32/laion2b_s34b_b79k")
        try:
            import open_clip
        except ImportError as e:
            raise HowtocapError("the openclip backend needs open_clip and torchvision: "
                                f"pip install 'howtocap[openclip]' ({e})") from None
        try:
            model, _, _ = open_clip.create_model_and_transforms(arch, pretrained=pretrained)
            self.tokenizer = open_clip.get_tokenizer(arch)
        except Exception as e:
            msg = (str(e).strip() or type(e).__name__).splitlines()[0][:200]
            raise HowtocapError(f"cannot load openclip:{spec}: {msg}") from None
        self.model = model.to(pick_device(device)).eval()
        cfg = getattr(model.visual, "preprocess_cfg", {}) or {}
        size = cfg.get("size", getattr(model.visual, "image_size", 224))
        self.image_size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.mean = tuple(cfg.get("mean", CLIP_MEAN))
        self.std = tuple(cfg.get("std", CLIP_STD))
        with torch.no_grad():
            self.dim = int(self.model.encode_text(self.tokenize(["x"])).shape[-1])
        self.name = f"openclip:{arch}/{pretrained}"

    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        return frames_to_tensor(frames, size=self.image_size, mean=self.mean, std=self.std,
                                device=self.device)

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        return self.tokenizer(list(texts)).to(self.device)

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(pixels)

    def text_features(self, tokens: Any) -> torch.Tensor:
        return self.model.encode_text(tokens)
