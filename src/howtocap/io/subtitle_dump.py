"""HowTo100M-size subtitle dumps without loading them: stream once into Parquet, read by row group.

``json.load`` of HowTo100M's ``caption.json`` (1.2M videos, several GB) takes several times its
size as Python objects, so the dump is streamed once with ijson and written as Parquet row groups
of whole videos in the file's order. Opening it reads the ``video_id`` column alone: the ids
stay one Arrow column (no Python string a video) beside each video's first row and length. A
run asks for its videos in the file's order (a text-only run's shards are ranges of it), so a
lookup is answered by the ids of the block of videos from the last one found, else by a binary
search over the ids' sorted order, and the rows come from the row group holding them, kept in
a small LRU: each group is decoded about once per run. Peak memory is a row group or two plus
the ids, whatever the size of the dump.

The converted file is kept (``DIR/cache/subtitles/``, keyed by the source's path, size, mtime
and the selection), so a resumed or sharded run does not stream again. A Parquet source is read
in place; someone else's rows are cleaned per video when asked for and need not be grouped. A
pickle cannot be streamed: it is loaded once and converted (``howtocap subtitles convert``).
``io.subtitles`` opens a source's store (``open_store``) with the pieces here.
"""

from __future__ import annotations

import bisect
import json
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from howtocap.errors import InputError
from howtocap.io.subtitle_rows import (
    COLUMNS,
    Row,
    entry_rows,
    rows_frame,
    tidy_rows,
)
from howtocap.schemas import parquet_dictionary

ROWS_PER_GROUP = 32_768  # ~800 HowTo100M videos, ~2 MB of text: cheap to decode, few groups
CACHED_GROUPS = 4  # in-flight videos (threads) span at most two neighbouring groups
NEAR = 8192  # videos whose ids answer in-order lookups before the next binary search
FORMAT_KEY = b"howtocap.subtitles"
FORMAT_VERSION = 1
SCHEMA = pa.schema([("video_id", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                    ("text", pa.string()), ("score", pa.float64()), ("error", pa.string())])
# layout "videos": each video's rows contiguous and already clean (a repeated id: last wins, as
# json.load does); "records": rows as given, cleaned and sorted per video when read.


# -- writing -------------------------------------------------------------------------------
class DumpWriter:
    """Buffers rows and writes a row group once ``rows_per_group`` rows are complete.

    ``add_video`` never splits a video across row groups. ``max_buffered_rows`` is the memory
    high-water mark of the conversion (checked by the streaming test).
    """

    def __init__(self, path: str | Path, layout: str, rows_per_group: int = ROWS_PER_GROUP
                 ) -> None:
        meta = {FORMAT_KEY: json.dumps({"version": FORMAT_VERSION, "layout": layout}).encode()}
        self.schema = SCHEMA.with_metadata(meta)
        self.layout = layout
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="zstd",
                                       use_dictionary=parquet_dictionary(SCHEMA))
        self.rows_per_group = rows_per_group
        self.videos = 0
        self.rows = 0
        self.max_buffered_rows = 0
        self._cols: dict[str, list[Any]] = {n: [] for n in SCHEMA.names}
        self._last_id: str | None = None  # the last whole video added, while still buffered
        self._last_start = -1
        self._last_empty = False

    def add_rows(self, video_id: str, rows: list[Row]) -> None:
        c = self._cols
        c["video_id"].extend([video_id] * len(rows))
        c["start"].extend([r[0] for r in rows])
        c["end"].extend([r[1] for r in rows])
        c["text"].extend([r[2] for r in rows])
        c["score"].extend([r[3] for r in rows])
        c["error"].extend([None] * len(rows))
        self.rows += len(rows)

    def add_error(self, video_id: str, problem: str) -> None:
        """A record whose numbers are bad: one row carrying the message (text is null)."""
        self._placeholder(video_id, problem)

    def add_video(self, video_id: str, rows: list[Row] | None, error: str | None = None
                  ) -> None:
        """One whole video (clean rows, or the problem with its entry); an empty one still
        gets a row, so it is known. The same id straight again replaces it (json.load's "last
        key wins"; a repeat further on is a later run, which the reader prefers)."""
        n = len(self._cols["video_id"])
        if video_id == self._last_id and self._last_start >= 0:
            for col in self._cols.values():
                del col[self._last_start:]
            self.rows -= n - self._last_start - (1 if self._last_empty else 0)
            self.videos -= 1
            n = self._last_start
        self._last_id, self._last_start = video_id, n
        self._last_empty = not rows
        if rows:
            self.add_rows(video_id, rows)
        else:
            self._placeholder(video_id, error)
        self.videos += 1
        self.maybe_flush()

    def _placeholder(self, video_id: str, error: str | None) -> None:
        for name, value in (("video_id", video_id), ("start", None), ("end", None),
                            ("text", None), ("score", None), ("error", error)):
            self._cols[name].append(value)

    def maybe_flush(self) -> None:
        n = len(self._cols["video_id"])
        self.max_buffered_rows = max(self.max_buffered_rows, n)
        if n >= self.rows_per_group:
            self.flush()

    def flush(self) -> None:
        if not self._cols["video_id"]:
            return
        table = pa.table({n: pa.array(v, type=SCHEMA.field(n).type)
                          for n, v in self._cols.items()}, schema=self.schema)
        self.writer.write_table(table, row_group_size=len(table))
        self._cols = {n: [] for n in SCHEMA.names}
        self._last_start = -1

    def close(self) -> None:
        self.flush()
        self.writer.close()


# -- reading JSON as a stream --------------------------------------------------------------
class _CountingReader:
    """A binary file that remembers where the parser is, so a JSON error can name its line."""

    def __init__(self, fh: Any, on_read: Callable[[int], None] | None = None) -> None:
        self.fh = fh
        self.offset = 0  # bytes handed out before the last chunk
        self.newlines = 0  # newlines before the last chunk
        self.last_newline = -1  # absolute offset of the last newline before the last chunk
        self.chunk = b""
        self.on_read = on_read

    def read(self, n: int = -1) -> bytes:
        if self.chunk:
            self.offset += len(self.chunk)
            self.newlines += self.chunk.count(b"\n")
            nl = self.chunk.rfind(b"\n")
            if nl >= 0:
                self.last_newline = self.offset - len(self.chunk) + nl
        self.chunk = self.fh.read(n)
        if self.on_read is not None and self.chunk:
            self.on_read(len(self.chunk))
        return self.chunk

    def position(self, message: str) -> tuple[int, int | None]:
        """(line, column) of a yajl error: its context snippet located in the last chunk; the
        column is ``None`` when the snippet cannot be placed exactly."""
        lines = message.split("\n")
        chunk = self.chunk
        at: int | None = None
        if len(lines) >= 3 and "^" in lines[2]:
            snippet = lines[1].lstrip(" ")
            k = lines[2].index("^") - (len(lines[1]) - len(snippet))
            if not snippet.strip():
                at = len(chunk)  # premature end: the error is at the end of the data
            else:
                flat = chunk.replace(b"\n", b" ").replace(b"\r", b" ")
                needle = snippet.encode()
                hit = flat.find(needle)
                if hit >= 0 and flat.find(needle, hit + 1) < 0:
                    at = min(len(chunk), max(0, hit + k - 1))  # caret: 1 past
        if at is None:
            return self.newlines + 1, None
        before = chunk[:at]
        line = self.newlines + before.count(b"\n") + 1
        nl = before.rfind(b"\n")
        col = at - nl if nl >= 0 else self.offset + at - self.last_newline
        return line, col


def _json_error(path: Path, reader: _CountingReader, exc: Exception) -> InputError:
    raw = exc.args[0] if exc.args else str(exc)
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    problem = message.split("\n")[0]
    for prefix in ("parse error: ", "lexical error: "):
        problem = problem.removeprefix(prefix)
    problem = problem.rstrip(".") or type(exc).__name__
    line, col = reader.position(message)
    where = f"line {line} column {col}" if col is not None else f"line {line}"
    if "UTF8" in problem or "UTF-8" in problem:
        return InputError(path, f"not UTF-8 JSON (at {where})")
    return InputError(path, f"invalid JSON at {where}: {problem}")


def _json_stream(path: Path, on_read: Callable[[int], None] | None
                 ) -> tuple[str, Iterator[Any]]:
    """``("videos", (id, entry)…)`` for ``{id: entry}``, ``("records", record…)`` for a list."""
    import ijson

    fh = path.open("rb")
    head = fh.read(4096)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        fh.close()
        raise InputError(path, "not UTF-8 JSON (UTF-16); re-save it as UTF-8")
    skip = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    first = head[skip:].lstrip()[:1]
    if not first:
        fh.close()
        raise InputError(path, "empty file")
    fh.seek(skip)
    reader = _CountingReader(fh, on_read)
    if first == b"{":
        layout, events = "videos", ijson.kvitems(reader, "", use_float=True)
    elif first == b"[":
        layout, events = "records", ijson.items(reader, "item", use_float=True)
    else:
        fh.close()
        raise InputError(path, "expected a mapping video_id -> subtitles (a JSON object) or a "
                               "list of records")

    def guarded() -> Iterator[Any]:
        try:
            yield from events
        except ijson.JSONError as exc:
            raise _json_error(path, reader, exc) from None
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 JSON") from None
        finally:
            fh.close()

    return layout, guarded()


# -- converting ----------------------------------------------------------------------------
def _record_rows(path: Path, i: int, rec: Any) -> tuple[str, list[Row] | str]:
    """One record's video id and its rows (or the per-video problem with its numbers)."""
    if not isinstance(rec, dict) or "video_id" not in rec:
        raise InputError(path, f"item {i}: expected an object with video_id, start, end, text")
    for k in COLUMNS:
        if k not in rec:
            raise InputError(path, f"item {i}: missing {k!r}")
    vid = str(rec["video_id"])
    try:
        return vid, entry_rows(path, vid, {k: [rec[k]] for k in COLUMNS})
    except InputError as exc:
        return vid, exc.problem


def _write_videos(writer: DumpWriter, path: Path, entries: Iterable[tuple[Any, Any]],
                  select: frozenset[str] | None, limit: int | None) -> None:
    for key, entry in entries:
        if limit is not None and writer.videos >= limit:
            break
        vid = str(key)
        if select is not None and vid not in select:
            continue
        try:
            rows = tidy_rows(entry_rows(path, vid, entry))
        except InputError as exc:
            writer.add_video(vid, None, exc.problem)
            continue
        writer.add_video(vid, rows)


def _write_records(writer: DumpWriter, path: Path, records: Iterable[Any],
                   select: frozenset[str] | None, limit: int | None) -> None:
    kept: set[str] = set()
    for i, rec in enumerate(records):
        vid, rows = _record_rows(path, i, rec)
        if select is not None and vid not in select:
            continue
        if vid not in kept:
            if limit is not None and len(kept) >= limit:
                continue  # keep scanning: a kept video's records may come later
            kept.add(vid)
        if isinstance(rows, str):
            writer.add_error(vid, rows)
        else:
            writer.add_rows(vid, rows)
        writer.maybe_flush()
    writer.videos = len(kept)


def _csv_records(path: Path) -> Iterator[dict[str, Any]]:
    """A single ``video_id,start,end,text`` CSV, chunk by chunk, as records."""
    head = _read_csv_part_head(path)
    if "video_id" not in head:
        raise InputError(path, "a single-table source needs a video_id column "
                               "(or give a folder of <video_id>.csv files)")
    try:
        for chunk in pd.read_csv(path, keep_default_na=False, chunksize=ROWS_PER_GROUP,
                                 dtype={"video_id": str}):
            yield from chunk[["video_id", *COLUMNS]].to_dict(orient="records")
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({' '.join(str(exc).split())[:120]})") \
            from None


def _read_csv_part_head(path: Path) -> list[str]:
    """The CSV's columns, with the per-video reader's checks and one-line errors."""
    try:
        cols = list(pd.read_csv(path, nrows=0).columns)
    except pd.errors.EmptyDataError:
        raise InputError(path, "empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({' '.join(str(exc).split())[:120]})") \
            from None
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise InputError(path, f"needs columns start,end,text; missing {','.join(missing)}")
    return cols


def _load_pickle(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)  # noqa: S301 - the user's own dataset file
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise InputError(path, f"not a readable pickle ({type(exc).__name__})") from None


def convert_dump(src: Path, kind: str, out: str | Path, *, select: frozenset[str] | None = None,
                 limit: int | None = None, progress: bool = False,
                 rows_per_group: int = ROWS_PER_GROUP) -> DumpWriter:
    """Stream a ``json`` / ``pickle`` / ``csv`` dump into a Parquet file at ``out``."""
    bar = None
    on_read = None
    if progress and kind == "json":
        from howtocap.progress import progress_bar

        bar = progress_bar(f"reading {src.name} (MB)", transient=True)
        bar.start()
        task = bar.add_task("read", total=max(1, src.stat().st_size // 1_000_000))
        on_read = lambda n: bar.update(task, advance=n / 1e6)  # noqa: E731
    try:
        if kind == "json":
            layout, stream = _json_stream(src, on_read)
        elif kind == "pickle":
            data = _load_pickle(src)
            if isinstance(data, dict):
                layout, stream = "videos", iter(data.items())
            elif isinstance(data, list):
                layout, stream = "records", iter(data)
            else:
                raise InputError(src, f"expected a mapping video_id -> subtitles, got "
                                      f"{type(data).__name__}")
        elif kind == "csv":
            layout, stream = "records", _csv_records(src)
        else:
            raise ValueError(f"not a dump kind: {kind}")
        writer = DumpWriter(out, layout, rows_per_group)
        try:
            if layout == "videos":
                _write_videos(writer, src, stream, select, limit)
            else:
                _write_records(writer, src, stream, select, limit)
        finally:
            writer.close()
            close = getattr(stream, "close", None)
            if close is not None:  # --limit stops early: release the file now
                close()
        return writer
    finally:
        if bar is not None:
            bar.stop()


# -- reading by row group ------------------------------------------------------------------
class ParquetStore:
    """Lookups by video id into a Parquet file read one row group at a time (see module doc)."""

    def __init__(self, path: Path, shown_as: Path, *, select: frozenset[str] | None = None,
                 limit: int | None = None, cached_groups: int = CACHED_GROUPS) -> None:
        self.path = Path(path)
        self.shown_as = Path(shown_as)  # the user's file, for error messages
        try:
            self.pf = pq.ParquetFile(self.path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many types
            raise InputError(shown_as, f"not a readable Parquet file ({type(exc).__name__})") \
                from None
        meta = self.pf.schema_arrow.metadata or {}
        info = json.loads(meta[FORMAT_KEY]) if FORMAT_KEY in meta else {}
        self.layout = str(info.get("layout", "foreign"))
        names = set(self.pf.schema_arrow.names)
        if "video_id" not in names:
            raise InputError(shown_as, "a single-table source needs a video_id column "
                                       "(or give a folder of <video_id>.csv files)")
        for c in COLUMNS:
            if c not in names:
                raise InputError(shown_as, f"missing column {c!r}")
        self.columns = [c for c in ("video_id", *COLUMNS, "score", "error") if c in names]
        md = self.pf.metadata
        self.group_starts = [0]
        for i in range(md.num_row_groups):
            self.group_starts.append(self.group_starts[-1] + md.row_group(i).num_rows)
        self.cached_groups = cached_groups
        self._cache: OrderedDict[int, pa.Table] = OrderedDict()
        self._decoded: dict[int, dict[str, Any]] = {}  # ``_video_rows``' columns
        self._near: dict[str, int] = {}  # the ids of the block of videos last found
        self._last = -1  # the number last found
        self._order: np.ndarray | None = None  # the ids' sorted order (``_search``)
        self._lock = threading.Lock()
        self.groups_read = 0
        self.max_cached_groups = 0
        self.max_buffered_rows = 0
        self._read_videos(select, limit)

    def _read_videos(self, select: frozenset[str] | None, limit: int | None) -> None:
        """Each video's id and rows, in the file's order, from the ``video_id`` column read a
        row group at a time: the ids as one Arrow column (no Python string a video: a dict of
        HowTo100M's 1.2M ids held ~200 MB), each video's run of rows as numpy. A video given
        again (records scattered over the file, a repeated key) is one video, numbered where
        it first comes, with every run of rows ("records") or its last ("videos": the last key
        wins, as with ``json.load``). ``select`` and ``limit`` then keep some videos."""
        wanted = pa.array(sorted(select), pa.string()) if select is not None else None
        wide = np.int32 if self.group_starts[-1] < 2**31 else np.int64  # HowTo100M: ~50M rows
        ids: list[pa.Array] = []
        runs: list[tuple[np.ndarray, np.ndarray]] = []  # (first row, rows) of the kept runs
        last_wins = self.layout == "videos"
        for g in range(self.pf.metadata.num_row_groups):
            if last_wins and limit is not None and sum(len(i) for i in ids) >= limit:
                break  # whole videos in order: the first ``limit`` are read
            col = self.pf.read_row_group(g, columns=["video_id"]).column(0).combine_chunks()
            col = col.cast(pa.string())
            n = len(col)
            if not n:
                continue
            change = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True)
            at = np.flatnonzero(np.append(True, change.to_numpy(zero_copy_only=False)))
            run_ids = col.take(pa.array(at))
            keep = pc.and_(pc.is_valid(run_ids), pc.not_equal(run_ids, ""))  # no id: no video
            if wanted is not None:
                keep = pc.and_(keep, pc.is_in(run_ids, value_set=wanted))
            keep = pc.fill_null(keep, False).to_numpy(zero_copy_only=False)
            ids.append(run_ids.filter(pa.array(keep)))
            runs.append(((at + self.group_starts[g])[keep].astype(wide),
                         np.diff(np.append(at, n))[keep].astype(np.int32)))
        run_ids = pa.chunked_array(ids, pa.string())  # a chunk a group: no copy of them all
        start = np.concatenate([r[0] for r in runs] or [np.zeros(0, wide)])
        length = np.concatenate([r[1] for r in runs] or [np.zeros(0, np.int32)])
        self._ptr: np.ndarray | None = None  # None: video k is run k
        self.ids: pa.ChunkedArray | pa.Array
        order = _order_if_distinct(run_ids)
        if order is not None:  # the common case: every run its own video
            self.ids, self._start, self._len = run_ids[:limit], start[:limit], length[:limit]
            self._order = order if limit is None else order[order < limit]  # ``_search``'s
            return
        self.ids = pc.unique(run_ids)[:limit]  # first appearances (rare: its hash table is big)
        video = pc.index_in(run_ids, value_set=self.ids)  # each run's video (null: not kept)
        kept = video.is_valid().to_numpy(zero_copy_only=False)
        video = video.drop_null().to_numpy()
        start, length = start[kept], length[kept]
        if last_wins:
            last = np.zeros(len(self.ids), dtype=np.int64)
            np.maximum.at(last, video, np.arange(len(video)))
            self._start, self._len = start[last], length[last]
            return
        order = np.argsort(video, kind="stable")
        self._start, self._len = start[order], length[order]
        self._ptr = np.concatenate([[0], np.cumsum(np.bincount(video, minlength=len(self.ids)))])

    # -- lookups ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ids)

    def video_ids(self) -> list[str]:
        """Every video id, in the file's order (a list of them all: ``ids_window`` for a
        window of a large file)."""
        return self.ids.to_pylist()

    def ids_window(self, lo: int, hi: int) -> list[str]:
        """The ids of videos ``lo`` to ``hi`` in the file's order."""
        return self.ids[lo:hi].to_pylist()

    def id_array(self, lo: int, hi: int) -> pa.Array:
        """``ids_window`` as one Arrow array: ``videos.parquet`` of a 1.2M-video run without
        a Python string a video (the millions of short-lived strings left the heap ~50 MB
        larger for the stages that follow)."""
        return self.ids[lo:hi].combine_chunks()

    def holds(self, ids: pa.Array) -> np.ndarray:
        """Which of ``ids`` (distinct) the file has: a hash table of them alone (Arrow's),
        the file's ids looked up in it once."""
        at = pc.index_in(self.ids, value_set=ids.cast(pa.string())).drop_null().to_numpy()
        hit = np.zeros(len(ids), dtype=bool)
        hit[at] = True
        return hit

    def _find(self, video_id: str) -> int:
        """The video's number (file order), or -1. A run asks in the file's order, so the
        ids of the block of ``NEAR`` videos from the last one found answer most lookups; the
        block is read again only when the next video is asked for (in order), so a run in
        another order (video files listed apart from the dump) pays a binary search a lookup
        and never a block."""
        k = self._near.get(video_id)
        if k is None:
            k = self._search(video_id)
            if k >= 0 and k == self._last + 1:
                self._near = {v: k + i for i, v in
                              enumerate(self.ids[k:k + NEAR].to_pylist())}
        self._last = k
        return k

    def _search(self, video_id: str) -> int:
        """Binary search over the ids' sorted order (int32 a video: kept from opening, or,
        when ids repeated there, sorted at the first lookup; Arrow sorts by UTF-8 bytes, the
        order of Python's ``<`` on ``str``)."""
        if self._order is None:
            self._order = pc.sort_indices(self.ids).to_numpy().astype(np.int32)
        order, ids = self._order, self.ids
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            if ids[int(order[mid])].as_py() < video_id:
                lo = mid + 1
            else:
                hi = mid
        return int(order[lo]) if lo < len(order) and ids[int(order[lo])].as_py() == video_id \
            else -1

    def _runs(self, k: int) -> list[tuple[int, int]]:
        """Video ``k``'s runs of rows as ``(first row, rows)``."""
        if self._ptr is None:
            return [(int(self._start[k]), int(self._len[k]))]
        a, b = int(self._ptr[k]), int(self._ptr[k + 1])
        return list(zip(self._start[a:b].tolist(), self._len[a:b].tolist(), strict=True))

    def __contains__(self, video_id: str) -> bool:
        with self._lock:
            return self._find(video_id) >= 0

    def _group(self, g: int) -> pa.Table:
        table = self._cache.get(g)
        if table is None:
            table = self.pf.read_row_group(g, columns=self.columns)
            self.groups_read += 1
            self._cache[g] = table
            while len(self._cache) > self.cached_groups:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(g)
        self.max_cached_groups = max(self.max_cached_groups, len(self._cache))
        return table

    def get(self, video_id: str, frame: bool = True) -> pd.DataFrame | dict[str, Any] | None:
        """The video's clean ``start, end, text[, score]`` rows, or None when not in the file.
        ``frame=False``: plain ``start, end, text`` columns where the file is clean (no pandas
        frame: the subtitles stage of a million-video run builds none)."""
        with self._lock:
            k = self._find(video_id)
            if k < 0:
                return None
            parts = []  # (row group, first row in it, rows): a run never crosses a group
            for start, length in self._runs(k):
                g = bisect.bisect_right(self.group_starts, start) - 1
                parts.append((g, start - self.group_starts[g], length))
            if self.layout == "videos":  # ours: one run, clean
                return self._video_rows(*parts[0], frame)
            table = pa.concat_tables([self._group(g).slice(a, n) for g, a, n in parts])
        if "error" in table.column_names:
            self._raise_first(table.column("error").to_pylist())
        return self._from_raw(video_id, table)

    def _video_rows(self, g: int, a: int, n: int, frame: bool
                    ) -> pd.DataFrame | dict[str, Any]:
        """Rows ``a`` to ``a + n`` of group ``g``. ``frame=False`` (the subtitles stage):
        sliced from the group's columns decoded once (numpy and lists), so a video in file
        order is a few list slices, not Arrow calls and ``to_pandas`` (most of a text-only
        stage's own time); a frame (with the scores when given): the video's rows alone."""
        cols = self._decoded.get(g) if not frame else None
        if cols is None:
            table = self._group(g).slice(a, n) if frame else self._group(g)
            err = table.column("error")
            cols = {**{c: table.column(c).to_numpy() for c in ("start", "end", "score")},
                    "text": table.column("text").to_pylist(),
                    "error": err.to_pylist() if err.null_count < len(err) else None}
            if frame:
                a = 0
            else:
                self._decoded[g] = cols
                while len(self._decoded) > 2:  # as lists a group weighs more than in Arrow:
                    del self._decoded[next(iter(self._decoded))]  # the two groups in use
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

    def _raise_first(self, errors: list[str | None]) -> None:
        """A video's rows carry the problem with its entry (``DumpWriter.add_error``)."""
        problem = next((e for e in errors if e), None)
        if problem:
            raise InputError(self.shown_as, problem)

    def _from_raw(self, video_id: str, table: pa.Table) -> pd.DataFrame:
        """Rows as given (records layout, or anyone's Parquet): checked, cleaned, sorted."""
        cols = {c: table.column(c).to_pylist() for c in COLUMNS}
        keep = [i for i, t in enumerate(cols["text"]) if t is not None or
                cols["start"][i] is not None]  # a null-text placeholder row is no row
        texts: list[Any] = [cols["text"][i] for i in keep]
        if "score" in table.column_names:
            scores = table.column("score").to_pylist()
            texts = [[(t, scores[i])] if scores[i] is not None else t
                     for t, i in zip(texts, keep, strict=True)]
        entry = {"start": [cols["start"][i] for i in keep],
                 "end": [cols["end"][i] for i in keep], "text": texts}
        return rows_frame(tidy_rows(entry_rows(self.shown_as, video_id, entry)))

    def stats(self) -> dict[str, int]:
        return {"groups_read": self.groups_read, "max_cached_groups": self.max_cached_groups,
                "max_buffered_rows": self.max_buffered_rows}


def _order_if_distinct(ids: pa.ChunkedArray) -> np.ndarray | None:
    """The ids' sorted order (int32 a video, kept for ``ParquetStore._search``), or None
    when an id comes twice: the ids sorted, each compared with the next (a hash table of
    HowTo100M's 1.2M ids, as ``pc.unique`` builds, takes ~200 MB)."""
    order = pc.sort_indices(ids)
    step = 1 << 16  # compared a piece at a time: no sorted copy of them all
    for a in range(0, len(ids) - 1, step):
        got = ids.take(order.slice(a, step + 1))
        if pc.any(pc.equal(got.slice(1), got.slice(0, len(got) - 1))).as_py():
            return None
    return order.to_numpy().astype(np.int32)


def is_converted(path: Path) -> bool:
    """A Parquet file written by ``DumpWriter`` (readable, with our format mark)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - a torn or foreign file is simply not ours
        return False
    return FORMAT_KEY in meta
