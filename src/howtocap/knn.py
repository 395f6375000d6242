"""The FAISS index choice shared by the search index and the duplicates step.
Bottom layer (imports nothing of the package but ``errors``; FAISS only when called), so a
step and the search index build their inner-product indexes the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from howtocap.errors import HowtocapError

if TYPE_CHECKING:
    import faiss

# Exact search grows linearly with the clips; above this size an HNSW graph answers much
# faster, with a recall@10 near exact on clustered (real-looking) embeddings but low on
# structureless random vectors: benchmarks/results/serve.md has both measured.
EXACT_MAX = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64
HNSW_EF_SEARCH = 128
IndexType = Literal["auto", "flat", "hnsw"]  # auto: flat up to EXACT_MAX vectors, hnsw above
INDEX_TYPE: IndexType = "auto"


def make_faiss(vectors: np.ndarray, index_type: str = INDEX_TYPE) -> tuple[faiss.Index, str]:
    """Exact inner product up to ``EXACT_MAX`` vectors (``auto``), an HNSW graph above."""
    import faiss

    n, dim = vectors.shape
    kind = index_type if index_type != "auto" else ("flat" if n <= EXACT_MAX else "hnsw")
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.hnsw.efSearch = HNSW_EF_SEARCH
    else:
        raise HowtocapError(f"unknown index type {index_type!r}: use auto, flat or hnsw")
    if n:
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index, kind
