"""Moment search over a run: ``index.build_index`` writes ``DIR/index/``, ``query.Searcher``
reads it (import from those submodules: FAISS and the encoders load with them)."""

K = 10  # results per query: the library's, the CLI's and the web API's default
