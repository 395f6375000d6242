"""Objects that cache with ``functools.lru_cache`` are freed when their last reference goes:
a cache of a bound method would hold ``self`` in a reference cycle, kept until a full
collection (a store's row groups, a searcher's encoder and query vectors)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def freed_by_refcount(make: Any) -> bool:
    obj = make()
    ref = weakref.ref(obj)
    del obj
    return ref() is None


def test_a_subtitle_store_is_freed_without_the_collector(tmp_path: Path,
                                                         no_collector: None) -> None:
    from howtocap.io.subtitle_dump import ParquetStore

    path = tmp_path / "subs.parquet"
    pd.DataFrame({"video_id": ["a", "a", "b"], "start": [0.0, 1.0, 0.0],
                  "end": [1.0, 2.0, 1.0], "text": ["x", "y", "z"]}).to_parquet(path)

    def used() -> ParquetStore:
        store = ParquetStore(path, path)
        assert list(store.get("a")["text"]) == ["x", "y"]  # its caches hold a row group
        return store

    assert freed_by_refcount(used)


def test_a_searcher_and_its_hit_records_are_freed_without_the_collector(
        no_collector: None) -> None:
    from howtocap.search.query import Searcher
    from howtocap.serve.app import HitRecords

    class Encoder:
        def encode_texts(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 4), np.float32)

    clips = pd.DataFrame({"video_id": ["v"], "start": [0.0], "end": [8.0], "text": ["cut"],
                          "orig_start": [0.0], "orig_end": [8.0]})

    class Data:
        has_file: dict[str, bool] = {}
        lines: dict[str, Any] = {}

    def searcher() -> Searcher:
        s = Searcher(Path("."), {}, clips, None, None, Encoder())
        assert s.embed("cut").shape == (1, 4)
        return s

    def records() -> HitRecords:
        r = HitRecords(searcher(), Data())  # type: ignore[arg-type]
        assert r.fragment(0).startswith(b'{"video_id":"v"')
        return r

    assert freed_by_refcount(searcher)
    assert freed_by_refcount(records)
