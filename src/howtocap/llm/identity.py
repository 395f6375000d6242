"""What a caption fingerprint says of the LLM (``engine.fingerprint`` hashes the files; this
module knows which files and names identify an LLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from howtocap.bundled import file_hash


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
