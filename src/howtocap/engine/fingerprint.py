"""What produced a table row: a stage's ``fingerprint()`` (settings, model identity, prompts,
schema version), hashed into the ``config_id`` of its records and rows. Resume compares the
dicts, so a refusal names the settings that changed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from howtocap.atomic import JsonFolder

_lock = threading.Lock()
_memo: dict[str, str] = {}


def config_id(fingerprint: Mapping[str, Any]) -> str:
    """A short stable id of a fingerprint (its canonical JSON hashed)."""
    blob = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def file_hash(path: str | os.PathLike[str]) -> str:
    """blake2b of a file's bytes, once per (path, size, mtime), remembered in the user cache's
    hashes.json (a 1 GB GGUF is not re-hashed each run)."""
    from howtocap.bundled import cache_root

    p = Path(path).resolve()
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    with _lock:
        if key in _memo:
            return _memo[key]
        cache = JsonFolder(cache_root())
        digest = (cache.read("hashes") or {}).get(key)
        if digest is None:
            h = hashlib.blake2b(digest_size=16)
            with p.open("rb") as fh:
                while chunk := fh.read(8 << 20):
                    h.update(chunk)
            digest = h.hexdigest()
            with contextlib.suppress(OSError):  # a read-only cache only costs a re-hash later
                cache.write("hashes", {**(cache.read("hashes") or {}), key: digest})
        _memo[key] = digest
        return digest


def files_hash(paths: Iterable[Path]) -> str:
    """One hash over several files (a model folder's weights)."""
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(file_hash(p).encode())
    return h.hexdigest()


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
        return functools.reduce(lambda cur, part: cur.get(part) if isinstance(cur, Mapping)
                                else None, dotted.split("."), d)

    names = changed(old, new)
    shown = [f"{n} {short(get(old, n))} -> {short(get(new, n))}" for n in names[:4]]
    more = f" (+{len(names) - 4} more)" if len(names) > 4 else ""
    return ", ".join(shown) + more
