"""A tiny, randomly initialised Hugging Face CLIP folder, for CI and smoke tests.

No CLIP weights or vocabulary can be downloaded in CI: the real ``transformers`` CLIP at toy
size, with a byte-level tokenizer (no merges), loads through ``encoders.create("hf:<folder>")``
like any hub model, so the whole training path (tokenizer, towers, checkpoint) is exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def make_tiny_clip(folder: str | Path, *, width: int = 32, layers: int = 1, dim: int = 16,
                   image_size: int = 32, patch_size: int = 8, seed: int = 0) -> str:
    """Write config, random weights and tokenizer to ``folder``; returns ``"hf:<folder>"``."""
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())  # GPT-2/CLIP's reversible byte -> char table
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": 256 + i for i, c in enumerate(chars)})
    bos, eos = 512, 513
    vocab["<|startoftext|>"], vocab["<|endoftext|>"] = bos, eos
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt")).save_pretrained(folder)
    heads = max(1, width // 16)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         max_position_embeddings=77, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=eos),
        vision_config=dict(hidden_size=width, intermediate_size=2 * width,
                           num_hidden_layers=layers, num_attention_heads=heads,
                           image_size=image_size, patch_size=patch_size),
        projection_dim=dim)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        CLIPModel(cfg).save_pretrained(folder)
    return f"hf:{folder}"
