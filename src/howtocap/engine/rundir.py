"""The run directory (layout and guarantees: docs/runs.md): shard k is videos ``[k*S, (k+1)*S)``
of ``videos.parquet``; a stage writes a Parquet file per table per shard, then the shard's
status file (finished iff it exists), so stage B's shard k reads stage A's and nothing is
merged. An unfinished shard commits chunks (``work/<stage>/shard-k/``): a kill loses only the
videos in flight."""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from howtocap.atomic import (
    CorruptPartWarning,
    JsonFolder,
    atomic_write_parquet,
    atomic_write_text,
    corrupt_parquet,
    fsync_dir,
    writer_tag,
)
from howtocap.engine import claims
from howtocap.engine.records import empty_records, record_columns, records_table, status_writes
from howtocap.engine.stage import SHARD_SIZE
from howtocap.errors import HowtocapError
from howtocap.schemas import SCHEMAS, arrow_schema, conform, empty_table, parquet_dictionary

LAYOUT = 2  # the run directory's layout version (``layout.json``)
OLD_LAYOUT = "0.1.x"  # the howtocap versions that read a run directory with ``parts/``
SHARD_GLOB = "shard-*.parquet"
VIDEO_CHUNK = 65_536  # items ``record_videos`` holds as Python strings at a time
# folders of the run directory that are not tables
NOT_TABLES = frozenset({"status", "work", "claims", "fingerprints", "stats", "config",
                        "logs", "cache", "index"})


class OldLayout(HowtocapError):
    """A run directory written by an earlier version (per-video parts or batches)."""


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.parquet"


def shard_number(path: Path) -> int:
    return int(path.name[len("shard-"):-len(".parquet")])


class RunDir:
    """All reads and writes of one run directory go through here (and ``ShardWriter``)."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True,
                 shard_size: int | None = None) -> None:
        self.root = Path(root)
        self.corrupted: list[Path] = []  # corrupt files found (and removed) while reading
        self._new_size = shard_size  # for a run directory made by this process
        self._index: tuple[int, Any] | None = None  # (videos.parquet mtime, its hash index)
        self._checked: set[tuple[Path, int]] = set()  # shard files verified whole
        # what a stage's results were made with, its totals for `status`, steps' settings
        self.fingerprints = JsonFolder(self.root / "fingerprints")
        self.stats = JsonFolder(self.root / "stats")
        self.configs = JsonFolder(self.root / "config")
        self.error_log = self.root / "logs" / "errors.log"  # unexpected errors' tracebacks
        if (self.root / "parts").is_dir():
            raise OldLayout(f"{self.root}: a run directory of an earlier layout (parts/), "
                            f"written by howtocap {OLD_LAYOUT}; read it with "
                            f"`pip install 'howtocap<0.2'` or write to a new --out")
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    def table_path(self, name: str) -> Path:
        """A one-file table (``videos.parquet``, reduce steps' tables)."""
        return self.root / f"{name}.parquet"

    def shard_path(self, table: str, k: int) -> Path:
        """Shard k's file of a table folder (``status/<stage>`` for a stage's status)."""
        return self.root / table / shard_name(k)

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    # -- shards and videos ---------------------------------------------------------------
    @functools.cached_property
    def shard_size(self) -> int:
        try:
            return int(json.loads((self.root / "layout.json").read_text())["shard_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return self._new_size or SHARD_SIZE

    def shard_count(self) -> int:
        return -(-self.video_count() // self.shard_size)

    def video_count(self) -> int:
        path = self.table_path("videos")
        return pq.read_metadata(path).num_rows if path.exists() else 0

    def shard_videos(self, k: int, columns: Sequence[str] = ("video_id",)) -> Any:
        return pq.ParquetFile(self.table_path("videos")).read_row_group(k, list(columns))

    def shard_of(self, video_ids: Sequence[str]) -> np.ndarray:
        """The shard of each video (-1: not recorded), by the ids' hashes: 16 bytes a
        recorded video, not a Python string each."""
        hashes, order, clash = self._video_index()
        if not len(hashes) or not len(video_ids):
            return np.full(len(video_ids), -1, np.int64)
        if clash is not None:  # two recorded ids share a hash: look the ids up exactly
            nums = pc.index_in(pa.array(list(video_ids), pa.string()), value_set=clash)
            nums = nums.fill_null(-1).to_numpy().astype(np.int64)
        else:
            q = np.fromiter((hash(s) for s in video_ids), np.int64, count=len(video_ids))
            pos = np.minimum(np.searchsorted(hashes, q), len(hashes) - 1)
            nums = np.where(hashes[pos] == q, order[pos], -1)
        return np.where(nums >= 0, nums // self.shard_size, -1)

    def _video_index(self) -> Any:
        """(sorted hashes of the recorded ids, each one's number, the ids when two clash)."""
        path = self.table_path("videos")
        stamp = path.stat().st_mtime_ns if path.exists() else 0
        if self._index is None or self._index[0] != stamp:
            # hashed a batch of ids at a time (1.2M Python strings at once: ~190 MB more)
            f = pq.ParquetFile(path) if stamp else None
            batches = f.iter_batches(VIDEO_CHUNK, columns=["video_id"]) if f else []
            h = np.fromiter((hash(s) for b in batches for s in b.column(0).to_pylist()),
                            np.int64, count=f.metadata.num_rows if f else 0)
            order = np.argsort(h, kind="stable")
            hs = h[order]
            clash = pq.read_table(path, columns=["video_id"]).column(0).combine_chunks() \
                if len(hs) > 1 and (hs[1:] == hs[:-1]).any() else None
            self._index = (stamp, (hs, order, clash))
        return self._index[1]

    def record_videos(self, items: Iterable[Any]) -> int:
        """Number the videos not yet in ``videos.parquet`` (after the others) with their files;
        returns how many the run has. ``items``: video items, or Arrow arrays of ids (1.2M
        ids never become Python objects). A video given twice keeps its first place and its
        last paths; an empty path never erases a recorded one (``align --videos``)."""
        schema = arrow_schema("videos")

        def tables() -> Iterator[Any]:
            rows: list[tuple[str, str, str]] = []
            for it in itertools.chain(items, [None]):
                if isinstance(it, pa.Array | pa.ChunkedArray):
                    empty = pa.repeat(pa.scalar("", pa.string()), len(it))
                    yield pa.table([it.cast(pa.string()), empty, empty], schema=schema)
                elif it is not None:
                    rows.append((it.video_id, str(it.video_path or ""),
                                 str(it.subtitle_path or "")))
                if rows and (it is None or len(rows) >= VIDEO_CHUNK):
                    yield pa.table(list(zip(*rows, strict=True)), schema=schema)
                    rows = []

        path = self.table_path("videos")
        new = pa.concat_tables([schema.empty_table(), *tables()])
        new = new.take(_last_rows(new.column("video_id")))
        old = pq.read_table(path).select(schema.names).cast(schema) if path.exists() \
            else schema.empty_table()
        at = pc.index_in(new.column("video_id"), value_set=old.column("video_id"))
        fresh = new.filter(pc.invert(at.is_valid()))
        upd, pos = new.filter(at.is_valid()), at.drop_null().to_numpy()
        table, changed = old, False
        for c in ("video_path", "subtitle_path"):  # a recorded video given another file
            i = schema.get_field_index(c)
            vals, mine = old.column(c), upd.column(c).to_numpy(zero_copy_only=False)
            give = (mine != "") & (mine != vals.take(pos).to_numpy(zero_copy_only=False))
            if give.any():  # only then the whole column as Python strings (1.2M: ~100 MB)
                full = vals.to_numpy(zero_copy_only=False).copy()
                full[pos[give]] = mine[give]
                table = table.set_column(i, schema.field(i), pa.array(full, pa.string()))
                changed = True
        if not fresh.num_rows and not changed:
            return old.num_rows
        table = pa.concat_tables([table, fresh])
        if not (self.root / "layout.json").exists():
            atomic_write_text(self.root / "layout.json",
                              json.dumps({"layout": LAYOUT, "shard_size": self.shard_size}))
        atomic_write_parquet(table, path, row_group_size=self.shard_size)
        return table.num_rows

    def writer(self, stage: str, k: int, writes: Sequence[str] = ()) -> ShardWriter:
        """The unit of work: ``stage`` on shard ``k`` (its claim, chunks and final files)."""
        return ShardWriter(self, stage, k, tuple(writes))

    # -- reading tables: every reader outside the engine goes through these -------------
    def table_files(self, name: str) -> list[Path]:
        """The table's Parquet files in shard order (for ``pyarrow.dataset`` or DuckDB)."""
        if name == "status":
            return sorted((self.root / "status").glob(f"*/{SHARD_GLOB}"))
        files = sorted((self.root / name).glob(SHARD_GLOB))
        path = self.table_path(name)
        return files or ([path] if path.exists() else [])

    def has_table(self, name: str) -> bool:
        return bool(self.table_files(name))

    def read_shard(self, table: str, k: int) -> Any:
        """Shard k's rows of ``table`` (Arrow); None when it has none or is corrupt."""
        return self._read(self.shard_path(table, k))

    def _read(self, path: Path, columns: Sequence[str] | None = None, threads: bool = True
              ) -> Any:
        """A Parquet file, checksums verified (the ``columns`` it has); None when missing or
        corrupt (then dropped; a corrupt ``videos.parquet`` raises: its numbering is lost)."""
        try:
            with pq.ParquetFile(path, page_checksum_verification=True) as f:  # not read_table:
                names = f.schema_arrow.names  # its set-up costs several times a shard's read
                return f.read(None if columns is None else [c for c in columns if c in names],
                              use_threads=threads)
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError) as exc:
            if path == self.table_path("videos"):
                raise corrupt_parquet(path, exc) from None
            self.drop_corrupt(path, corrupt_parquet(path, exc))
            return None

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The table read whole as a frame (empty, with its columns, when the run has none)."""
        parts = [t for p in self.table_files(name) if (t := self._read(p, columns)) is not None]
        df = pa.concat_tables(parts, promote_options="permissive").to_pandas() if parts \
            else empty_table(name) if name in SCHEMAS else pd.DataFrame()
        return df if columns is None else df[[c for c in columns if c in df.columns]]

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None:
        """Remove a corrupt file so it is recomputed (a table's shard file takes the status
        files of the stages that wrote it)."""
        warnings.warn(f"{exc}; removed, it will be recomputed", CorruptPartWarning,
                      stacklevel=3)
        self.corrupted.append(path)
        if path.name.startswith("shard-") and path.parent.parent == self.root \
                and path.parent.name not in NOT_TABLES:
            for status in (self.root / "status").glob(f"*/{path.name}"):
                if path.parent.name in status_writes(status):
                    status.unlink(missing_ok=True)
        path.unlink(missing_ok=True)  # after the status: a kill between leaves it redone

    def _records(self, path: Path, columns: Sequence[str] | None) -> Any:
        t = self._read(path, record_columns(columns), threads=False)
        return None if t is None else t.replace_schema_metadata()

    # -- status --------------------------------------------------------------------------
    def stages_with_results(self) -> set[str]:
        return {p.name for folder in (self.root / "status", self.root / "work")
                if folder.is_dir() for p in folder.iterdir()
                if p.is_dir() and next(p.iterdir(), None) is not None}

    def records(self, stage: str, columns: Sequence[str] | None = None) -> Iterator[Any]:
        """Every video's newest record of ``stage`` (finished shards and unfinished ones'
        chunks): Arrow tables of ``video_id`` and ``columns``, a shard at a time."""
        finished = {shard_number(p): p for p in (self.root / "status" / stage).glob(SHARD_GLOB)}
        working = {int(p.name[len("shard-"):]) for p in
                   (self.root / "work" / stage).glob("shard-*") if p.is_dir()}
        for k in sorted(finished.keys() | working):  # no chunks: its status file alone
            t = self.writer(stage, k).records(columns) if k in working \
                else self._records(finished[k], columns)
            if t is not None and t.num_rows:
                yield t

    def done(self, stage: str, video_ids: Sequence[str], table: str | None = None
             ) -> list[bool]:
        """Which videos ``stage`` finished (``ok`` in a finished shard whose ``table`` file,
        when named, is whole): what a later stage may read."""
        shards = self.shard_of(list(video_ids))
        out = np.zeros(len(video_ids), dtype=bool)
        for k in np.unique(shards[shards >= 0]).tolist():
            recs = self._records(self.shard_path(f"status/{stage}", k), ["status"])
            if recs is None or (table is not None and not self._whole(table, k)):
                continue
            ok = recs.filter(pc.equal(recs.column("status"), "ok")).column("video_id")
            at = np.flatnonzero(shards == k)
            hit = pc.is_in(pa.array([video_ids[i] for i in at], pa.string()), value_set=ok)
            out[at] = hit.to_numpy(zero_copy_only=False)
        return out.tolist()

    def _whole(self, table: str, k: int) -> bool:
        """Whether shard k's file of ``table`` (if any) reads whole; checked once a process
        per file version, a corrupt one dropped."""
        path = self.shard_path(table, k)
        try:
            key = (path, path.stat().st_mtime_ns)
        except FileNotFoundError:
            return True  # no rows of this table: nothing to check
        if key not in self._checked:
            if self._read(path) is None:
                return False
            self._checked.add(key)
        return True

    def forget(self, stage: str, video_ids: Iterable[str]) -> None:
        """Take these videos' results of ``stage`` back (their shards rewritten): redone."""
        ids = sorted(set(video_ids))
        shards = self.shard_of(ids)
        for k in np.unique(shards[shards >= 0]).tolist():
            w = self.writer(stage, k)
            if not (w.status.exists() or w.work.is_dir()):
                continue  # nothing of the stage on this shard
            w.writes = next(filter(None, (tuple(status_writes(w._status_of(s)))
                                          for s in ["", *w.chunk_ids()])), ())
            while not w.claim():
                time.sleep(0.05)  # another process works on the shard: wait for it
            try:
                w.finish(drop={ids[i] for i in np.flatnonzero(shards == k)})
            finally:
                w.release()

    def invalidate(self, stage: str, tables: Iterable[str]) -> None:
        """Forget a stage's results (``--redo``); the fingerprint last: a kill midway still
        refuses."""
        for path in [self.root / "status" / stage, self.root / "work" / stage,
                     *(self.root / t for t in tables)]:
            if path.is_dir():
                shutil.rmtree(path)
        for path in [*map(self.table_path, tables), self.stats.path(stage),
                     self.fingerprints.path(stage)]:
            path.unlink(missing_ok=True)


class ShardWriter:
    """One stage on one shard: its claim, chunks, and the final files (status last)."""

    def __init__(self, rundir: RunDir, stage: str, k: int, writes: tuple[str, ...]) -> None:
        self.rundir, self.stage, self.k, self.writes = rundir, stage, k, writes
        self.work = rundir.root / "work" / stage / f"shard-{k:05d}"
        self.claim_path = rundir.root / "claims" / stage / f"shard-{k:05d}.lock"
        self.status = rundir.shard_path(f"status/{stage}", k)
        self._chunks = 0

    def claim(self) -> bool:
        return claims.claim(self.claim_path)

    def release(self) -> None:
        claims.release(self.claim_path)

    def chunk_ids(self) -> list[str]:
        """The chunks committed (their status file exists), in commit order."""
        return sorted(p.name[:-len(".status.parquet")]
                      for p in self.work.glob("*.status.parquet"))

    def _status_of(self, source: str) -> Path:  # of the final shard ("") or a chunk
        return self.status if source == "" else self.work / f"{source}.status.parquet"

    def _file(self, source: str, table: str) -> Path:
        return self.rundir.shard_path(table, self.k) if source == "" \
            else self.work / f"{source}.{table}.parquet"

    def _parts(self, columns: Sequence[str] | None) -> list[tuple[str, Any]]:
        """``(source, records)`` of the final status file and each chunk's, in order."""
        return [(s, recs) for s in ["", *self.chunk_ids()]
                if (recs := self.rundir._records(self._status_of(s), columns)) is not None]

    def records(self, columns: Sequence[str] | None = None) -> Any:
        """Each video's newest record of this shard (final, then chunks: the latest wins)."""
        parts = [p for _, p in self._parts(columns)]
        if len(parts) < 2:
            return parts[0] if parts else empty_records(columns)
        t = pa.concat_tables(parts)
        return t.take(_last_rows(t.column("video_id")))

    def commit(self, records: Sequence[Any], tables: dict[str, Any]) -> None:
        """One chunk: a file per table, then its status file (the chunk exists iff it does)."""
        if not self._chunks:  # numbered after the shard's chunks so far (a dead holder's too):
            # commit order is the number's, not a clock's (one stepped back, or another host's)
            self._chunks = max((int(c.split("-")[0]) for c in self.chunk_ids()), default=0)
        self._chunks += 1
        cid = f"{self._chunks:08d}-{time.time_ns():020d}-{os.getpid()}"
        for table, data in tables.items():
            _write_rows(self._file(cid, table), table, data)
        atomic_write_parquet(records_table(records, self.stage, self.writes), self._status_of(cid))

    def finish(self, drop: set[str] | frozenset[str] = frozenset()) -> None:
        """The shard's final files from its earlier ones and its chunks (a video's rows from
        where its newest record is), ``drop`` left out; the status file last."""
        chunks = self.chunk_ids()
        if not drop and len(chunks) == 1 and not self.status.exists() \
                and self._move(chunks[0]):
            return
        parts = self._parts(None)
        if not parts:
            shutil.rmtree(self.work, ignore_errors=True)
            return
        loaded: list[dict[str, Any]] = []  # each source's rows of the tables it has
        for i, (source, recs) in enumerate(parts):  # a corrupt file: its videos are redone
            seen = len(self.rundir.corrupted)
            loaded.append({t: rows for t in self.writes
                           if (rows := self.rundir._read(self._file(source, t))) is not None})
            if len(self.rundir.corrupted) > seen:  # (missing: no rows of that table)
                parts[i] = (source, recs.slice(0, 0))
                self._status_of(source).unlink(missing_ok=True)
        recs = pa.concat_tables([p for _, p in parts])
        src = np.repeat(np.arange(len(parts)), [p.num_rows for _, p in parts])
        keep = _last_rows(recs.column("video_id"))
        if drop:
            gone = pc.is_in(recs.column("video_id").take(keep),
                            value_set=pa.array(sorted(drop), pa.string()))
            keep = keep[~gone.to_numpy(zero_copy_only=False)]
        final, final_src = recs.take(keep), src[keep]
        schema = records_table([], self.stage, self.writes).schema
        records = final.select(schema.names).cast(schema).replace_schema_metadata(
            schema.metadata).sort_by("video_id")
        # ``forget`` of a finished shard only takes rows away: its status goes first, so a
        # kill before the tables are rewritten leaves the dropped videos to redo (the other
        # way round, they would stay done without their rows)
        shrink = bool(drop) and all(source == "" for source, _ in parts)
        if shrink:
            atomic_write_parquet(records, self.status)
        for table in self.writes:
            pieces = []
            for i, rows in enumerate(got.get(table) for got in loaded):
                ids = final.column("video_id").filter(pa.array(final_src == i))
                if rows is None or not len(ids) or not rows.num_rows:
                    continue  # (a file of 0 rows may type its ids as null: nothing to keep)
                if "video_id" in rows.column_names:
                    rows = rows.filter(pc.is_in(rows.column("video_id"), value_set=ids))
                pieces.append(rows)
            out = self.rundir.shard_path(table, self.k)
            if sum(p.num_rows for p in pieces):
                _write_rows(out, table, pa.concat_tables(pieces, promote_options="permissive"))
            else:
                out.unlink(missing_ok=True)
        if not shrink:  # last: the shard is finished
            atomic_write_parquet(records, self.status)
        self._clear_work()

    def _move(self, cid: str) -> bool:
        """A shard done in one chunk: its files hard-linked into place (status last), not
        read and written again; the chunk stays whole, so a kill midway finishes the same
        way. False when a file is not whole or links fail (then the long way)."""
        status = self._status_of(cid)
        try:  # a torn file has no footer
            pq.read_metadata(status)
            rows = {t: pq.read_metadata(p).num_rows for t in self.writes
                    if (p := self._file(cid, t)).exists()}
            for table in self.writes:
                out = self.rundir.shard_path(table, self.k)
                if rows.get(table):
                    _link(self._file(cid, table), out)
                else:
                    out.unlink(missing_ok=True)
            _link(status, self.status)  # last: the shard is finished
        except (OSError, pa.ArrowException):
            return False
        self._clear_work()
        return True

    def _clear_work(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.work.parent.rmdir()
            self.work.parent.parent.rmdir()

def _link(src: Path, dst: Path) -> None:
    """``dst`` becomes a hard link to ``src`` at once (a temp link renamed over it)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{writer_tag()}.link.tmp")
    tmp.unlink(missing_ok=True)
    os.link(src, tmp)
    os.replace(tmp, dst)
    fsync_dir(dst.parent)


def run_starts(ids: Any, order: Any) -> np.ndarray:
    """Where each run of equal ids begins in ``order`` (their sorted order): each sorted id
    compared with the one before, a piece at a time (no sorted copy of every id)."""
    start = np.ones(len(ids), dtype=bool)
    for a in range(0, len(ids) - 1, VIDEO_CHUNK):
        got = ids.take(order.slice(a, VIDEO_CHUNK + 1))
        start[a + 1:a + len(got)] = pc.not_equal(got.slice(1), got.slice(0, len(got) - 1)
                                                 ).to_numpy(zero_copy_only=False)
    return start


def _last_rows(ids: Any) -> np.ndarray:
    """Positions of each id's last row (rows in commit order: its newest record), in the
    order the ids first appear: a stable sort, not a hash aggregation (``group_by`` took
    twice the CPU and 200 MB more on a million ids)."""
    n = len(ids)
    order = pc.sort_indices(ids)  # stable: an id's rows stay in commit order
    start = run_starts(ids, order)
    if start.all():  # every id once (a dump's, a shard's): each row is its own last
        return np.arange(n)
    order = order.to_numpy().astype(np.int64)
    heads = np.flatnonzero(start)
    last = order[np.append(heads[1:] - 1, n - 1)]
    return last[np.argsort(order[heads], kind="stable")]


def _write_rows(path: Path, table: str, data: Any) -> None:
    """A table's rows (a frame or Arrow) to ``path`` in the schema's types, grouped by video
    in id order (a stable sort)."""
    if isinstance(data, pd.DataFrame):
        df = conform(data, table) if table in SCHEMAS else data
        data = pa.Table.from_pandas(df, preserve_index=False)
    # every shard file in the schema's types (a dataset reads them as one); a table with
    # object columns (tdr_frames' vectors) has no fixed schema: written as given
    if table in SCHEMAS and "object" not in SCHEMAS[table].values():
        for f in arrow_schema(table):
            i = data.schema.get_field_index(f.name)
            if i >= 0 and data.schema.field(i).type != f.type:
                data = data.set_column(i, f, data.column(i).cast(f.type))
    ids = data.column("video_id") if "video_id" in data.column_names else None
    if ids is not None and len(ids) > 1 and not pc.all(  # a chunk's rows come sorted
            pc.greater_equal(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
        data = data.sort_by("video_id")
    atomic_write_parquet(data, path, use_dictionary=parquet_dictionary(data.schema))

