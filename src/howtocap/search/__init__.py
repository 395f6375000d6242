"""Moment search over a run: ``build_index`` writes ``DIR/index/``, ``Searcher`` reads it."""

from __future__ import annotations

from typing import Any

__all__ = ["Hit", "IndexInfo", "Searcher", "build_index"]
_WHERE = {"IndexInfo": "index", "build_index": "index", "Hit": "query", "Searcher": "query"}


def __getattr__(name: str) -> Any:
    """FAISS and the encoders load on first use, not when the CLI imports ``search.cli``."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"howtocap.search.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
