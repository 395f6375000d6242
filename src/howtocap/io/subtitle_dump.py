"""The subtitle store: HowTo100M-size subtitles as Parquet, read by row group, never whole.

A dump is streamed once (``io.dump_readers``) into row groups of whole videos in the file's
order (``DumpWriter``, under ``DIR/cache/subtitles/``). Opening reads the ``video_id`` column
alone, as one Arrow column. A run asks in the file's order, so a lookup tries the video after
the last one found before a binary search, and each row group is decoded about once. Anyone's
Parquet is read in place, its rows cleaned per video when asked for.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from howtocap.engine.rundir import run_starts
from howtocap.errors import InputError
from howtocap.io.subtitle_rows import COLUMNS, Row, entry_rows, rows_frame, tidy_rows
from howtocap.schemas import parquet_dictionary

ROWS_PER_GROUP = 32_768  # ~800 HowTo100M videos, ~2 MB of text: cheap to decode, few groups
CACHED_GROUPS = 4  # in-flight videos (threads) span at most two neighbouring groups
FORMAT_KEY = b"howtocap.subtitles"
FORMAT_VERSION = 1
SCHEMA = pa.schema([("video_id", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                    ("text", pa.string()), ("score", pa.float64()), ("error", pa.string())])
# layout "videos": each video's rows contiguous and already clean (a repeated id: last wins, as
# json.load does); "records": rows as given, cleaned and sorted per video when read.


# -- writing -------------------------------------------------------------------------------
class DumpWriter:
    """Buffers rows and writes a row group once ``rows_per_group`` rows are complete (a video
    never split); ``max_buffered_rows``: the conversion's memory high-water mark."""

    def __init__(self, path: str | Path, layout: str, rows_per_group: int = ROWS_PER_GROUP) -> None:
        meta = {FORMAT_KEY: json.dumps({"version": FORMAT_VERSION, "layout": layout}).encode()}
        self.writer = pq.ParquetWriter(str(path), SCHEMA.with_metadata(meta), compression="zstd",
                                       use_dictionary=parquet_dictionary(SCHEMA))
        self.layout, self.rows_per_group = layout, rows_per_group
        self.videos = self.rows = self.max_buffered_rows = 0
        self._rows: list[tuple[Any, ...]] = []  # (video_id, start, end, text, score, error)
        self._last_id: str | None = None  # the last whole video added, while still buffered
        self._last_start = -1

    def add_rows(self, video_id: str, rows: list[Row] | str | None) -> None:
        """A record's rows, or one row of null text carrying its problem (a str) or None (a
        video without rows)."""
        if isinstance(rows, list):
            self._rows += [(video_id, *r, None) for r in rows]
            self.rows += len(rows)
        else:
            self._rows.append((video_id, None, None, None, None, rows))
        self.max_buffered_rows = max(self.max_buffered_rows, len(self._rows))
        if len(self._rows) >= self.rows_per_group:
            self.flush()

    def add_video(self, video_id: str, rows: list[Row] | None, error: str | None = None) -> None:
        """One whole video (clean rows, or its entry's problem; an empty one still gets a row).
        The same id straight again replaces it (json.load's "last key wins")."""
        if video_id == self._last_id and self._last_start >= 0:
            self.rows -= sum(r[3] is not None for r in self._rows[self._last_start:])
            del self._rows[self._last_start:]
            self.videos -= 1
        self._last_id, self._last_start = video_id, len(self._rows)
        self.videos += 1
        self.add_rows(video_id, rows or error)

    def flush(self) -> None:
        if not self._rows:
            return
        cols = zip(*self._rows, strict=True)  # a column at a time: not all of them as tuples
        arrays = [pa.array(c, f.type) for c, f in zip(cols, SCHEMA, strict=True)]
        self.writer.write_table(pa.table(arrays, schema=SCHEMA), row_group_size=len(self._rows))
        self._rows, self._last_start = [], -1

    def close(self) -> None:
        self.flush()
        self.writer.close()


# -- reading by row group ------------------------------------------------------------------
class ParquetStore:
    """Lookups by video id into a Parquet file read a row group at a time (see module doc)."""

    def __init__(self, path: Path, shown_as: Path, *, select: frozenset[str] | None = None,
                 limit: int | None = None, cached_groups: int = CACHED_GROUPS) -> None:
        self.shown_as = Path(shown_as)  # the user's file, for error messages
        try:
            self.pf = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types
            raise InputError(shown_as, f"not a readable Parquet file ({type(exc).__name__})") \
                from None
        meta = self.pf.schema_arrow.metadata or {}
        self.layout = str(json.loads(meta.get(FORMAT_KEY, b"{}")).get("layout", "foreign"))
        names = set(self.pf.schema_arrow.names)
        if "video_id" not in names:
            raise InputError(shown_as, "a single-table source needs a video_id column "
                                       "(or give a folder of <video_id>.csv files)")
        if missing := [c for c in COLUMNS if c not in names]:
            raise InputError(shown_as, f"missing column {missing[0]!r}")
        self.columns = [c for c in ("video_id", *COLUMNS, "score", "error") if c in names]
        sizes = [self.pf.metadata.row_group(i).num_rows for i in range(self.pf.num_row_groups)]
        self.group_starts = list(itertools.accumulate(sizes, initial=0))
        # caches of functions of the file, not of self (a bound method would make a cycle)
        pf, columns = self.pf, self.columns
        self._group = functools.lru_cache(cached_groups)(
            lambda g: pf.read_row_group(g, columns=columns))
        self._decoded = functools.lru_cache(2)(  # as lists a group weighs more: the 2 in use
            functools.partial(_decode, self._group))
        self._last = -1  # the number last found
        self._lock = threading.Lock()
        self.max_buffered_rows = 0
        self._read_videos(select, limit)

    def _read_videos(self, select: frozenset[str] | None, limit: int | None) -> None:
        """Each video's id (``ids``, one Arrow column: a dict of 1.2M ids held ~200 MB) and
        runs of rows (numpy), in the file's order, the ``video_id`` column read a group at a
        time. A video given again is one video, numbered where it first comes, with every run
        of rows (``get`` takes the last of a "videos" layout: the last key wins)."""
        wanted = pa.array(sorted(select), pa.string()) if select is not None else None
        wide = np.int32 if self.group_starts[-1] < 2**31 else np.int64  # HowTo100M: ~50M rows
        ids: list[pa.Array] = []  # a group's kept runs: their ids, first rows and rows
        starts, lengths = [np.zeros(0, wide)], [np.zeros(0, np.int32)]
        for g in range(self.pf.num_row_groups):
            if self.layout == "videos" and limit is not None and sum(map(len, ids)) >= limit:
                break  # whole videos in order: the first ``limit`` are read
            col = self.pf.read_row_group(g, columns=["video_id"]).column(0).combine_chunks()
            runs = pc.run_end_encode(col.cast(pa.string()))
            keep = pc.not_equal(runs.values, "")  # no id (null or ""): no video
            if wanted is not None:
                keep = pc.and_(keep, pc.is_in(runs.values, value_set=wanted))
            keep = pc.fill_null(keep, False).to_numpy(zero_copy_only=False)
            ids.append(runs.values.filter(pa.array(keep)))
            ends = runs.run_ends.to_numpy()
            length = np.diff(ends, prepend=0)
            starts.append((ends - length + self.group_starts[g])[keep].astype(wide))
            lengths.append(length[keep].astype(np.int32))
        run_ids = pa.chunked_array(ids, pa.string())  # a chunk a group: no copy of them all
        start, length = np.concatenate(starts), np.concatenate(lengths)
        self._ptr: np.ndarray | None = None  # None: video k is run k
        order = pc.sort_indices(run_ids)  # sorted neighbours compared: no hash table (~200 MB)
        if run_starts(run_ids, order).all():  # the common case: every run its own video
            order = order.to_numpy().astype(np.int32)
            self.ids, self._start, self._len = run_ids[:limit], start[:limit], length[:limit]
            self._order: np.ndarray | None = order if limit is None else order[order < limit]
            return
        unique = pc.unique(run_ids)[:limit]  # first appearances (rare: its hash table is big)
        self.ids, self._order = pa.chunked_array([unique]), None  # sorted when first searched
        video = pc.index_in(run_ids, value_set=unique)  # each run's video (null: not kept)
        kept = video.is_valid().to_numpy(zero_copy_only=False)
        video = video.drop_null().to_numpy()
        order = np.argsort(video, kind="stable")
        self._start, self._len = start[kept][order], length[kept][order]
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(video, minlength=len(unique)))])

    # -- lookups ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def id_array(self, lo: int, hi: int) -> pa.Array:
        """As Arrow, not Python strings: 1.2M short-lived ones left the heap ~50 MB larger."""
        return self.ids[lo:hi].combine_chunks()

    def holds(self, ids: pa.Array) -> np.ndarray:
        """Which of ``ids`` (distinct) the file has: a hash table of them alone."""
        at = pc.index_in(self.ids, value_set=ids.cast(pa.string())).drop_null().to_numpy()
        hit = np.zeros(len(ids), dtype=bool)
        hit[at] = True
        return hit

    def _find(self, video_id: str) -> int:
        """The video's number, or -1: the video after the last one found first (a run asks
        in the file's order), then a binary search over the ids' sorted order (Arrow sorts by
        UTF-8 bytes, the order of Python's ``<`` on ``str``)."""
        k = self._last + 1
        if not (k < len(self.ids) and self.ids[k].as_py() == video_id):
            if self._order is None:
                self._order = pc.sort_indices(self.ids).to_numpy().astype(np.int32)
            order, key = self._order, lambda i: self.ids[int(i)].as_py()
            at = bisect.bisect_left(order, video_id, key=key)
            k = int(order[at]) if at < len(order) and key(order[at]) == video_id else -1
        self._last = k
        return k

    def __contains__(self, video_id: str) -> bool:
        with self._lock:
            return self._find(video_id) >= 0

    def get(self, video_id: str, frame: bool = True) -> pd.DataFrame | dict[str, Any] | None:
        """The video's clean ``start, end, text[, score]`` rows, or None when not in the file;
        ``frame=False``: plain columns where the file is clean (no pandas)."""
        with self._lock:
            k = self._find(video_id)
            if k < 0:
                return None
            i, j = (k, k + 1) if self._ptr is None else (self._ptr[k], self._ptr[k + 1])
            parts = []  # (row group, first row in it, rows): a run never crosses a group
            for start, n in zip(self._start[i:j].tolist(), self._len[i:j].tolist(), strict=True):
                g = bisect.bisect_right(self.group_starts, start) - 1
                parts.append((g, start - self.group_starts[g], n))
            if self.layout == "videos":  # ours: clean, its last run wins
                return self._video_rows(*parts[-1], frame)
            table = pa.concat_tables([self._group(g).slice(a, n) for g, a, n in parts])
        if "error" in table.column_names:
            self._raise_first(table.column("error").to_pylist())
        return self._from_raw(video_id, table)

    def _video_rows(self, g: int, a: int, n: int, frame: bool) -> pd.DataFrame | dict[str, Any]:
        """Rows ``a`` to ``a + n`` of group ``g``, sliced from its columns decoded once: a few
        list slices, not Arrow calls and ``to_pandas`` (most of a text-only stage's time)."""
        cols = self._decoded(g)
        b = a + n
        if cols["error"] is not None:
            self._raise_first(cols["error"][a:b])
        text = cols["text"][a:b]
        rows: slice | list[int] = slice(a, b)
        if None in text:  # the placeholder row of a video without text
            rows = [a + i for i, t in enumerate(text) if t is not None]
            text = [t for t in text if t is not None]
        out = {"start": cols["start"][rows], "end": cols["end"][rows], "text": text}
        if not frame:
            return out
        df = pd.DataFrame({**out, "text": pd.Series(text, dtype=object)})
        score = cols["score"][rows]
        if len(score) and not np.isnan(score).all():
            df["score"] = score
        return df

    def _raise_first(self, errors: list[str | None]) -> None:  # ``DumpWriter.add_rows``'s
        if problem := next((e for e in errors if e), None):
            raise InputError(self.shown_as, problem)

    def _from_raw(self, video_id: str, table: pa.Table) -> pd.DataFrame:
        """Rows as given (records layout, or anyone's Parquet): checked, cleaned, sorted."""
        table = table.filter(pc.or_(table.column("text").is_valid(),  # a null-text
                                    table.column("start").is_valid()))  # placeholder: no row
        entry: dict[str, list[Any]] = {c: table.column(c).to_pylist() for c in COLUMNS}
        if "score" in table.column_names:
            entry["text"] = [[(t, s)] if s is not None else t for t, s in
                             zip(entry["text"], table.column("score").to_pylist(), strict=True)]
        return rows_frame(tidy_rows(entry_rows(self.shown_as, video_id, entry)))

    def stats(self) -> dict[str, int]:
        read = self._group.cache_info()  # an LRU cache never shrinks: its size is its peak
        return {"groups_read": read.misses, "max_cached_groups": read.currsize,
                "max_buffered_rows": self.max_buffered_rows}


def _decode(group: Any, g: int) -> dict[str, Any]:
    table = group(g)
    err = table.column("error")
    return {**{c: table.column(c).to_numpy() for c in ("start", "end", "score")},
            "text": table.column("text").to_pylist(),
            "error": err.to_pylist() if err.null_count < len(err) else None}


def is_converted(path: Path) -> bool:
    """A Parquet file written by ``DumpWriter`` (readable, with our format mark)."""
    try:
        return FORMAT_KEY in (pq.read_schema(path).metadata or {})
    except Exception:  # noqa: BLE001 - a torn or foreign file is simply not ours
        return False
