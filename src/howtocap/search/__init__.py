"""Moment search over a run: ``index.build_index`` writes ``DIR/index/``, ``query.Searcher``
reads it (import from those submodules: FAISS and the encoders load with them)."""

from typing import Literal, get_args

By = Literal["text", "video", "both"]  # what the query is compared with
BY_CHOICES: tuple[str, ...] = get_args(By)
K = 10  # results per query: the library's, the CLI's and the web API's default
BY: By = "text"  # what a query is compared with unless told: the same three
