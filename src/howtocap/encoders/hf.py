"""Hugging Face transformers dual encoders: CLIP, SigLIP and BLIP (ITC feature heads), one class
as they differ only in the modules giving the embeddings and text padding; the type comes from
``config.json``, so a hub id and a ``save_pretrained`` folder take the same path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from howtocap.encoders.base import Encoder, pick_device
from howtocap.encoders.preprocess import CLIP_MEAN, CLIP_STD, frames_to_tensor
from howtocap.errors import HowtocapError

# model type -> (transformers class, config attribute holding the embedding width)
_MODELS = {"clip": ("CLIPModel", "projection_dim"),
           "siglip": ("SiglipModel", "text_config.hidden_size"),  # no projection: shared width
           "blip": ("BlipForImageTextRetrieval", "image_text_hidden_size")}
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:200]


def _weights_identity(folder: Path) -> str:
    """Short hash of the config and weight files' content keys: re-saved weights -> new name."""
    from howtocap.encoders.cache import content_key

    h = hashlib.blake2b(digest_size=6)
    for fname in ("config.json", *_WEIGHT_FILES):
        f = folder / fname
        if f.exists():
            h.update(fname.encode() + content_key(f).encode())
    return h.hexdigest()


def _preprocessor_config(source: str) -> dict[str, Any]:
    from transformers.utils import cached_file

    try:  # none, offline, private or unreadable: the model type's defaults
        path = cached_file(source, "preprocessor_config.json",
                           _raise_exceptions_for_missing_entries=False)
        return json.loads(Path(path).read_text()) if path is not None else {}
    except Exception:
        return {}


class HFEncoder(Encoder):
    """A transformers CLIP/SigLIP/BLIP checkpoint used as a two-tower feature extractor."""

    def __init__(self, source: str, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        import transformers as tf

        try:
            config = tf.AutoConfig.from_pretrained(source)
        except Exception as e:
            raise HowtocapError(
                f"cannot load Hugging Face model '{source}' (a hub id or a local folder with "
                f"config.json): {_first_line(e)}") from None
        self.model_type = config.model_type
        if self.model_type not in _MODELS:
            raise HowtocapError(
                f"hf:{source}: model type '{self.model_type}' is not a supported dual encoder; "
                f"supported: {', '.join(_MODELS)}")
        from howtocap.encoders.embedded import quiet_transformers

        model_class, dim_attr = _MODELS[self.model_type]
        try:
            with quiet_transformers():
                self.model = getattr(tf, model_class).from_pretrained(source)
            self.tokenizer = tf.AutoTokenizer.from_pretrained(source)
        except Exception as e:
            raise HowtocapError(f"cannot load Hugging Face model '{source}': "
                                f"{_first_line(e)}") from None
        self.model.to(pick_device(device)).eval()
        cfg = self.model.config
        self.image_size = int(cfg.vision_config.image_size)
        self.dim = int(attrgetter(dim_attr)(cfg))
        self.max_length = int(cfg.text_config.max_position_embeddings)
        pp = _preprocessor_config(source)
        default_mean, default_std = ((0.5,) * 3, (0.5,) * 3) if self.model_type == "siglip" \
            else (CLIP_MEAN, CLIP_STD)
        self.mean = tuple(pp.get("image_mean", default_mean))
        self.std = tuple(pp.get("image_std", default_std))
        # like the checkpoint's own processor: CLIP crops the centre, SigLIP/BLIP squash
        self.crop = bool(pp.get("do_center_crop", self.model_type == "clip"))
        folder = Path(source)
        self.name = (f"hf:{folder.resolve().name}@{_weights_identity(folder)}" if folder.is_dir()
                     else f"hf:{source}")

    # -- torch level ------------------------------------------------------------------------
    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        return frames_to_tensor(frames, size=self.image_size, mean=self.mean, std=self.std,
                                device=self.device, crop=self.crop)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.model_type == "siglip":
            # SigLIP was trained on fixed-length, unmasked text: pad the same way
            tok = self.tokenizer(list(texts), padding="max_length", truncation=True,
                                 max_length=self.max_length, return_tensors="pt")
            return {"input_ids": tok["input_ids"].to(self.device)}
        max_len = min(self.max_length, getattr(self.tokenizer, "model_max_length", 10**9))
        tok = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_len,
                             return_tensors="pt")
        return {k: v.to(self.device) for k, v in tok.items()
                if k in ("input_ids", "attention_mask")}

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        m = self.model
        if self.model_type == "blip":
            hidden = m.vision_model(pixel_values=pixels, return_dict=True).last_hidden_state
            return m.vision_proj(hidden[:, 0, :])
        return _pooled(m.get_image_features(pixel_values=pixels))

    def text_features(self, tokens: Any) -> torch.Tensor:
        m = self.model
        if self.model_type == "blip":
            hidden = m.text_encoder(input_ids=tokens["input_ids"],
                                    attention_mask=tokens.get("attention_mask"),
                                    return_dict=True).last_hidden_state
            return m.text_proj(hidden[:, 0, :])
        return _pooled(m.get_text_features(**tokens))


def _pooled(out: Any) -> torch.Tensor:
    """transformers 4.x returns a tensor, 5.x an output object whose pooler is projected."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output
