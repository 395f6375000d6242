"""``howtocap serve``: a search page and a JSON API over one run directory."""

from howtocap.serve.app import create_app, serve

__all__ = ["create_app", "serve"]
