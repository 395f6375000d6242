"""The run directory: the run's videos, numbered once, and each stage's tables a shard at a
time.

``videos.parquet`` numbers the videos in the order the run first lists them (its row order,
append-only: a source's order, so a shard reads a stretch of it); shard k is videos
``[k*S, (k+1)*S)`` (S, the shard size, is fixed when the run directory is made:
``layout.json``). A stage writes each table it makes as a folder of Parquet files, one per
shard (``<table>/shard-00000.parquet``, rows grouped by video in id order), and then the
shard's status file (``status/<stage>/shard-00000.parquet``, a row per video): a shard is
finished iff its status file exists. So a table is read as a dataset
(``pd.read_parquet("DIR/captions")``, DuckDB over ``DIR/captions/*.parquet``,
``pyarrow.dataset``), and stage B's shard k reads stage A's shard k; nothing is merged.

Inside an unfinished shard, finished videos are committed in chunks
(``work/<stage>/shard-00000/``: table files, then the chunk's status file), so a kill loses
only the videos in flight; finishing the shard concatenates its chunks (and, when a shard is
redone in part, its earlier rows) into the final files. One lock file per (stage, shard)
(``claims/``) keeps two processes off the same shard.

Run directories of the earlier layout (``parts/``) are refused in one line naming the version
that reads them.
"""

from __future__ import annotations

import contextlib
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

from howtocap.atomic import (
    CorruptFile,
    CorruptPartWarning,
    atomic_write,
    atomic_write_text,
    corrupt_parquet,
    disk_full_as,
    fsync_dir,
    looks_complete,
)
from howtocap.engine.claims import Owner, refresh_claim, try_claim
from howtocap.engine.records import (
    StatusRecord,
    empty_records,
    read_records,
    records_table,
    status_writes,
)
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
        self._size: int | None = None
        self._index: tuple[int, _VideoIndex] | None = None  # (videos.parquet mtime, index)
        self._checked: set[tuple[Path, int]] = set()  # shard files verified whole
        # what a stage's results were made with, its totals for `status`, steps' settings
        self.fingerprints = JsonFolder(self.root / "fingerprints")
        self.stats = JsonFolder(self.root / "stats")
        self.configs = JsonFolder(self.root / "config")
        if (self.root / "parts").is_dir():
            raise OldLayout(f"{self.root}: a run directory of an earlier layout (parts/), "
                            f"written by howtocap {OLD_LAYOUT}; read it with "
                            f"`pip install 'howtocap<0.2'` or write to a new --out")
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    # -- paths ---------------------------------------------------------------------------
    def table_path(self, name: str) -> Path:
        """A one-file table (``videos.parquet``, reduce steps' tables); stages' tables are
        folders of shard files (``table_files``)."""
        return self.root / f"{name}.parquet"

    def shard_path(self, table: str, k: int) -> Path:
        """Shard k's file of a table folder (``status/<stage>`` for a stage's status)."""
        return self.root / table / shard_name(k)

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    # -- shards --------------------------------------------------------------------------
    @property
    def shard_size(self) -> int:
        if self._size is None:
            try:
                self._size = int(json.loads((self.root / "layout.json").read_text())
                                 ["shard_size"])
            except (OSError, ValueError, KeyError, TypeError):
                self._size = self._new_size or SHARD_SIZE
        return self._size

    def shard_count(self) -> int:
        n = self.video_count()
        return -(-n // self.shard_size)

    def video_count(self) -> int:
        """Rows of ``videos.parquet`` (its footer; 0 without one)."""
        import pyarrow.parquet as pq

        path = self.table_path("videos")
        return pq.read_metadata(path).num_rows if path.exists() else 0

    def shard_videos(self, k: int, columns: Sequence[str] = ("video_id",)) -> Any:
        """Shard k's rows of ``videos.parquet`` (Arrow; its row group k)."""
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(self.table_path("videos"))
        return pf.read_row_group(k, columns=list(columns))

    def shard_of(self, video_ids: Sequence[str]) -> np.ndarray:
        """The shard of each video (-1: not in ``videos.parquet``)."""
        if not video_ids:
            return np.zeros(0, np.int64)
        nums = self._video_index().numbers(video_ids)
        return np.where(nums >= 0, nums // self.shard_size, -1)

    def _video_index(self) -> _VideoIndex:
        path = self.table_path("videos")
        stamp = path.stat().st_mtime_ns if path.exists() else 0
        if self._index is None or self._index[0] != stamp:
            self._index = (stamp, _VideoIndex.read(path if stamp else None))
        return self._index[1]

    def writer(self, stage: str, k: int, writes: Sequence[str] = ()) -> ShardWriter:
        """The unit of work: ``stage`` on shard ``k`` (its claim, chunks and final files)."""
        return ShardWriter(self, stage, k, tuple(writes))

    def read_shard(self, table: str, k: int) -> Any:
        """Shard k's rows of ``table`` as Arrow (None when it has none); a corrupt file is
        dropped (its shard redone) and None returned."""
        return self._read(self.shard_path(table, k))

    def _read(self, path: Path) -> Any:
        """A Parquet file, its page checksums verified; None when missing, or when corrupt
        (then dropped, its shard redone, and listed in ``corrupted``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path, page_checksum_verification=True)
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError) as exc:
            self.drop_corrupt(path, corrupt_parquet(path, exc))
            return None

    # -- videos --------------------------------------------------------------------------
    def record_videos(self, items: Iterable[Any]) -> int:
        """Number the videos not yet in ``videos.parquet`` (in the order given, after the
        others) and remember which file each came from; returns how many videos the run has.
        ``items`` are video items, or Arrow arrays of ids with no files yet (a text-only run:
        a HowTo100M source's 1.2M ids never become Python objects). An empty ``video_path``
        never erases one recorded before (a caption run from ``--subtitles`` keeps the files
        ``howtocap align --videos`` attached)."""
        import pyarrow as pa

        schema = arrow_schema("videos")

        def tables() -> Iterator[Any]:
            cols: tuple[list[str], list[str], list[str]] = ([], [], [])
            for it in items:
                if isinstance(it, pa.Array | pa.ChunkedArray):
                    empty = pa.repeat(pa.scalar("", pa.string()), len(it))
                    yield pa.table([it.cast(pa.string()), empty, empty], schema=schema)
                    continue
                cols[0].append(it.video_id)
                cols[1].append(str(it.video_path or ""))
                cols[2].append(str(it.subtitle_path or ""))
                if len(cols[0]) >= VIDEO_CHUNK:
                    yield pa.table([pa.array(c, pa.string()) for c in cols], schema=schema)
                    for c in cols:
                        c.clear()
            if cols[0]:
                yield pa.table([pa.array(c, pa.string()) for c in cols], schema=schema)

        return self._add_videos(tables())

    def _add_videos(self, tables: Iterable[Any]) -> int:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        schema = arrow_schema("videos")
        path = self.table_path("videos")
        new = pa.concat_tables(list(tables) or [schema.empty_table()]).cast(schema)
        new = _last_per_id(new)  # each id once, in the order first given
        old = pq.read_table(path).select(schema.names).cast(schema) if path.exists() \
            else schema.empty_table()
        at = pc.index_in(new.column("video_id"), value_set=old.column("video_id"))
        known = at.is_valid().to_numpy(zero_copy_only=False)
        fresh = new.filter(pa.array(~known))
        changed = False
        if known.any():  # a recorded video given a file: its path is updated
            upd = new.filter(pa.array(known))
            pos = at.filter(pa.array(known)).to_numpy()
            cols = {}
            for c in ("video_path", "subtitle_path"):
                mine = pc.fill_null(upd.column(c), "").to_numpy(zero_copy_only=False)
                if not (mine != "").any():
                    cols[c] = old.column(c)
                    continue
                vals = pc.fill_null(old.column(c), "").to_numpy(zero_copy_only=False).copy()
                theirs = vals[pos]
                give = (mine != "") & (mine != theirs)
                if give.any():
                    vals[pos[give]] = mine[give]
                    changed = True
                cols[c] = pa.array(vals, pa.string())
            if changed:
                old = pa.table([old.column("video_id"), cols["video_path"],
                                cols["subtitle_path"]], schema=schema)
        if not fresh.num_rows and not changed:
            return old.num_rows
        table = pa.concat_tables([old, fresh]) if fresh.num_rows else old
        self._write_layout()
        size = self.shard_size
        atomic_write(path, lambda tmp: pq.write_table(table, tmp, row_group_size=size,
                                                      write_page_checksum=True))
        return table.num_rows

    def _write_layout(self) -> None:
        path = self.root / "layout.json"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"layout": LAYOUT,
                                                "shard_size": self.shard_size}))

    def attach_videos(self, items: Iterable[Any]) -> tuple[list[str], list[str]]:
        """Record video files for videos this run already has (e.g. captioned from
        ``--subtitles`` alone): ``(ids attached, ids this run does not know)``; unknown ids
        are left out, so a folder holding more videos than the run does not add any."""
        items = list(items)
        known = self.shard_of([it.video_id for it in items]) >= 0
        attach = [it for it, k in zip(items, known, strict=True) if k and it.video_path]
        if attach:
            self.record_videos(attach)
        return [it.video_id for it in attach], [it.video_id for it, k in
                                                zip(items, known, strict=True) if not k]

    # -- reading a table: every reader outside the engine goes through these -----------
    def table_files(self, name: str) -> list[Path]:
        """The Parquet files that hold the table, in shard order: what ``pyarrow.dataset``,
        DuckDB or a record batch at a time read ([] when the run has none of it)."""
        if name == "status":
            return sorted((self.root / "status").glob(f"*/{SHARD_GLOB}"))
        folder = self.root / name  # (a folder of the same name may hold other files)
        files = sorted(folder.glob(SHARD_GLOB)) if folder.is_dir() else []
        if files:
            return files
        path = self.table_path(name)
        return [path] if path.exists() else []

    def has_table(self, name: str) -> bool:
        return bool(self.table_files(name))

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The table read whole as a frame (only ``columns`` when given); empty, with its
        columns, when the run has none of it. A corrupt shard file is dropped with a
        warning (its shard is redone by the next run) and its rows left out."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        parts = []
        for path in self.table_files(name):
            try:
                have = pq.read_schema(path).names
                want = None if columns is None else [c for c in columns if c in have]
                parts.append(pq.read_table(path, columns=want,
                                           page_checksum_verification=True))
            except FileNotFoundError:
                continue
            except (pa.ArrowException, OSError) as exc:
                if name == "videos":
                    raise corrupt_parquet(path, exc) from None
                self.drop_corrupt(path, corrupt_parquet(path, exc))
        if not parts:
            df = empty_table(name) if name in SCHEMAS else pd.DataFrame()
        else:
            df = pa.concat_tables(parts, promote_options="permissive").to_pandas()
            if name in SCHEMAS:
                df = df.reset_index(drop=True)
        return df if columns is None else df[[c for c in columns if c in df.columns]]

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None:
        """Remove a corrupt file so it is recomputed: a shard's table file takes the status
        files of the stages that wrote it for that shard (so they redo it); the warning
        names it."""
        warnings.warn(f"{exc}; removed, it will be recomputed", CorruptPartWarning,
                      stacklevel=3)
        self.corrupted.append(path)
        if path.name.startswith("shard-") and path.parent.parent == self.root \
                and path.parent.name not in NOT_TABLES:
            for status in (self.root / "status").glob(f"*/{path.name}"):
                if path.parent.name in status_writes(status):
                    status.unlink(missing_ok=True)
        path.unlink(missing_ok=True)  # after the status: a kill between leaves it redone

    # -- status --------------------------------------------------------------------------
    def stages_with_results(self) -> set[str]:
        found: set[str] = set()
        for folder in (self.root / "status", self.root / "work"):
            if folder.is_dir():
                found |= {p.name for p in folder.iterdir() if p.is_dir()
                          and next(p.iterdir(), None) is not None}
        return found

    def records(self, stage: str, columns: Sequence[str] | None = None) -> Iterator[Any]:
        """Every video's record of ``stage`` (finished shards, and the chunks of unfinished
        ones), as Arrow tables of ``video_id`` and ``columns``, a shard at a time; each
        video once."""
        shards = {shard_number(p) for p in (self.root / "status" / stage).glob(SHARD_GLOB)}
        work = self.root / "work" / stage
        if work.is_dir():
            shards |= {int(p.name[len("shard-"):]) for p in work.glob("shard-*") if p.is_dir()}
        for k in sorted(shards):
            t = self.writer(stage, k).records(columns)
            if t.num_rows:
                yield t

    def done(self, stage: str, video_ids: Sequence[str], table: str | None = None
             ) -> list[bool]:
        """Which of these videos ``stage`` finished: ``ok`` in a finished shard (whose
        ``table`` file is whole, when named): what a later stage may read."""
        import pyarrow as pa
        import pyarrow.compute as pc

        shards = self.shard_of(list(video_ids))
        out = np.zeros(len(video_ids), dtype=bool)
        for k in np.unique(shards[shards >= 0]).tolist():
            path = self.shard_path(f"status/{stage}", k)
            try:
                recs = read_records(path, ["status"])
            except FileNotFoundError:
                continue
            except CorruptFile as exc:
                self.drop_corrupt(path, exc)
                continue
            if table is not None and not self._whole(self.shard_path(table, k)):
                continue
            ok = recs.filter(pc.equal(recs.column("status"), "ok")).column("video_id")
            at = np.flatnonzero(shards == k)
            hit = pc.is_in(pa.array([video_ids[i] for i in at], pa.string()), value_set=ok)
            out[at] = hit.to_numpy(zero_copy_only=False)
        return out.tolist()

    def _whole(self, path: Path) -> bool:
        """Whether a shard file is whole, its page checksums verified (once a process per
        file version): what a later stage will read is checked before it is taken as done,
        also when nothing else reads it again. A corrupt one is dropped (its shard redone)."""
        try:
            key = (path, path.stat().st_mtime_ns)
        except FileNotFoundError:
            return True  # no rows of this table: nothing to check
        if key in self._checked:
            return True
        seen = len(self.corrupted)
        self._read(path)
        if len(self.corrupted) > seen:
            return False
        self._checked.add(key)
        return True

    # -- forgetting ----------------------------------------------------------------------
    def forget(self, stage: str, video_ids: Iterable[str]) -> None:
        """Take these videos' results of ``stage`` back (their shards rewritten without
        them): they are redone."""
        ids = sorted(set(video_ids))
        if not ids:
            return
        shards = self.shard_of(ids)
        owner = Owner.me()
        for k in np.unique(shards[shards >= 0]).tolist():
            w = self.writer(stage, k)
            if not w.started():
                continue
            w.writes = tuple(status_writes(w.status)) or w._chunk_writes()
            while not w.claim(owner):
                time.sleep(0.05)  # another process works on the shard: wait for it
            try:
                w.finish(drop={ids[i] for i in np.flatnonzero(shards == k)})
            finally:
                w.release()

    def invalidate(self, stage: str, tables: Iterable[str]) -> None:
        """Forget a stage's results (``--redo``): its status, chunks, tables, fingerprint
        and timing. The fingerprint goes last, so a kill midway still refuses."""
        for path in [self.root / "status" / stage, self.root / "work" / stage,
                     *(self.root / t for t in tables)]:
            if path.is_dir():
                shutil.rmtree(path)
        for t in tables:
            self.table_path(t).unlink(missing_ok=True)
        self.stats.path(stage).unlink(missing_ok=True)
        self.fingerprints.path(stage).unlink(missing_ok=True)


class JsonFolder:
    """A folder of small JSON documents, one per stage or step (``fingerprints/``,
    ``stats/``, ``config/``): written whole (temp file and rename), read as None when
    missing or unreadable."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write(self, name: str, data: dict[str, Any]) -> None:
        atomic_write_text(self.path(name), json.dumps(data, indent=2, default=str))

    def names(self) -> set[str]:
        return {p.stem for p in self.folder.glob("*.json")} if self.folder.is_dir() else set()


class ShardWriter:
    """One stage on one shard: its claim, the chunks committed while it runs, and the final
    files that finish it (table files, then the status file)."""

    def __init__(self, rundir: RunDir, stage: str, k: int, writes: tuple[str, ...]) -> None:
        self.rundir, self.stage, self.k, self.writes = rundir, stage, k, writes
        self.work = rundir.root / "work" / stage / f"shard-{k:05d}"
        self.claim_path = rundir.root / "claims" / stage / f"shard-{k:05d}.lock"
        self.status = rundir.shard_path(f"status/{stage}", k)
        self._chunks = 0

    def started(self) -> bool:
        return self.status.exists() or self.work.is_dir()

    def claim(self, owner: Owner) -> bool:
        return try_claim(self.claim_path, owner)

    def release(self) -> None:
        self.claim_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.claim_path.parent.rmdir()
            self.claim_path.parent.parent.rmdir()

    def chunk_ids(self) -> list[str]:
        """The chunks committed so far (those whose status file exists), in commit order."""
        if not self.work.is_dir():
            return []
        return sorted(p.name[:-len(".status.parquet")]
                      for p in self.work.glob("*.status.parquet"))

    def _chunk_writes(self) -> tuple[str, ...]:
        for c in self.chunk_ids():
            return tuple(status_writes(self.work / f"{c}.status.parquet"))
        return ()

    def _parts(self, columns: Sequence[str] | None) -> list[tuple[str, Any]]:
        """``(source, records)``: the final status file ("") and each chunk's, in order."""
        out = []
        for source, path in [("", self.status), *((c, self.work / f"{c}.status.parquet")
                                                  for c in self.chunk_ids())]:
            try:
                out.append((source, read_records(path, columns)))
            except FileNotFoundError:
                continue
            except CorruptFile as exc:
                self.rundir.drop_corrupt(path, exc)
        return out

    def records(self, columns: Sequence[str] | None = None) -> Any:
        """Each video's newest record of this shard (final, then chunks: the latest wins)."""
        import pyarrow as pa

        parts = self._parts(columns)
        if not parts:
            return empty_records(columns)
        if len(parts) == 1:
            return parts[0][1]
        t = pa.concat_tables([p for _, p in parts])
        return t.take(pa.array(_last_positions(t.column("video_id"))))

    def _file(self, source: str, table: str) -> Path:
        """A table's file of the final shard ("") or of a chunk."""
        return self.rundir.shard_path(table, self.k) if source == "" \
            else self.work / f"{source}.{table}.parquet"

    def commit(self, records: Sequence[StatusRecord], tables: dict[str, Any]) -> None:
        """One chunk: a file per table, then its status file (temp file + rename each), so
        a chunk exists iff its status file does."""
        import pyarrow.parquet as pq

        if not self._chunks:  # numbered after the shard's chunks so far (a dead holder's too):
            # commit order is the number's, not a clock's (one stepped back, or another host's)
            self._chunks = max((int(c.split("-")[0]) for c in self.chunk_ids()), default=0)
        self._chunks += 1
        cid = f"{self._chunks:08d}-{time.time_ns():020d}-{os.getpid()}"
        self.work.mkdir(parents=True, exist_ok=True)
        for table, data in tables.items():
            _write_rows(self.work / f"{cid}.{table}.parquet", table, data)
        status = records_table(records, self.stage, self.writes)
        atomic_write(self.work / f"{cid}.status.parquet",
                     lambda tmp: pq.write_table(status, tmp, write_page_checksum=True))
        refresh_claim(self.claim_path)

    def finish(self, drop: set[str] | frozenset[str] = frozenset()) -> None:
        """The shard's final files from its earlier final files and its chunks (each video's
        rows from where its newest record is), ``drop`` left out; the status file last,
        then the work folder goes."""
        import pyarrow as pa
        import pyarrow.compute as pc

        chunks = self.chunk_ids()
        if not drop and len(chunks) == 1 and not self.status.exists() \
                and self._move(chunks[0]):
            return
        parts = self._parts(None)
        loaded: dict[tuple[int, str], Any] = {}
        for i, (source, _) in enumerate(parts):  # a corrupt file: its videos are redone
            for table in self.writes:
                seen = len(self.rundir.corrupted)
                rows = self.rundir._read(self._file(source, table))
                if rows is not None:
                    loaded[(i, table)] = rows
                elif len(self.rundir.corrupted) > seen:  # (missing: no rows of this table)
                    parts[i] = (source, parts[i][1].slice(0, 0))
                    (self.status if source == "" else
                     self.work / f"{source}.status.parquet").unlink(missing_ok=True)
        if not parts:
            shutil.rmtree(self.work, ignore_errors=True)
            return
        recs = pa.concat_tables([p for _, p in parts])
        src = np.concatenate([np.full(p.num_rows, i) for i, (_, p) in enumerate(parts)])
        keep = _last_positions(recs.column("video_id"))
        if drop:
            gone = pc.is_in(recs.column("video_id").take(pa.array(keep)),
                            value_set=pa.array(sorted(drop), pa.string()))
            keep = keep[~gone.to_numpy(zero_copy_only=False)]
        final = recs.take(pa.array(keep))
        final_src = src[keep]
        status = records_table([], self.stage, self.writes).schema
        records = final.select(status.names).cast(status).replace_schema_metadata(
            status.metadata)
        records = records.take(pc.sort_indices(records, sort_keys=[("video_id", "ascending")]))
        # ``forget`` of a finished shard only takes rows away: its status goes first, so a
        # kill before the tables are rewritten leaves the dropped videos to redo (the other
        # way round, they would stay done without their rows)
        shrink = bool(drop) and all(source == "" for source, _ in parts)
        if shrink:
            self._write_status(records)
        for table in self.writes:
            pieces = []
            for i in range(len(parts)):
                ids = final.column("video_id").filter(pa.array(final_src == i))
                rows = loaded.get((i, table))
                if rows is None or not len(ids) or not rows.num_rows:
                    continue  # (a file of 0 rows may type its ids as null: nothing to keep)
                if "video_id" in rows.column_names:
                    rows = rows.filter(pc.is_in(rows.column("video_id"), value_set=ids))
                pieces.append(rows)
            out = self.rundir.shard_path(table, self.k)
            if pieces and sum(p.num_rows for p in pieces):
                _write_rows(out, table, pa.concat_tables(pieces, promote_options="permissive"))
            else:
                out.unlink(missing_ok=True)
        if not shrink:
            self._write_status(records)
        self._clear_work()

    def _move(self, cid: str) -> bool:
        """A shard done in one chunk: its files are the shard's (rows grouped by video in id
        order, one record a video), hard-linked into place instead of read and written
        again, the status file last; the chunk stays whole until then, so a kill midway
        finishes the same way on resume. False when a file is not whole or links are not
        possible here (then the shard is finished the long way)."""
        import pyarrow.parquet as pq

        status = self.work / f"{cid}.status.parquet"
        files = {t: self._file(cid, t) for t in self.writes if self._file(cid, t).exists()}
        if not all(looks_complete(p) for p in (status, *files.values())):
            return False
        try:
            for table in self.writes:
                out = self.rundir.shard_path(table, self.k)
                path = files.get(table)
                if path is None or not pq.read_metadata(path).num_rows:
                    out.unlink(missing_ok=True)
                    continue
                _link(path, out)
            _link(status, self.status)  # last: the shard is finished
        except OSError:
            return False
        self._clear_work()
        return True

    def _clear_work(self) -> None:
        """The finished shard's work folder goes, and its stage's folders once empty."""
        shutil.rmtree(self.work, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.work.parent.rmdir()
            self.work.parent.parent.rmdir()

    def _write_status(self, records: Any) -> None:
        import pyarrow.parquet as pq

        with disk_full_as(self.status):
            self.status.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.status, lambda tmp: pq.write_table(records, tmp,
                                                             write_page_checksum=True))


def _link(src: Path, dst: Path) -> None:
    """``dst`` becomes a hard link to ``src`` at once (a temp link renamed over it)."""
    from howtocap.atomic import writer_tag

    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{writer_tag()}.link.tmp")
    tmp.unlink(missing_ok=True)
    os.link(src, tmp)
    os.replace(tmp, dst)
    fsync_dir(dst.parent)


def _key_runs(keys: Any) -> tuple[np.ndarray, np.ndarray]:
    """A stable sort of the keys (Arrow) and where each key's run of rows starts in it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(keys)
    order = pc.sort_indices(keys).to_numpy().astype(np.int64)
    ranked = pc.take(keys, pa.array(order))
    if isinstance(ranked, pa.ChunkedArray):
        ranked = ranked.combine_chunks()
    start = np.ones(n, dtype=bool)
    if n > 1:
        start[1:] = pc.not_equal(ranked.slice(1), ranked.slice(0, n - 1)).to_numpy(
            zero_copy_only=False)
    return order, start


def _last_positions(keys: Any) -> np.ndarray:
    """Positions of each key's last row (rows in commit order: the newest record), in key
    order."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    order, start = _key_runs(keys)
    return order[np.append(np.flatnonzero(start)[1:] - 1, len(order) - 1)]


def _last_per_id(table: Any) -> Any:
    """Each id once, with its last row's values, in the order the ids first appear."""
    import pyarrow as pa

    if not table.num_rows:
        return table
    order, start = _key_runs(table.column("video_id"))
    first = order[start]
    last = order[np.append(np.flatnonzero(start)[1:] - 1, len(order) - 1)]
    return table.take(pa.array(last[np.argsort(first, kind="stable")]))


def _write_rows(path: Path, table: str, data: Any) -> None:
    """A table's rows (a frame or Arrow) to ``path``, grouped by video in id order (a stable
    sort keeps each video's rows in their order), in the schema's types."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if isinstance(data, pd.DataFrame):
        df = conform(data, table) if table in SCHEMAS else data
        data = pa.Table.from_pandas(df, preserve_index=False)
    # every shard file in the schema's types (a dataset reads them as one); a table with
    # object columns (tdr_frames' vectors) has no fixed schema: written as given
    if table in SCHEMAS and "object" not in SCHEMAS[table].values():
        schema = arrow_schema(table)
        for f in schema:
            i = data.schema.get_field_index(f.name)
            if i >= 0 and data.schema.field(i).type != f.type:
                data = data.set_column(i, f, data.column(i).cast(f.type))
    if "video_id" in data.column_names and data.num_rows > 1:
        ids = data.column("video_id")
        n = data.num_rows
        if not pc.all(pc.greater_equal(ids.slice(1), ids.slice(0, n - 1))).as_py():
            data = data.take(pc.sort_indices(data, sort_keys=[("video_id", "ascending")]))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: pq.write_table(
        data, tmp, write_page_checksum=True, use_dictionary=parquet_dictionary(data.schema)))


class _VideoIndex:
    """Each recorded id's number, found by a hash of the id (sorted 64-bit hashes and their
    numbers: 16 bytes a video, not a Python string each)."""

    def __init__(self, hashes: np.ndarray, numbers: np.ndarray, ids: Any | None) -> None:
        self.hashes, self.order, self.ids = hashes, numbers, ids

    @classmethod
    def read(cls, path: Path | None) -> _VideoIndex:
        import pyarrow.parquet as pq

        if path is None:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), None)
        ids = pq.read_table(path, columns=["video_id"]).column(0)
        h = np.fromiter((hash(s) for s in ids.to_pylist()), np.int64, count=len(ids))
        order = np.argsort(h, kind="stable")
        hs = h[order]
        clash = len(hs) > 1 and bool((hs[1:] == hs[:-1]).any())
        return cls(hs, order, ids.combine_chunks() if clash else None)

    def numbers(self, video_ids: Sequence[str]) -> np.ndarray:
        if not len(self.hashes):
            return np.full(len(video_ids), -1, np.int64)
        q = np.fromiter((hash(s) for s in video_ids), np.int64, count=len(video_ids))
        pos = np.minimum(np.searchsorted(self.hashes, q), len(self.hashes) - 1)
        out = np.where(self.hashes[pos] == q, self.order[pos], -1)
        if self.ids is not None:  # two recorded ids share a hash: each answer is checked
            for i in np.flatnonzero(out >= 0).tolist():
                if self.ids[int(out[i])].as_py() != video_ids[i]:
                    hit = np.flatnonzero(np.asarray(self.ids.to_pylist(), dtype=object)
                                         == video_ids[i])
                    out[i] = int(hit[0]) if len(hit) else -1
        return out
