"""Status records and the per-stage index of each video's newest one.

A stage's manifests (``parts/batches/<stage>/<batch>.parquet``, one status row per video of a
batch) are read here: whole (``_read_manifest``), or a few columns of many at once as Arrow
(``read_manifests``, ``last_per_key``: what ``RunDir.newest`` folds). ``StageIndex`` keeps
every video's newest row of one stage as columns, from its manifests and an older run's
per-video status JSONs. It knows no layout: the run directory hands it its folders.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from howtocap.atomic import CorruptFile, disk_full_as


@dataclass(frozen=True)
class StatusRecord:
    video_id: str
    stage: str
    status: str  # "ok" | "error"
    message: str = ""
    seconds: float = 0.0
    finished_at: float = 0.0
    warnings: int = 0
    cause: str = ""  # of an error: bad input | model output | service | internal
    attempts: int = 1  # times this stage ran on this video (counted across runs)
    config_id: str = ""  # fingerprint of the settings that made it ("" = before fingerprints)
    metrics: dict[str, float] = field(default_factory=dict)  # for throughput (`status`)
    batch: str = ""  # the batch whose manifest holds it ("": a per-video record, older runs)

BATCH_PREFIX = "batch-"
FORGOTTEN = "forgotten"  # a manifest row that takes a video's result back (``forget``)
MANIFEST_META = b"howtocap_batch"
BATCH_RE = re.compile(r"^batch-\d+-(.*)~(\d+)$")
RECORD_COLS = [f.name for f in fields(StatusRecord) if f.name not in ("batch",)]
# what a stage's index keeps per video (resume, claims, reads); ``status`` reads the rest
INDEX_COLS = ["video_id", "status", "config_id", "cause", "attempts"]
_KIND = ("status", "config_id", "cause", "attempts")  # a few combinations: one int16 code
_NUMERIC_DTYPES = {"seconds": "float64", "finished_at": "float64", "warnings": "int64",
                   "attempts": "int64"}
ID_CACHE_ROWS = 131_072  # ids of the sources read last kept decoded (hits checked on them)
SPILL_ROWS = 131_072  # rows of a stage index kept in memory; older ones are sorted files
FENCE = 1_024  # every FENCE-th hash of a spilled run stays in memory: a lookup reads a block
_SPILL_TYPES = (np.uint32, np.int64, np.int16)  # a spilled run's columns: hash, at, kind


def _records_frame(records: Sequence[StatusRecord]) -> pd.DataFrame:
    """A manifest's rows, column-wise (``metrics`` as JSON text)."""
    now = time.time()
    cols: dict[str, list[Any]] = {c: [] for c in RECORD_COLS}
    for r in records:
        for c in RECORD_COLS:
            v = getattr(r, c)
            cols[c].append(json.dumps(v) if c == "metrics" else
                           (v or now) if c == "finished_at" else v)
    df = pd.DataFrame(cols)
    return df.astype(_NUMERIC_DTYPES)


@functools.cache
def _record_types() -> dict[str, Any]:
    """The Arrow type of each status record column (pyarrow imported on first use)."""
    import pyarrow as pa

    return {"status": pa.string(), "message": pa.string(), "seconds": pa.float64(),
            "finished_at": pa.float64(), "warnings": pa.int64(), "cause": pa.string(),
            "attempts": pa.int64(), "config_id": pa.string(), "metrics": pa.string(),
            "stage": pa.string(), "video_id": pa.string()}


_DICT_COLS = ("status", "cause", "config_id", "message", "stage")
MANIFEST_THREADS = 4  # manifests read at once (Arrow decodes outside the GIL)


def with_defaults(table: Any, cols: Sequence[str]) -> Any:
    """``table`` with exactly ``cols``, a missing record column filled with its default;
    the few-valued text columns (``_DICT_COLS``) dictionary-encoded (a few bytes a row)."""
    import pyarrow as pa

    out = {}
    for c in cols:
        kind = _record_types().get(c, pa.string())
        if c in table.column_names:
            col = table.column(c)
        else:
            col = pa.array([DEFAULT_RECORD.get(c, "")] * table.num_rows, kind)
        if c in _DICT_COLS:
            if not pa.types.is_dictionary(col.type):
                col = col.cast(kind).dictionary_encode()
        elif col.type != kind:
            col = col.cast(kind)
        out[c] = col
    return pa.table(out)


def read_manifests(paths: Sequence[Path], cols: Sequence[str]) -> list[Any]:
    """Only ``cols`` of each manifest (page checksums verified), a few files at a time on
    threads: per path an Arrow table, None (gone) or the ``CorruptFile`` it raised."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq

    def one(path: Path) -> Any:
        try:
            pf = pq.ParquetFile(path, page_checksum_verification=True,
                                read_dictionary=[c for c in cols if c in _DICT_COLS])
            have = set(pf.schema_arrow.names)
            return with_defaults(pf.read(columns=[c for c in cols if c in have],
                                         use_threads=False), cols)
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError) as exc:
            return _corrupt_manifest(path, exc)

    if len(paths) < 8:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(MANIFEST_THREADS) as pool:
        return list(pool.map(one, paths))


def read_manifest_table(path: Path, cols: Sequence[str]) -> Any:
    """One manifest's ``cols`` (as ``read_manifests``): an Arrow table, None (gone) or
    the ``CorruptFile`` it raised."""
    return read_manifests([path], cols)[0]


def plain_record_table(table: Any, cols: Sequence[str]) -> Any:
    """``table`` with exactly ``cols`` in their record types, text columns plain strings
    (not dictionaries: chunks of many files concatenate and sort as one)."""
    import pyarrow as pa

    t = with_defaults(table, cols)
    return pa.table({c: t.column(c).cast(_record_types().get(c, pa.string()))
                     for c in cols})


def last_per_key(keys: Any) -> Any:
    """Row positions of the last occurrence of each key (rows in commit order: the newest
    record of each video), in row order. A stable sort of the keys (Arrow) and a look at
    neighbours (numpy): no hash table of every id, no Python object per row."""
    import pyarrow.compute as pc

    if not len(keys):
        return np.zeros(0, np.int64)
    if hasattr(keys, "combine_chunks"):  # one array sorts in ~15% less CPU than its 2,400
        keys = keys.combine_chunks()  # manifests' chunks (Arrow's hash grouping: ~50%
        # less, but +150 MB at 1.2M videos)
    order = pc.sort_indices(keys)  # stable: equal ids keep their commit order
    ranked = keys.take(order)
    differs = pc.not_equal(ranked.slice(1), ranked.slice(0, len(ranked) - 1))
    last = order.to_numpy()[np.append(differs.to_numpy(zero_copy_only=False), True)]
    last.sort()
    return last


def manifest_names(folder: Path) -> list[str]:
    """A stage's batch manifests (file names) in commit order: sorted, as batch ids sort by
    time (none when the stage has no folder yet)."""
    try:
        return sorted(n for n in os.listdir(folder)
                      if n.startswith(BATCH_PREFIX) and n.endswith(".parquet"))
    except FileNotFoundError:
        return []


class RunDirLike(Protocol):
    """What the index asks of the run directory (``RunDir``): where a stage's manifests and
    per-video records are, and how a corrupt file is dropped."""

    @property
    def status_dir(self) -> Path: ...

    def batch_dir(self, stage: str) -> Path: ...

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None: ...

    def spill_dir(self) -> Path: ...


def _equal_rows(keys: Any, h: Any) -> tuple[Any, Any]:
    """(query, row) of every row of sorted ``keys`` equal to one of the queries ``h``."""
    h = h.astype(keys.dtype, copy=False)  # a wider type would convert all the keys
    lo = np.searchsorted(keys, h, "left")
    n = np.searchsorted(keys, h, "right") - lo
    q = np.repeat(np.arange(len(h)), n)
    return q, np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(len(q))


class _SpilledRows:
    """Rows of a stage index moved to a file, sorted by hash: the hashes, where each row
    was read and its kind, one column after the other. Every ``FENCE``-th hash stays in
    memory, so a few lookups read a block each; a window's lookups read the file once."""

    def __init__(self, path: Path, h: Any, at: Any, kind: Any) -> None:
        self.path, self.n = path, len(h)
        with open(path, "wb") as f:  # f.write, not ndarray.tofile: that one loses ENOSPC
            for a, t in zip((h, at, kind), _SPILL_TYPES, strict=True):
                f.write(np.ascontiguousarray(a, dtype=t).data)
        self.fence = h[::FENCE].copy()

    def read(self, col: int, lo: int = 0, hi: int | None = None) -> Any:
        """Rows ``lo`` to ``hi`` of column ``col`` (0 hash, 1 at, 2 kind)."""
        hi = self.n if hi is None else hi
        base = sum(self.n * np.dtype(t).itemsize for t in _SPILL_TYPES[:col])
        t = np.dtype(_SPILL_TYPES[col])
        return np.fromfile(self.path, dtype=t, count=hi - lo, offset=base + lo * t.itemsize)

    def equal(self, h: Any) -> tuple[Any, Any, Any]:
        """(query, at, kind) of the rows whose hash equals one of ``h``."""
        if len(h) * 2 * FENCE >= self.n:  # many queries: each column read once
            q, rows = _equal_rows(self.read(0), h)
            if not len(q):
                return q, np.zeros(0, np.int64), np.zeros(0, np.int16)
            lo, hi = int(rows.min()), int(rows.max()) + 1
            return q, self.read(1, lo, hi)[rows - lo], self.read(2, lo, hi)[rows - lo]
        h = h.astype(np.uint32, copy=False)  # a few: the block each could be in
        a = np.maximum(np.searchsorted(self.fence, h, "left") - 1, 0) * FENCE
        b = np.minimum(np.searchsorted(self.fence, h, "right") * FENCE, self.n)
        parts = [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16))]
        for i in np.flatnonzero(a < b).tolist():
            _, rows = _equal_rows(self.read(0, int(a[i]), int(b[i])), h[i:i + 1])
            if len(rows):
                lo, hi = int(a[i] + rows[0]), int(a[i] + rows[-1]) + 1
                parts.append((np.full(hi - lo, i, np.int64), self.read(1, lo, hi),
                              self.read(2, lo, hi)))
        q, at, kind = (np.concatenate(c) for c in zip(*parts, strict=True))
        return q, at, kind


class StageIndex:
    """Every video's newest status row of one stage, from its manifests (read once each, new
    ones on ``refresh``) and an older run's per-video JSONs, kept as numpy columns sorted by
    a 32-bit hash of the id: the hash, where the row was read (``_at``: its number among every
    row read, source by source) and its kind (one code for status, config_id, cause and
    attempts: a run has a few such combinations): 10 bytes a video, no id (a Python or Arrow
    string each was ~45 bytes more a video and stage, what grew with the run). Every hash hit
    is checked by reading the id back from its manifest (the last sources' ids kept decoded:
    a window's lookups read each once), as ``SubtitleSource`` checks its file; ids of equal
    hash (~170 pairs at 1.2M videos) are told apart the same way.

    Only the newest ``SPILL_ROWS`` rows stay in memory: older ones are written, sorted, to
    files of this process (``spill_dir``), removed with the index. A video's rows may then
    be in several of them; a lookup takes the newest of its hits, as the fold does. What a
    run holds is then a window's, whatever the number of videos (at 10 bytes a video and
    stage, the index was what grew with a run)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.seen: set[str] = set()
        self.legacy: pd.DataFrame | None = None
        self.legacy_stamp: tuple[int, int] | None = None
        self.writes: list[str] = []
        self.newest = 0  # the newest batch's time (ns): new batch ids sort after it
        self.batches: set[str] = set()
        self.stamp: tuple[int, int] = (-1, -1)  # the folders' mtimes when last read
        self.log: list[str] = []  # per manifest read, in order: its batch ("" if our own)
        self.folder: Path | None = None  # the manifests' folder (ids are read back from it)
        self.names: list[str] = []  # per source read: its batch ("": per-video records)
        self.starts: list[int] = [0]  # per source: the number of its first row (then the end)
        self._legacy_src = -1  # the source holding ``legacy`` (-1: none)
        self._pending: list[tuple[Any, ...]] = []  # rows read, not yet folded in
        self._kinds: dict[tuple[Any, ...], int] = {}  # (status, config_id, ...) -> code
        self._kind_cols: dict[str, Any] = {c: np.zeros(0, object) for c in _KIND}  # by code
        self._h: Any = np.zeros(0, np.uint32)  # id hashes, sorted
        self._at: Any = np.zeros(0, np.int32)  # where each row was read
        self._kind: Any = np.zeros(0, np.int16)
        self._ids: OrderedDict[int, Any] = OrderedDict()  # source -> its ids, recently used
        self._id_rows = 0  # ids held in ``_ids``
        self._legacy_by_id: pd.DataFrame | None = None
        self._runs: list[_SpilledRows] = []  # rows moved to files, oldest first
        self._spill_root: Path | None = None  # where they go (none: kept in memory)
        self._spill_at: Path | None = None
        self._dead: set[int] = set()  # sources taken back (an older legacy read)

    def close(self) -> None:
        """Remove the spilled files (the index is read again when next needed)."""
        if self._spill_at is not None:
            import shutil

            shutil.rmtree(self._spill_at, ignore_errors=True)
        self._runs, self._spill_at = [], None

    def refresh(self, rd: RunDirLike) -> None:
        root = self._spill_root = rd.spill_dir()
        folder = self.folder = rd.batch_dir(self.stage)
        names = manifest_names(folder)
        if not self.seen <= set(names):  # manifests went (--redo elsewhere): read anew
            stamp = self.stamp
            self.close()
            self.__init__(self.stage)  # type: ignore[misc]
            self.stamp, self.folder, self._spill_root = stamp, folder, root
        for name in names:
            if name in self.seen:
                continue
            path = folder / name
            try:
                df, meta = _read_manifest(path)
            except FileNotFoundError:
                continue
            except CorruptFile as exc:
                rd.drop_corrupt(path, exc)  # its videos are redone
                continue
            self.add(path.stem, df, meta.get("writes", []))
        self._refresh_legacy(rd)

    def add(self, batch: str, df: pd.DataFrame, writes: list[str], own: bool = False) -> None:
        """Fold in a manifest read (or, ``own``, just committed by this process: not logged
        for ``finished_since``, whose callers never claim their own results again). The log
        names the batch, not its videos: ``finished_since`` reads them again when asked (a
        list of every id read is ~25 MB a stage at 1.2M videos)."""
        self.seen.add(f"{batch}.parquet")
        self._add_rows(batch, df)
        self.log.append("" if own else batch)
        if writes and batch >= max(self.batches, default=""):
            self.writes = list(writes)
        self.batches.add(batch)
        m = BATCH_RE.match(batch)
        if m:
            self.newest = max(self.newest, int(batch.split("-")[1]))

    def _add_rows(self, name: str, df: pd.DataFrame) -> int:
        """Queue ``df``'s rows (a manifest, or the per-video records: ``name`` "") as a new
        source, its ids kept decoded for now (the next lookups are likely of them)."""
        import pyarrow as pa

        k, n = len(self.names), len(df)
        self.names.append(name)
        lo = self.starts[-1]
        self.starts.append(lo + n)
        ids = df["video_id"].astype(object).to_numpy()
        at = np.arange(lo, lo + n, dtype=np.int32 if lo + n < 2**31 else np.int64)
        self._pending.append((short_hashes(ids), at, self._encode(df)))
        self._keep_ids(k, pa.array(ids, pa.string()))
        return k

    def _encode(self, df: pd.DataFrame) -> Any:
        """Each row's kind: the int16 code of its (status, config_id, cause, attempts), from
        the columns factorized one at a time (no tuple per row)."""
        key = np.zeros(len(df), dtype=np.int64)
        columns = []
        for c in _KIND:
            codes, uniques = pd.factorize(df[c], use_na_sentinel=False)
            key = key * (len(uniques) + 1) + codes  # < 1001**4 for a batch of 1,000
            columns.append((codes, np.asarray(uniques, dtype=object)))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        lut = np.zeros(max(len(first), 1), dtype=np.int16)
        for j, row in enumerate(first.tolist()):
            status, cid, cause, tries = (u[codes[row]] for codes, u in columns)
            kind = (_text(status), _text(cid), _text(cause),
                    1 if pd.isna(tries) else int(tries))
            code = self._kinds.get(kind)
            if code is None:
                if len(self._kinds) >= 2**15 - 1:
                    raise ValueError(f"{self.stage}: more than 32,767 kinds of record")
                code = self._kinds[kind] = len(self._kinds)
                self._kind_cols = {c: np.array([k[i] for k in self._kinds], dtype=object)
                                   for i, c in enumerate(_KIND)}
            lut[j] = code
        return lut[inverse.ravel()]

    def _keep_ids(self, k: int, ids: Any) -> None:
        self._ids[k] = ids
        self._ids.move_to_end(k)
        self._id_rows += len(ids)
        while self._id_rows > ID_CACHE_ROWS and len(self._ids) > 1:
            _, old = self._ids.popitem(last=False)
            self._id_rows -= len(old)

    def _source_ids(self, k: int) -> Any:
        """Source ``k``'s ids (Arrow strings, in its rows' order), or None (gone, corrupt)."""
        ids = self._ids.get(k)
        if ids is not None:
            self._ids.move_to_end(k)
            return ids
        if k == self._legacy_src and self.legacy is not None:
            import pyarrow as pa

            ids = pa.array(self.legacy["video_id"].astype(object).to_numpy(), pa.string())
        elif self.names[k] and self.folder is not None:
            t = read_manifest_table(self.folder / f"{self.names[k]}.parquet", ["video_id"])
            if t is None or isinstance(t, CorruptFile) or \
                    t.num_rows != self.starts[k + 1] - self.starts[k]:
                return None  # taken away since (its records are no more)
            ids = t.column("video_id").combine_chunks()
        else:
            return None
        self._keep_ids(k, ids)
        return ids

    def _sources_of(self, at: Any) -> Any:
        return np.searchsorted(np.asarray(self.starts), at, "right") - 1

    def ids_at(self, at: Any) -> list[str | None]:
        """The id of each row read (``_at`` values), read back from its source (None where
        that source is gone)."""
        import pyarrow as pa

        at = np.asarray(at, dtype=np.int64)
        out: list[str | None] = [None] * len(at)
        src = self._sources_of(at)
        for k in np.unique(src).tolist():
            sel = np.flatnonzero(src == k)
            ids = self._source_ids(k)
            if ids is not None:
                got = ids.take(pa.array(at[sel] - self.starts[k])).to_pylist()
                for i, v in zip(sel.tolist(), got, strict=True):
                    out[i] = v
        return out

    def _refresh_legacy(self, rd: RunDirLike) -> None:
        folder = rd.status_dir / self.stage
        try:
            st = folder.stat()
            stamp = (st.st_mtime_ns, st.st_nlink)
        except FileNotFoundError:
            stamp = None
        if stamp == self.legacy_stamp:
            return
        self.legacy_stamp = stamp
        rows = []
        for path in sorted(folder.glob("*.json")) if stamp is not None else []:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a torn or foreign file: not done
            if isinstance(data, dict) and "video_id" in data:
                rows.append({c: data.get(c, DEFAULT_RECORD.get(c)) for c in RECORD_COLS})
        self.legacy = _normalise(pd.DataFrame(rows, columns=RECORD_COLS)).assign(batch="") \
            if rows else None
        self._legacy_by_id = None
        self._fold()
        if self._legacy_src >= 0:  # the records read before leave (the new ones replace them)
            gone = self._sources_of(self._at) == self._legacy_src
            self._keep(~gone)
            self._dead.add(self._legacy_src)  # its spilled rows: skipped
            self._id_rows -= len(self._ids.pop(self._legacy_src, ()))
            self._legacy_src = -1
        if self.legacy is not None:
            self._legacy_src = self._add_rows("", self.legacy)

    def legacy_row(self, video_id: str) -> dict[str, Any]:
        """An older run's per-video record of ``video_id`` (every column), or {}."""
        if self.legacy is None:
            return {}
        if self._legacy_by_id is None:
            self._legacy_by_id = self.legacy.drop_duplicates("video_id", keep="last") \
                .set_index("video_id")
        if video_id not in self._legacy_by_id.index:
            return {}
        return {c: _plain(v) for c, v in self._legacy_by_id.loc[video_id].items()}

    def _columns(self) -> list[Any]:
        return [self._h, self._at, self._kind]

    def _set_columns(self, cols: Sequence[Any]) -> None:
        self._h, self._at, self._kind = cols

    def _keep(self, mask: Any) -> None:
        if not mask.all():
            self._set_columns([a[mask] for a in self._columns()])

    def _fold(self) -> None:
        """Merge the rows read since into the sorted columns, the newest row of each video
        winning (the greatest batch id, then the last row): the new rows are sorted and
        inserted (one copy of the columns), and only rows of equal hash compared, by their
        ids read back."""
        if not self._pending:
            return
        new = [np.concatenate(p) for p in zip(*self._pending, strict=True)]
        self._pending = []
        order = np.argsort(new[0], kind="stable")
        new = [a[order] for a in new]
        del order
        cols = self._columns()
        had_rows = len(cols[0]) > 0
        ins = np.zeros(0, np.int64)
        if had_rows:
            ins = np.searchsorted(cols[0], new[0], "right") + np.arange(len(new[0]))
            from_old = np.ones(len(cols[0]) + len(new[0]), dtype=bool)
            from_old[ins] = False
            for i in range(len(cols)):  # a column at a time, its old copy freed at once:
                a, b = cols[i], new[i]  # the fold's peak is one column's, not the index's
                out = np.empty(len(from_old), dtype=np.result_type(a, b))
                out[ins], out[from_old] = b, a
                cols[i] = out
                del a, b, out
                new[i] = None
                self._set_columns(cols)
            del from_old
        else:
            self._set_columns(new)
        del cols, new
        h = self._h
        same = np.flatnonzero(h[1:] == h[:-1])
        if len(same):  # only hashes a new row has: the others were told apart before
            fresh = np.unique(self._h[ins]) if had_rows else np.unique(h)
            same = same[np.isin(h[same], fresh)]
        if len(same):
            keep = np.ones(len(h), dtype=bool)
            pos = np.unique(np.concatenate([same, same + 1]))
            keep[self._superseded(self._h, self._at, pos)] = False
            self._keep(keep)
        if len(self._h) >= SPILL_ROWS and self._spill_root is not None:
            self._spill()

    def _spill(self) -> None:
        """The rows in memory to a sorted file of their own."""
        if self._spill_at is None:
            import shutil
            import tempfile
            import weakref

            with disk_full_as(self._spill_root):  # type: ignore[arg-type]
                self._spill_root.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
                self._spill_at = Path(tempfile.mkdtemp(
                    prefix=re.sub(r"\W", "_", self.stage) + "-", dir=self._spill_root))
            # gone with the index, or at exit (a killed run's: by the next process)
            weakref.finalize(self, shutil.rmtree, self._spill_at, True)
        path = self._spill_at / f"{len(self._runs):06d}.rows"
        with disk_full_as(path):
            self._runs.append(_SpilledRows(path, self._h, self._at, self._kind))
        self._set_columns([np.zeros(0, np.uint32), np.zeros(0, self._at.dtype),
                           np.zeros(0, np.int16)])

    def _ranks(self) -> Any:
        """Each source's rank among the batch ids ("" first): the newer batch wins."""
        return np.argsort(np.argsort(np.array(self.names, dtype=object), kind="stable"),
                          kind="stable")

    def _superseded(self, hashes: Any, where: Any, pos: Any) -> Any:
        """Of rows ``pos`` of ``hashes`` and ``where`` (read positions; runs of equal hash),
        those a newer row of the same id replaces: ids read back, sorted by hash, id, batch,
        row; all but the last of each id."""
        import pyarrow as pa
        import pyarrow.compute as pc

        at = where[pos].astype(np.int64)
        src = self._sources_of(at)
        ids = [v if v is not None else f"\0gone{p}"  # unreadable: its own id
               for v, p in zip(self.ids_at(at), pos.tolist(), strict=True)]
        t = pa.table({"h": hashes[pos].astype(np.int64), "id": pa.array(ids, pa.string()),
                      "rank": self._ranks()[src], "at": at, "pos": pos})
        t = t.sort_by([("h", "ascending"), ("id", "ascending"), ("rank", "ascending"),
                       ("at", "ascending")])
        n = t.num_rows
        hs, idc = t.column("h").to_numpy(), t.column("id").combine_chunks()
        dup = (hs[1:] == hs[:-1]) & pc.equal(idc.slice(1), idc.slice(0, n - 1)).to_numpy(
            zero_copy_only=False)
        return t.column("pos").to_numpy()[:-1][dup]

    def find(self, video_ids: Sequence[str]) -> tuple[Any, Any]:
        """Each video's newest row: where it was read (``_at``; -1: none, or forgotten) and
        its kind. A binary search over the sorted hashes in memory and in each spilled
        file, every hit checked against the id read back from its manifest, the newest hit
        of a video winning: no hash table of every id, no id kept (a run asks for a window
        of videos at a time, its index holds a million)."""
        self._fold()
        want = list(video_ids)
        at_out = np.full(len(want), -1, dtype=np.int64)
        kind_out = np.zeros(len(want), dtype=np.int16)
        if not want or not (len(self._h) or self._runs):
            return at_out, kind_out
        h = short_hashes(want)
        q, rows = _equal_rows(self._h, h)
        parts = [(q, self._at[rows].astype(np.int64), self._kind[rows])]
        parts += [r.equal(h) for r in self._runs]
        q, at, kind = (np.concatenate(c) for c in zip(*parts, strict=True))
        if not len(q):
            return at_out, kind_out
        # a taken-back source (``_dead``) reads back no id: its rows never match
        same = np.fromiter((v == want[i] for v, i in zip(self.ids_at(at), q.tolist(),
                                                           strict=True)), bool, len(q))
        q, at, kind = q[same], at[same], kind[same]
        if len(np.unique(q)) < len(q):  # a video in memory and in a file: the newest wins
            order = np.lexsort((at, self._ranks()[self._sources_of(at)], q))
            q, at, kind = q[order], at[order], kind[order]
            last = np.append(q[1:] != q[:-1], True)
            q, at, kind = q[last], at[last], kind[last]
        live = ~self._forgotten()[kind]
        at_out[q[live]], kind_out[q[live]] = at[live], kind[live]
        return at_out, kind_out

    def _forgotten(self) -> Any:
        """Per kind: whether it takes the video's result back (``forget``)."""
        return self._kind_cols["status"] == FORGOTTEN

    def values(self, at: Any, kind: Any, columns: Sequence[str]) -> dict[str, Any]:
        """``columns`` (``INDEX_COLS`` but video_id, and ``batch``) of the rows ``find``
        gave as object arrays (None where ``at`` is -1)."""
        at = np.asarray(at, dtype=np.int64)
        found = at >= 0
        out: dict[str, Any] = {}
        for c in columns:
            col = np.full(len(at), None, dtype=object)
            if c in _KIND:
                vals = self._kind_cols[c][np.asarray(kind)[found]]
            elif c == "batch":
                vals = np.array(self.names, dtype=object)[self._sources_of(at[found])]
            else:
                raise KeyError(f"the index keeps no {c!r}")
            col[found] = vals
            out[c] = col
        return out

    def lookup(self, video_id: str) -> dict[str, Any] | None:
        """The video's row of the index (``INDEX_COLS`` but video_id, and ``batch``), or
        None (``find`` of one id: a block of each spilled file read, not the file)."""
        at, kind = self.find([video_id])
        if at[0] < 0:
            return None
        row = {c: _plain(self._kind_cols[c][int(kind[0])]) for c in _KIND}
        return {**row, "batch": self.names[bisect.bisect_right(self.starts, int(at[0])) - 1]}

    def _rows(self) -> tuple[Any, Any, Any]:
        """Every video's newest row (hash, at, kind; forgotten ones too), from memory and
        the spilled files at once: for ``count`` and ``view`` (tests, small runs, a
        refused change of settings), not the run's path."""
        self._fold()
        if not self._runs:
            return self._h, self._at, self._kind
        h, at, kind = (np.concatenate([c, *(r.read(i) for r in self._runs)])
                       for i, c in enumerate(self._columns()))
        keep = ~np.isin(self._sources_of(at), list(self._dead)) if self._dead else \
            np.ones(len(h), dtype=bool)
        order = np.flatnonzero(keep)[np.argsort(h[keep], kind="stable")]
        h, at, kind = h[order], at[order], kind[order]
        same = np.flatnonzero(h[1:] == h[:-1])
        if len(same):
            keep = np.ones(len(h), dtype=bool)
            keep[self._superseded(h, at, np.unique(np.concatenate([same, same + 1])))] = False
            h, at, kind = h[keep], at[keep], kind[keep]
        return h, at, kind

    def count(self) -> int:
        """How many videos have a record (forgotten ones left out)."""
        _, _, kind = self._rows()
        return int(np.count_nonzero(~self._forgotten()[kind])) if len(kind) else 0

    def view(self) -> pd.DataFrame:
        """Every video's newest row (``INDEX_COLS`` and ``batch``; forgotten ones left out),
        index video_id, sorted by hash. Reads every id back: for tests and small runs, not
        the run's path."""
        _, at, kind = self._rows()
        live = ~self._forgotten()[kind] if len(kind) else np.zeros(0, dtype=bool)
        at, kind = at[live], kind[live]
        cols = self.values(at, kind, [*_KIND, "batch"])
        df = pd.DataFrame({c: pd.Categorical(cols[c]) for c in _KIND[:3]})
        df["attempts"] = cols["attempts"].astype(np.int64)
        df["batch"] = pd.Categorical(cols["batch"])
        df.index = pd.Index(self.ids_at(at), name="video_id", dtype=object)
        return df


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def id_hashes(ids: Sequence[str]) -> Any:
    """64-bit hashes of ``ids`` (Python's string hash: the same within this process only, so
    never written down; a hit is always checked against the id itself)."""
    return np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))


def short_hashes(ids: Any) -> Any:
    """32-bit ``id_hashes`` (a hit is checked against the id read back, so a short hash only
    costs a few more reads)."""
    return (id_hashes(ids) & 0xFFFFFFFF).astype(np.uint32)


DEFAULT_RECORD: dict[str, Any] = {"message": "", "seconds": 0.0, "finished_at": 0.0,
                                  "warnings": 0, "cause": "", "attempts": 1, "config_id": "",
                                  "metrics": "{}"}



def _record(video_id: str, row: dict[str, Any]) -> StatusRecord:
    known = {f.name for f in fields(StatusRecord)} - {"video_id"}
    values = {k: v for k, v in row.items() if k in known}
    values["metrics"] = json.loads(values.get("metrics") or "{}")
    return StatusRecord(video_id=video_id, **values)


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Status rows of any age with every record column (older records lack some)."""
    for c, d in DEFAULT_RECORD.items():
        if c not in df.columns:
            df[c] = d
        else:
            df[c] = df[c].where(df[c].notna(), d) if df[c].isna().any() else df[c]
    df["metrics"] = [m if isinstance(m, str) else json.dumps(m or {}) for m in df["metrics"]]
    return df.astype(_NUMERIC_DTYPES)


def _corrupt_manifest(path: Path, exc: BaseException) -> CorruptFile:
    return CorruptFile(f"{path}: corrupt or truncated manifest "
                       f"({' '.join(str(exc).split())[:80]})")


def _read_manifest(path: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path, page_checksum_verification=True)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise _corrupt_manifest(path, exc) from None
    meta = json.loads((t.schema.metadata or {}).get(MANIFEST_META, b"{}"))
    return _normalise(t.to_pandas()), meta
