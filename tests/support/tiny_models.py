"""Small seeded models shared by tests: fast stand-ins that implement the real interfaces."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.encoders.base import Encoder
from howtocap.hashing import hash_text
from howtocap.train.api import train


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


def save_tokenizer(folder: Path, model_max_length: int) -> dict[str, int]:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]",
                                   model_max_length=model_max_length)
    fast.save_pretrained(folder)
    return vocab


def tiny_checkpoint(kind: str, folder: Path, seed: int = 0) -> Path:
    import transformers as tf

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = save_tokenizer(folder, 16)
    # (BLIP's default initializer_range is 1e-10: random weights would all be ~0)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=8, initializer_range=0.02)
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=37,
                num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16,
                pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if kind == "clip":
        model = tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=vision,
                                           projection_dim=24))
        proc = tf.CLIPImageProcessor(size={"shortest_edge": 32},
                                     crop_size={"height": 32, "width": 32})
    elif kind == "siglip":
        model = tf.SiglipModel(tf.SiglipConfig(text_config=text, vision_config=vision))
        proc = getattr(tf, "SiglipImageProcessorPil", tf.SiglipImageProcessor)(
            size={"height": 32, "width": 32})
    else:
        model = tf.BlipForImageTextRetrieval(tf.BlipConfig(
            text_config=dict(text, sep_token_id=3), vision_config=vision,
            image_text_hidden_size=24))
        proc = getattr(tf, "BlipImageProcessorPil", tf.BlipImageProcessor)(
            size={"height": 32, "width": 32})
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def ddp_worker(rank: int, world: int, port: int, pairs: str, out: str, spec: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    res = train(pairs, out_dir=out, encoder=spec, epochs=1, batch_size=3, lr=3e-3,
                frames_per_clip=2, eval_fraction=0.25, progress=False, device="cpu")
    torch.save(res.model.state_dict(), Path(out) / f"rank{rank}.pt")
    import torch.distributed as dist

    dist.destroy_process_group()


WORDS = ["a", "photo", "of", "the", "cat", "dog", "cup", "coffee", "rocket", "launch", "pour",
         "into", "brush", "fur", "space", "suit", "put", "on", "take", "with", "camera"]


class EpochKilled(Exception):
    """A training run stopped at an epoch's end (``kill_at_epoch_end``), as a kill would."""


def kill_at_epoch_end(row: object) -> None:
    """``train(on_epoch_end=...)``: stop after the first epoch is saved."""
    raise EpochKilled
