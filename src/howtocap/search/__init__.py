"""Moment search over a run: ``build_index`` writes ``DIR/index/``, ``Searcher`` reads it."""

from howtocap.search.index import IndexInfo, build_index
from howtocap.search.query import Hit, Searcher

__all__ = ["Hit", "IndexInfo", "Searcher", "build_index"]
