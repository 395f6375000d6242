"""``howtocap serve``: ``create_app`` and ``serve`` load FastAPI when first asked for, so the
CLI can read ``serve.defaults`` without it."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from howtocap.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'howtocap.serve' has no attribute {name!r}")
