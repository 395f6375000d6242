"""What produced a table row: a stage's ``fingerprint()`` (settings, model identity, prompts,
schema version), hashed into the ``config_id`` of its records and rows. Resume compares the
dicts, so a refusal names the settings that changed.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any


def config_id(fingerprint: Mapping[str, Any]) -> str:
    """A short stable id of a fingerprint (its canonical JSON hashed)."""
    blob = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


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
