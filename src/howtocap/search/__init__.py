"""Moment search over a run: ``index.build_index`` writes ``DIR/index/``, ``query.Searcher``
reads it (import from those submodules: FAISS and the encoders load with them)."""
