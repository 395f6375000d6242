"""Status records and the per-stage index of each video's newest one.

A stage's manifests (``parts/batches/<stage>/<batch>.parquet``, one status row per video of a
batch) are read here: whole (``_read_manifest``), or a few columns of many at once as Arrow
(``read_manifests``, ``last_per_key``: what ``RunDir.newest`` folds). ``StageIndex`` keeps
every video's newest row of one stage as columns, from its manifests and an older run's
per-video status JSONs. It knows no layout: the run directory hands it its folders.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from howtocap.atomic import CorruptFile


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
_LOW_CARDINALITY = ("status", "config_id", "cause", "batch")
_NUMERIC_DTYPES = {"seconds": "float64", "finished_at": "float64", "warnings": "int64",
                   "attempts": "int64"}
HASH_CHUNK = 65_536  # ids made Python strings at a time to hash them


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


def _with_defaults(table: Any, cols: Sequence[str]) -> Any:
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
            return _with_defaults(pf.read(columns=[c for c in cols if c in have],
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

    t = _with_defaults(table, cols)
    return pa.table({c: t.column(c).cast(_record_types().get(c, pa.string()))
                     for c in cols})


def last_per_key(keys: Any) -> Any:
    """Row positions of the last occurrence of each key (rows in commit order: the newest
    record of each video), in row order. A stable sort of the keys (Arrow) and a look at
    neighbours (numpy): no hash table of every id, no Python object per row."""
    import pyarrow.compute as pc

    if not len(keys):
        return np.zeros(0, np.int64)
    order = pc.sort_indices(keys)  # stable: equal ids keep their commit order
    ranked = keys.take(order)
    if hasattr(ranked, "combine_chunks"):
        ranked = ranked.combine_chunks()
    differs = pc.not_equal(ranked.slice(1), ranked.slice(0, len(ranked) - 1))
    last = order.to_numpy()[np.append(differs.to_numpy(zero_copy_only=False), True)]
    last.sort()
    return last


class RunDirLike(Protocol):
    """What the index asks of the run directory (``RunDir``): where a stage's manifests and
    per-video records are, and how a corrupt file is dropped."""

    @property
    def status_dir(self) -> Path: ...

    def batch_dir(self, stage: str) -> Path: ...

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None: ...


class StageIndex:
    """Every video's newest status row of one stage, as columns (index: video_id), from its
    manifests (read once each, new ones on ``refresh``) and an older run's per-video JSONs."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.seen: set[str] = set()
        self.batched: list[pd.DataFrame] = []  # manifests read, not yet folded in
        self.folded: pd.DataFrame | None = None  # newest batched row per video
        self.legacy: pd.DataFrame | None = None
        self.legacy_stamp: tuple[int, int] | None = None
        self.writes: list[str] = []
        self.newest = 0  # the newest batch's time (ns): new batch ids sort after it
        self.batches: set[str] = set()
        self.stamp: tuple[int, int] = (-1, -1)  # the folders' mtimes when last read
        self.log: list[str] = []  # per manifest read, in order: its batch ("" if our own)
        self._view: pd.DataFrame | None = None
        self._pos: tuple[Any, Any] | None = None  # id hashes sorted, their rows
        self._cols: dict[str, tuple[Any, Any]] = {}  # per column: values (or codes), categories
        self._legacy_by_id: pd.DataFrame | None = None

    def refresh(self, rd: RunDirLike) -> None:
        folder = rd.batch_dir(self.stage)
        try:
            names = sorted(n for n in os.listdir(folder)
                           if n.startswith(BATCH_PREFIX) and n.endswith(".parquet"))
        except FileNotFoundError:
            names = []
        if not self.seen <= set(names):  # manifests went (--redo elsewhere): read anew
            stamp = self.stamp
            self.__init__(self.stage)  # type: ignore[misc]
            self.stamp = stamp
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
        self.batched.append(df[INDEX_COLS].assign(batch=batch))
        self.log.append("" if own else batch)
        if writes and batch >= max(self.batches, default=""):
            self.writes = list(writes)
        self.batches.add(batch)
        m = BATCH_RE.match(batch)
        if m:
            self.newest = max(self.newest, int(batch.split("-")[1]))
        self._view = self._pos = None

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
        self._view = self._pos = self._legacy_by_id = None

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

    def view(self) -> pd.DataFrame:
        """Every video's newest row (``INDEX_COLS`` and ``batch``; forgotten ones left out),
        index video_id; the few-valued columns are categories (a byte a video)."""
        if self._view is None:
            if self.batched:
                self.folded = _fold(self.folded, self.batched)
                self.batched = []
            legacy = None if self.legacy is None else self.legacy[[*INDEX_COLS, "batch"]]
            frames = [f for f in (legacy, self.folded) if f is not None]
            if not frames:
                df = pd.DataFrame({c: pd.Series(dtype=object) for c in [*INDEX_COLS, "batch"]})
            elif len(frames) == 1:
                df = frames[0]
            else:
                df = pd.concat([_plain_columns(f) for f in frames], ignore_index=True)
                df = df.drop_duplicates("video_id", keep="last")
            live = (df["status"] != FORGOTTEN).to_numpy()
            df = _categories(df if live.all() else df[live])  # no copy when none forgotten
            self._view = df.set_index("video_id", drop=True)
        return self._view

    def _positions_index(self) -> tuple[Any, Any, Any]:
        """The view's ids' 64-bit hashes sorted, their rows, and the ids (built once per
        change of the index)."""
        view = self.view()
        if self._pos is None:
            hashes = np.empty(len(view), dtype=np.int64)
            for lo in range(0, len(view), HASH_CHUNK):  # Python strings a chunk at a time
                ids = view.index[lo:lo + HASH_CHUNK].to_numpy(dtype=object)
                hashes[lo:lo + len(ids)] = np.fromiter(map(hash, ids), dtype=np.int64,
                                                       count=len(ids))
            order = np.argsort(hashes, kind="stable").astype(np.int32)  # < 2**31 videos
            self._pos = (hashes[order], order)
            self._cols = {c: (view[c].cat.codes.to_numpy(), view[c].cat.categories.to_numpy())
                          if isinstance(view[c].dtype, pd.CategoricalDtype)
                          else (view[c].to_numpy(), None) for c in view.columns}
        return self._pos[0], self._pos[1], view.index

    def positions(self, video_ids: Sequence[str]) -> Any:
        """Each video's row in ``view()`` (-1: none), like ``view().index.get_indexer`` but
        by a binary search over the ids' sorted hashes: no hash table of every id (a
        run asks for a window of videos at a time, its index holds a million)."""
        hashes, order, index = self._positions_index()
        want = np.empty(len(video_ids), dtype=object)
        want[:] = list(video_ids)
        out = np.full(len(want), -1, dtype=np.int64)
        if not len(hashes) or not len(want):
            return out
        h = np.fromiter(map(hash, want), dtype=np.int64, count=len(want))
        at = np.minimum(np.searchsorted(hashes, h, "left"), len(hashes) - 1)
        hit = np.flatnonzero(hashes[at] == h)
        rows = order[at[hit]]
        same = index.take(rows).to_numpy(dtype=object) == want[hit]
        out[hit[same]] = rows[same]
        for i in hit[~same]:  # another id of the same hash first: look through them all
            out[i] = self._walk(int(at[i]), int(h[i]), want[i])
        return out

    def _walk(self, k: int, h: int, video_id: str) -> int:
        """The row of ``video_id`` among the ids of hash ``h`` (sorted hashes from position
        ``k`` on), or -1."""
        hashes, order, index = self._positions_index()
        while k < len(hashes) and hashes[k] == h:
            if index[int(order[k])] == video_id:
                return int(order[k])
            k += 1
        return -1

    def lookup(self, video_id: str) -> dict[str, Any] | None:
        """The video's row of the index (``INDEX_COLS`` and ``batch``), or None. Found by a
        binary search over the ids' 64-bit hashes (16 bytes a video, built once per change of
        the index) rather than a dict of every id (a Python string and a slot each: hundreds
        of MB at 1.2M videos)."""
        hashes = self._positions_index()[0]
        h = hash(video_id)  # Python's: the same in this process, cheap for one string
        i = self._walk(int(np.searchsorted(hashes, h, "left")), h, video_id)
        if i < 0:
            return None
        return {c: _plain(a[i] if cats is None else (cats[a[i]] if a[i] >= 0 else None))
                for c, (a, cats) in self._cols.items()}


def _fold(folded: pd.DataFrame | None, batched: list[pd.DataFrame]) -> pd.DataFrame:
    """The newest row per video of ``folded`` (already one a video) and the manifests read
    since. When those are all newer than every batch folded (a run's own commits: batch ids
    grow), only the few new rows are sorted and deduplicated, and the folded rows they
    supersede dropped: one copy of the million folded rows, categories kept (a pass over
    them all as Python objects, sorted and hashed, is hundreds of MB at 1.2M videos).
    Either way the rows come out as the full fold orders them."""
    new = [_plain_columns(f) for f in batched]
    df = pd.concat(new, ignore_index=True) if len(new) > 1 else new[0]
    df = df.sort_values("batch", kind="stable").drop_duplicates("video_id", keep="last")
    if folded is None or not len(folded):
        return _categories(df)
    cats = folded["batch"].cat.categories if isinstance(folded["batch"].dtype,
                                                        pd.CategoricalDtype) else None
    if cats is None or not len(df) or (len(cats) and df["batch"].min() <= max(cats)):
        parts = [_plain_columns(folded), df]  # an older batch came late: the full fold
        full = pd.concat(parts, ignore_index=True).sort_values("batch", kind="stable")
        return _categories(full.drop_duplicates("video_id", keep="last"))
    stale = folded["video_id"].isin(df["video_id"]).to_numpy()
    kept = folded[~stale] if stale.any() else folded
    df = _categories(df)
    cols: dict[str, Any] = {}
    for c in folded.columns:
        if isinstance(kept[c].dtype, pd.CategoricalDtype):
            cols[c] = union_categoricals([kept[c], df[c]], sort_categories=True)
        else:  # the ids stay Arrow strings (pandas' str), not a Python object each
            cols[c] = pd.concat([kept[c], df[c]], ignore_index=True)
    return pd.DataFrame(cols)


def _plain_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Categories back to values (frames with other categories concatenate as objects)."""
    cats = [c for c in _LOW_CARDINALITY if c in df.columns
            and isinstance(df[c].dtype, pd.CategoricalDtype)]
    return df.astype({c: object for c in cats}) if cats else df


def _categories(df: pd.DataFrame) -> pd.DataFrame:
    return df.astype({c: "category" for c in _LOW_CARDINALITY if c in df.columns})


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
