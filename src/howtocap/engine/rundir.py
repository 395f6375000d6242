"""The run directory: batches of results, the status table, and merged tables.

Only this module knows the layout (parts, batches, claims, fingerprints, config, logs, cache,
index). What it is built on knows no layout and is handed paths (or this ``RunDir``):
``engine.records`` (status records, manifests, the per-stage index of newest records),
``engine.merge`` (the merged tables), ``engine.claims`` (owners, claim files and their lock),
and the bottom layer: ``atomic`` (whole files, a full disk, corrupt Parquet), ``hashing``
(stable hashes, file-safe names) and ``schemas`` (the tables' columns and ``conform``).

A stage commits a batch of videos: one Parquet file per table (temp file + rename), then one
manifest holding the batch's status records. A killed run therefore leaves, per batch, every
file of it or no manifest (its table files are then orphans, ignored and swept), and a re-run
redoes only what has no ``ok`` record. Merged tables (``captions.parquet`` …) are rebuilt from
the batches, so they never hold duplicates. Run directories written before batches (a part
file and a status JSON per video) are read beside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import howtocap.engine.merge as merging
from howtocap.atomic import (
    CorruptFile,
    CorruptPartWarning,
    atomic_write,
    atomic_write_parquet,
    atomic_write_text,
    corrupt_parquet,
    dead_here,
    disk_full_as,
    looks_complete,
    read_parquet,
    writer_tag,
)
from howtocap.engine.claims import Owner, claim_lock, live_claims, write_claim, writer_alive
from howtocap.engine.records import (
    BATCH_PREFIX,
    FORGOTTEN,
    MANIFEST_META,
    RECORD_COLS,
    StageIndex,
    StatusRecord,
    _plain,
    _read_manifest,
    _record,
    _record_types,
    _records_frame,
    last_per_key,
    manifest_names,
    read_manifests,
    with_defaults,
)
from howtocap.hashing import safe_name
from howtocap.schemas import (
    FREE_TEXT,
    SCHEMAS,
    Rows,
    arrow_schema,
    conform,
    empty_table,
    parquet_dictionary,
    rows,
)


class RunDir:
    """All reads and writes of one run directory go through here."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(root)
        self.corrupted: list[Path] = []  # corrupt files found (and removed) while reading
        self._indexes: dict[str, StageIndex] = {}
        self._whole: dict[Path, bool] = {}  # batch files found whole (written once)
        self._batch_cache: dict[Path, _BatchFile] = {}  # decoded for read_part
        self._manifests: dict[Path, pd.DataFrame] = {}  # decoded for ``status``
        self._claims = 0
        self._index_dirs: dict[str, tuple[Path, Path]] = {}
        self._stages: tuple[int, list[str]] = (-1, [])  # (folder mtime, stages with batches)
        self._batch_paths: dict[tuple[str, str], Path] = {}  # (table, batch) -> its file
        self._spill_checked: Path | None = None  # ``spill_dir`` looked for dead ones
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    # -- paths ---------------------------------------------------------------------------
    def table_path(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def part_dir(self, table: str) -> Path:
        return self.root / "parts" / table

    def part_path(self, table: str, video_id: str) -> Path:
        """A video's part file in the per-video layout (runs written before batches)."""
        return self.part_dir(table) / f"{safe_name(video_id)}.parquet"

    def _status_path(self, stage: str, video_id: str) -> Path:
        """A video's status JSON in the per-video layout (runs written before batches)."""
        return self.status_dir / stage / f"{safe_name(video_id)}.json"

    @property
    def status_dir(self) -> Path:
        """Where per-video status records of older runs live (one folder per stage)."""
        return self.root / "parts" / "status"

    @property
    def index_dir(self) -> Path:
        """The search index (``search.index`` owns what is inside)."""
        return self.root / "index"

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    # -- batches ---------------------------------------------------------------------------
    # A stage commits a batch of videos as one Parquet file per table it writes
    # (``parts/<table>/<batch>.parquet``) and then ONE manifest
    # (``parts/batches/<stage>/<batch>.parquet``: a status row per video), temp file + fsync +
    # rename each, so a batch exists iff its manifest does. Batch ids sort in commit order;
    # for a video the newest manifest wins (a retry supersedes a failure, ``forget`` a
    # result). Runs written before batches (a part and a status JSON per video) are read
    # beside them: a per-video record counts until a manifest names the video.
    def batch_dir(self, stage: str) -> Path:
        return self.root / "parts" / "batches" / stage

    def manifest_path(self, stage: str, batch: str) -> Path:
        return self.batch_dir(stage) / f"{batch}.parquet"

    def batch_part_path(self, table: str, batch: str) -> Path:
        return self.part_dir(table) / f"{batch}.parquet"

    def new_batch_id(self, stage: str) -> str:
        """Later than every batch this process has seen of ``stage`` (clocks of two hosts
        may disagree; claims make a video's batches sequential)."""
        idx = self._index(stage)
        ns = max(time.time_ns(), idx.newest + 1)
        idx.newest = ns
        return f"{BATCH_PREFIX}{ns:020d}-{writer_tag()}"

    def commit_batch(self, stage: str, writes: Sequence[str], records: Sequence[StatusRecord],
                     tables: dict[str, Any]) -> str:
        """Write one batch: a file per table (rows grouped by video), then the manifest
        (``records``, one per video; ``writes``: every table the stage declares, so readers
        know whose rows these are). A table is a frame, or an Arrow table in the schema's
        types (``schemas.rows_to_arrow``). Returns the batch id."""
        bid = self.new_batch_id(stage)
        for table, df in tables.items():
            path = self.batch_part_path(table, bid)
            if not isinstance(df, pd.DataFrame):
                _write_arrow_batch(df, path)
                continue
            df = conform(df, table) if table in SCHEMAS else df
            if "video_id" in df.columns and len(df):  # grouped by video, each in its order
                df = df.sort_values("video_id", kind="stable").reset_index(drop=True)
            atomic_write_parquet(df, path, row_group_size=merging.PART_ROW_GROUP)
        manifest = _records_frame(records)
        meta = json.dumps({"stage": stage, "writes": list(writes), "tables": sorted(tables)})
        self._write_manifest(self.manifest_path(stage, bid), manifest, meta)
        self._index(stage).add(bid, manifest, list(writes), own=True)
        return bid

    def _write_manifest(self, path: Path, df: pd.DataFrame, meta: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               MANIFEST_META: meta.encode()})
        atomic_write(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))

    def forget(self, stage: str, video_ids: Iterable[str]) -> None:
        """Forget these videos' results of ``stage`` (one manifest of ``forgotten`` rows,
        newest wins): they are redone, their rows leave the merged tables."""
        ids = sorted(set(video_ids))
        if ids:
            idx = self._index(stage)
            self.commit_batch(stage, idx.writes, [StatusRecord(v, stage, FORGOTTEN)
                                                  for v in ids], {})

    def sweep_orphans(self) -> int:
        """Remove batch table files no manifest names whose writer is dead (a kill between
        a batch's table files and its manifest); never a live writer's. Returns how many."""
        parts = self.root / "parts"
        if not parts.is_dir():
            return 0
        known: set[str] = set()
        batches = parts / "batches"
        for d in batches.iterdir() if batches.is_dir() else []:
            known |= {p.stem for p in d.glob(f"{BATCH_PREFIX}*.parquet")}
        removed = 0
        for d in parts.iterdir():
            if not d.is_dir() or d.name in _NOT_TABLES:
                continue
            for p in d.glob(f"{BATCH_PREFIX}*.parquet"):
                if p.stem not in known and not writer_alive(p.stem):
                    p.unlink(missing_ok=True)
                    removed += 1
        return removed

    def _index(self, stage: str, refresh: bool = False) -> StageIndex:
        """The stage's index, read again when ``refresh`` or when its manifest folder or
        per-video status folder changed (their mtimes: cheap enough for every lookup; a
        rename within the same clock tick as the last look can be missed, so the claim path
        always passes ``refresh``)."""
        idx = self._indexes.get(stage)
        if idx is None:
            idx = self._indexes[stage] = StageIndex(stage)
            refresh = True
        dirs = self._index_dirs.get(stage)
        if dirs is None:  # asked for every video: no paths built each time
            dirs = self._index_dirs[stage] = (self.batch_dir(stage), self.status_dir / stage)
        stamp = (_mtime(dirs[0]), _mtime(dirs[1]))
        if refresh or stamp != idx.stamp:
            idx.stamp = stamp
            idx.refresh(self)
        return idx

    def _drop_indexes(self) -> None:
        for idx in self._indexes.values():
            idx.close()  # its spilled rows
        self._indexes.clear()
        self.drop_spill()

    def drop_spill(self) -> None:
        """Remove this process's spill folder (and ``cache/spill``) if nothing is left in
        it, so a finished run leaves no empty folder behind; one in use stays."""
        mine = self._spill_path()
        with contextlib.suppress(OSError):
            mine.rmdir()
            mine.parent.rmdir()

    def spill_dir(self) -> Path:
        """This process's folder for sorted runs written to disk (stage indexes,
        ``record_videos``' chunks): ``cache/spill/<host>~<pid>``. The first time a process
        asks, the folders of this host's dead processes (killed mid-run) go."""
        mine = self._spill_path()
        if self._spill_checked != mine:
            self._spill_checked = mine
            import shutil

            for d in mine.parent.iterdir() if mine.parent.is_dir() else ():
                if dead_here(d.name):
                    shutil.rmtree(d, ignore_errors=True)
        return mine

    def _spill_path(self) -> Path:
        return self.cache_dir / "spill" / writer_tag()

    def drop_caches(self) -> None:
        """Let go of what this process keeps decoded (each stage's index of every video,
        batch files, manifests), read again when next asked: the merges and the status
        table read the run directory afresh, and need none of it."""
        self._drop_indexes()
        self._batch_cache.clear()
        self._manifests.clear()

    def records(self, stage: str, refresh: bool = True) -> pd.DataFrame:
        """The newest status row of every video of ``stage`` (index: video_id; columns: the
        status record's and ``batch``, "" for a per-video record of an older run)."""
        return self._index(stage, refresh).view()

    def newest_of(self, stage: str, video_ids: Sequence[str], columns: Sequence[str]
                  ) -> dict[str, Any]:
        """The newest record's ``columns`` (of ``records``) of each of ``video_ids``, as
        object arrays aligned with them (None where a video has no record), plus ``found``
        (bool): only these videos' values are taken out of the index, looked up by hash
        (``StageIndex.find``), so asking for a window of a million-video run costs a
        window."""
        idx = self._index(stage, refresh=True)
        at, kind = idx.find(video_ids)
        return {"found": at >= 0, **idx.values(at, kind, columns)}

    def newest(self, stage: str, columns: Sequence[str] = ("status",),
               forgotten: bool = False) -> Any:
        """The newest record of every video of ``stage`` (forgotten ones left out unless
        ``forgotten``) as an Arrow table of ``video_id``, ``status``, ``columns`` and
        ``batch`` (dictionary-encoded; "" for a per-video record of an older run). Read
        afresh, only these columns of each manifest, folded with Arrow and numpy: what
        ``status``, the merge and ``status.parquet`` need at a million videos without a
        pandas row (or a Python object) per video; ``records`` is the same rows as a frame."""
        import pyarrow as pa

        cols = ["video_id", "status", *dict.fromkeys(c for c in columns
                                                     if c not in ("video_id", "status", "batch"))]
        folder = self.batch_dir(stage)
        names = [n[:-len(".parquet")] for n in manifest_names(folder)]
        parts: list[Any] = []
        codes: list[Any] = []
        legacy = self.legacy_record_table(stage, cols)
        if legacy is not None:
            parts.append(legacy)
            codes.append(np.zeros(legacy.num_rows, np.int32))
        found = read_manifests([folder / f"{n}.parquet" for n in names], cols)
        for i, (path, got) in enumerate(zip([folder / f"{n}.parquet" for n in names], found,
                                            strict=True)):
            if isinstance(got, CorruptFile):
                self.drop_corrupt(path, got)  # its videos are redone
            elif got is not None and got.num_rows:
                parts.append(got)
                codes.append(np.full(got.num_rows, i + 1, np.int32))
        labels = pa.array(["", *names], pa.string())
        if not parts:
            empty = {c: pa.array([], _record_types().get(c, pa.string())) for c in cols}
            return pa.table({**empty, "batch": pa.DictionaryArray.from_arrays(
                pa.array([], pa.int32()), labels)})
        import pyarrow.compute as pc

        table = pa.concat_tables(parts, promote_options="permissive")
        order = np.concatenate(codes)
        del parts, codes, found  # the table holds the columns: one copy alive, not two
        keep = last_per_key(table.column("video_id"))
        if not forgotten:  # left out before the copy below, not filtered after it
            live = pc.not_equal(pc.take(table.column("status"), pa.array(keep)), FORGOTTEN)
            keep = keep[live.to_numpy(zero_copy_only=False)]
        return table.take(keep).append_column("batch", pa.DictionaryArray.from_arrays(
            pa.array(order[keep]), labels))

    def _legacy_records(self, stage: str) -> pd.DataFrame | None:
        """An older run's per-video status records of ``stage`` (None when it has none)."""
        folder = self.status_dir / stage
        if not folder.is_dir():
            return None
        idx = StageIndex(stage)
        idx._refresh_legacy(self)
        return idx.legacy

    def legacy_record_table(self, stage: str, cols: Sequence[str]) -> Any:
        """An older run's per-video status records of ``stage`` as an Arrow table of
        ``cols`` (as ``read_manifests`` gives a manifest's), or None when it has none."""
        import pyarrow as pa

        legacy = self._legacy_records(stage)
        if legacy is None or not len(legacy):
            return None
        return with_defaults(pa.Table.from_pandas(
            legacy[[c for c in cols if c in legacy.columns]], preserve_index=False), cols)

    def finished_since(self, stage: str, mark: int) -> tuple[set[str], int]:
        """The videos that manifests read after ``mark`` (a count this returns) made ``ok``:
        what finished since a listing, without rebuilding the whole index."""
        log = self._index(stage).log
        names = [b for b in log[mark:] if b]  # another process's manifests, read again
        done: set[str] = set()
        folder = self.batch_dir(stage)
        for t in read_manifests([folder / f"{b}.parquet" for b in names], ["video_id",
                                                                           "status"]):
            if t is not None and not isinstance(t, CorruptFile) and t.num_rows:
                import pyarrow.compute as pc

                ok = t.filter(pc.equal(t.column("status"), "ok"))
                done.update(ok.column("video_id").to_pylist())
        return done, len(log)

    def manifests_read(self, stage: str) -> int:
        """How many manifests of ``stage`` this process has read (a mark for
        ``finished_since``)."""
        return len(self._index(stage).log)

    def writers(self, table: str, cached: bool = False) -> list[str]:
        """The stages whose batches hold rows of ``table`` (from their manifests).
        ``cached``: list the folder again only when its mtime changed (a new stage's folder),
        for the per-video read, which asks for every video (one stat instead of a listing:
        3 ms a video on a text-only run); its caller lists afresh before concluding that no
        stage holds a video, so a folder made within the same clock tick is never missed."""
        root = self.root / "parts" / "batches"
        stamp = _mtime(root)
        if not cached or stamp != self._stages[0]:
            self._stages = (stamp, sorted(p.name for p in root.iterdir() if p.is_dir())
                            if stamp else [])
        if not cached:  # the newest manifest's footer, not the whole index (merges, status)
            return [st for st in self._stages[1] if table in self._stage_writes(st)]
        return [st for st in self._stages[1] if table in self._index(st).writes]

    def _stage_writes(self, stage: str) -> list[str]:
        """The tables ``stage`` writes, as its newest readable manifest says (one footer;
        the index this process holds, when it has read every manifest already)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        idx = self._indexes.get(stage)
        if idx is not None and idx.stamp == (_mtime(self.batch_dir(stage)),
                                             _mtime(self.status_dir / stage)):
            return idx.writes
        try:
            names = sorted((n for n in os.listdir(self.batch_dir(stage))
                            if n.startswith(BATCH_PREFIX) and n.endswith(".parquet")),
                           reverse=True)
        except FileNotFoundError:
            return []
        for name in names:
            try:
                meta = pq.read_schema(self.batch_dir(stage) / name).metadata or {}
                return list(json.loads(meta.get(MANIFEST_META, b"{}")).get("writes", []))
            except (FileNotFoundError, pa.ArrowException, OSError, ValueError):
                continue  # gone, or corrupt (the index drops it when it reads it)
        return []

    def stages_with_results(self) -> set[str]:
        found: set[str] = set()
        for root in (self.status_dir, self.root / "parts" / "batches"):
            if root.is_dir():
                found |= {p.name for p in root.iterdir() if p.is_dir()}
        return found

    # -- parts ---------------------------------------------------------------------------
    def write_part(self, table: str, video_id: str, df: pd.DataFrame) -> None:
        """Replace one video's rows of ``table`` (tests; tools that edit a table). A video a
        batch holds gets a batch of its own (its record, these rows and its rows of the
        stage's other tables), so the newest manifest still says where its rows are; else
        a part in the per-video layout (runs before batches)."""
        for st in self.writers(table):
            row = self._index(st).lookup(video_id)
            if row is not None and row["batch"]:
                idx = self._index(st)
                tables = {t: self.read_part(t, video_id) for t in idx.writes if t != table}
                tables = {t: v for t, v in tables.items() if v is not None}
                rec = self.status(st, video_id)
                assert rec is not None
                self.commit_batch(st, idx.writes, [rec], {**tables, table: df})
                return
        atomic_write_parquet(conform(df, table) if table in SCHEMAS else df,
                             self.part_path(table, video_id))

    def _live_batch(self, table: str, video_id: str) -> str | None:
        """Which batch holds ``video_id``'s rows of ``table``: a batch id, "" for its
        per-video part (older runs, or no stage records it), None when it has none (its
        newest record is a failure or forgotten)."""
        # First the indexes as this process last read them (its own commits are in them): no
        # stat per video; a video not found there is looked up again after a fresh listing.
        if self._stages[0] != -1:
            for st in self._stages[1]:
                idx = self._indexes.get(st)
                if idx is None or table not in idx.writes:
                    continue
                row = idx.lookup(video_id)
                if row is not None and row["batch"]:
                    return row["batch"] if row["status"] == "ok" else None
        for cached in (True, False):
            for st in self.writers(table, cached=cached):
                row = self._index(st).lookup(video_id)
                if row is not None and row["batch"]:
                    return row["batch"] if row["status"] == "ok" else None
        return ""

    def read_part(self, table: str, video_id: str) -> pd.DataFrame | None:
        """A video's rows of ``table``, or None when it has none or its file is missing or
        corrupt (then removed with a warning, so the stage that writes it redoes it)."""
        found = self._locate(table, video_id)
        if found is None:
            return None
        if isinstance(found, pd.DataFrame):
            return found
        entry, (a, b) = found
        if entry.df is None:
            entry.df = entry.arrow.to_pandas()
        return entry.df.iloc[a:b].reset_index(drop=True)

    def live_batches(self, table: str, video_ids: Sequence[str]) -> list[str | None]:
        """``_live_batch`` of many videos at once (a claimed batch's inputs): one vectorised
        look-up per stage index this process holds, instead of one per video; videos those
        indexes do not settle are looked up one by one, as ``_live_batch`` does."""
        out: list[str | None] = [""] * len(video_ids)
        todo = np.ones(len(video_ids), dtype=bool)
        if self._stages[0] != -1 and len(video_ids):
            for st in self._stages[1]:
                idx = self._indexes.get(st)
                if idx is None or table not in idx.writes or not todo.any():
                    continue
                at, kind = idx.find(video_ids)  # a window's ids, never the index's all
                hit = np.flatnonzero(todo & (at >= 0))
                if not len(hit):
                    continue
                got = idx.values(at[hit], kind[hit], ["batch", "status"])
                for i, b, ok in zip(hit.tolist(), got["batch"].tolist(),
                                    got["status"].tolist(), strict=True):
                    if b:
                        out[i] = b if ok == "ok" else None
                        todo[i] = False
        for i in np.flatnonzero(todo).tolist():
            out[i] = self._live_batch(table, video_ids[i])
        return out

    def read_rows(self, table: str, video_id: str, batch: str | None | bool = False
                  ) -> Rows | None:
        """``read_part`` as plain columns (``schemas.Rows``): slices of the batch's columns,
        decoded once per batch, for stages that take no pandas frame per video. ``batch``:
        where its rows are, from ``live_batches`` (False: looked up here)."""
        found = self._locate(table, video_id, batch)
        if found is None:
            return None
        if isinstance(found, pd.DataFrame):
            return rows(table, len(found), **{c: found[c].tolist() for c in found.columns
                                              if c in SCHEMAS.get(table, {})})
        entry, (a, b) = found
        if entry.cols is None:
            entry.cols = {c: _column_values(c, col) for c, col in
                          zip(entry.arrow.column_names, entry.arrow.columns, strict=True)}
        return Rows(table, b - a, {c: v[a:b] for c, v in entry.cols.items()})

    def _locate(self, table: str, video_id: str, batch: str | None | bool = False
                ) -> pd.DataFrame | tuple[_BatchFile, tuple[int, int]] | None:
        """Where a video's rows are: a per-video part's frame (older runs), or a decoded batch
        file and the video's row range in it; None when it has none (or the file is lost).
        ``batch``: its ``_live_batch`` when the caller knows it (False: looked up)."""
        if batch is False:
            batch = self._live_batch(table, video_id)
        if batch is None:
            return None
        if not batch:
            path = self.part_path(table, video_id)
            if not path.exists():
                return None
            try:
                return read_parquet(path)
            except CorruptFile as exc:
                self.drop_corrupt(path, exc)
                return None
            except FileNotFoundError:
                return None
        assert isinstance(batch, str)
        path = self._batch_paths.get((table, batch))
        if path is None:  # a Path per video cost more than the slice it finds
            if len(self._batch_paths) > 4 * BATCH_CACHE:
                self._batch_paths.clear()
            path = self._batch_paths[(table, batch)] = self.batch_part_path(table, batch)
        entry = self._batch_cache.get(path)
        if entry is None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                arrow = pq.read_table(path, page_checksum_verification=True)
            except FileNotFoundError:  # its manifest says ok: lost (dropped as corrupt)
                self.corrupted.append(path)
                return None
            except (pa.ArrowException, OSError) as exc:
                self.drop_corrupt(path, corrupt_parquet(path, exc))
                return None
            entry = self._batch_cache[path] = _BatchFile(arrow, _video_ranges(arrow))
            while len(self._batch_cache) > BATCH_CACHE:
                self._batch_cache.pop(next(iter(self._batch_cache)))
        return entry, entry.starts.get(video_id, (0, 0))

    def source_batches(self, table: str, video_ids: Sequence[str]) -> list[str]:
        """Per video, the batch its ``table`` rows are in ("" for none or a per-video
        part): ``run_stage`` visits a stage's inputs batch by batch."""
        out = [""] * len(video_ids)
        for st in self.writers(table):
            got = self.newest_of(st, video_ids, ("batch",))
            for i in np.flatnonzero(got["found"]):
                if got["batch"][i]:
                    out[i] = got["batch"][i]
        return out

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None:
        """Remove a corrupt file so it is recomputed; the warning names it."""
        warnings.warn(f"{exc}; removed, it will be recomputed", CorruptPartWarning,
                      stacklevel=3)
        self.corrupted.append(path)
        self._whole.pop(path, None)
        self._batch_cache.pop(path, None)
        path.unlink(missing_ok=True)

    def merge(self, table: str) -> pd.DataFrame:
        """Rebuild ``DIR/<table>.parquet`` from its batches and parts (sorted, so runs compare
        equal). A corrupt file is dropped with a warning (and listed in ``corrupted``)."""
        return merging.merge(self, table)

    def merge_streaming(self, table: str, batch_rows: int | None = None) -> int:
        """``merge`` without holding the table in memory (``engine.merge.merge_streaming``):
        the same rows in the same order, written ``batch_rows`` (``MERGE_CHUNK``) at a time.
        Returns the row count."""
        return merging.merge_streaming(self, table, batch_rows)

    # -- reading a table: every reader outside the engine goes through these three, so none
    # of them knows how a table is stored
    def has_table(self, name: str) -> bool:
        """Whether the run has rows of ``name`` (a stage wrote some, or its file is there)."""
        if name == "status":
            return self.table_path(name).exists() or bool(self.stages_with_results())
        return self.table_path(name).exists() or any(self.part_dir(name).glob("*.parquet"))

    def table(self, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The table read whole as a frame (only ``columns`` when given), up to date with what
        the stages committed; empty, with its columns, when the run has none of it."""
        if name == "status":  # rebuilt from the records when there are any (a copied run
            # may hold only the file)
            df = self.status_table() if self.stages_with_results() else \
                read_parquet(self.table_path(name))
        elif not self.has_table(name):
            df = empty_table(name) if name in SCHEMAS else pd.DataFrame()
        else:
            import pyarrow.parquet as pq

            for again in (False, True):
                path, = self.table_files(name)
                want = None if columns is None else \
                    [c for c in columns if c in pq.read_schema(path).names]
                try:
                    df = read_parquet(path, columns=want)
                    break
                except CorruptFile as exc:  # a page torn after its footer: rebuilt once
                    if again or not self.part_dir(name).exists():
                        raise
                    self.drop_corrupt(path, exc)
        return df if columns is None else df[[c for c in columns if c in df.columns]]

    def table_files(self, name: str) -> list[Path]:
        """The Parquet files that hold the table, up to date, for readers that stream it
        (``pyarrow.dataset``, DuckDB, a record batch at a time): today one file, merged
        without holding the table (``merge_streaming``) when it is not fresh."""
        path = self.table_path(name)
        if self._merged_is_fresh(name):
            try:
                import pyarrow.parquet as pq

                pq.read_metadata(path)
                return [path]
            except FileNotFoundError:
                raise
            except Exception as exc:  # a torn footer: pyarrow raises several types
                if not self.part_dir(name).exists():
                    raise corrupt_parquet(path, exc) from None
                self.drop_corrupt(path, corrupt_parquet(path, exc))
        self.merge_streaming(name)
        return [path]

    def _merged_is_fresh(self, table: str) -> bool:
        """Whether ``DIR/<table>.parquet`` exists and holds every part and batch written
        since (adding or replacing a part renames into the folder, which bumps its mtime)."""
        path, parts = self.table_path(table), self.part_dir(table)
        return path.exists() and (not parts.exists()
                                  or path.stat().st_mtime_ns >= self._newest_part(table))

    def _newest_part(self, table: str) -> int:
        """When ``table``'s rows last changed: its parts folder, or a manifest of a stage
        that writes it (a ``forget`` changes the rows without touching the folder)."""
        newest = self.part_dir(table).stat().st_mtime_ns
        for st in self.writers(table):
            d = self.batch_dir(st)
            if d.is_dir():
                newest = max(newest, d.stat().st_mtime_ns)
        return newest

    # -- status --------------------------------------------------------------------------
    def write_status(self, rec: StatusRecord) -> None:
        """One video's status record in the per-video layout (runs before batches; tests
        build such run directories with it)."""
        rec_d = {k: v for k, v in rec.__dict__.items() if k != "batch"}
        rec_d["finished_at"] = rec.finished_at or time.time()
        atomic_write_text(self._status_path(rec.stage, rec.video_id), json.dumps(rec_d))

    def status(self, stage: str, video_id: str) -> StatusRecord | None:
        """The video's newest record of ``stage`` (as of this process's last look at the
        run directory: ``run_stage`` looks again before it claims)."""
        idx = self._index(stage)
        row = idx.lookup(video_id)
        return None if row is None else _record(video_id, {**self._rest(idx, video_id, row),
                                                           **row, "stage": stage})

    def _rest(self, idx: StageIndex, video_id: str, row: dict[str, Any]) -> dict[str, Any]:
        """The columns of a video's record the index leaves out (message, seconds, ...):
        from its manifest (a few decoded at a time) or its per-video record."""
        if not row["batch"]:
            return idx.legacy_row(video_id)
        path = self.manifest_path(idx.stage, row["batch"])
        rows = self._manifests.get(path)
        if rows is None:
            try:
                df, _ = _read_manifest(path)
            except (FileNotFoundError, CorruptFile):
                return {}
            rows = self._manifests[path] = df.drop_duplicates("video_id", keep="last") \
                .set_index("video_id")
            while len(self._manifests) > BATCH_CACHE:
                self._manifests.pop(next(iter(self._manifests)))
        if video_id not in rows.index:
            return {}
        return {c: _plain(v) for c, v in rows.loc[video_id].items()}

    def is_done(self, stage: str, video_id: str, table: str | None = None,
                config_id: str | None = None) -> bool:
        """An ``ok`` record (made with ``config_id`` when given) whose rows' file is whole."""
        row = self._index(stage).lookup(video_id)  # what the check needs: no manifest read
        return self._record_done(_record(video_id, {**row, "stage": stage}), table, config_id) \
            if row is not None else False

    def done(self, stage: str, video_ids: Sequence[str], table: str | None = None
             ) -> list[bool]:
        """Which of these videos ``stage`` finished (``ok``, and ``table``'s rows whole when
        named): the one "done" check for callers outside the engine, column-wise (a run lists
        a million videos; a batch file is checked once)."""
        got = self.newest_of(stage, video_ids, ("status", "batch"))
        if not got["found"].any():
            return [False] * len(video_ids)
        status, batch = got["status"], got["batch"]
        whole: dict[str, bool] = {}
        out = []
        for p, vid in enumerate(video_ids):
            if not got["found"][p] or status[p] != "ok":
                out.append(False)
            elif not batch[p] or table is None:
                out.append(self.is_done(stage, vid, table))
            else:
                b = batch[p]
                if b not in whole:
                    whole[b] = self.is_done(stage, vid, table)
                out.append(whole[b])
        return out

    def _record_done(self, rec: StatusRecord, table: str | None,
                    config_id: str | None = None) -> bool:
        if rec.status != "ok":
            return False
        if config_id is not None and rec.config_id and rec.config_id != config_id:
            return False
        if table is None:
            return True
        path = self.batch_part_path(table, rec.batch) if rec.batch \
            else self.part_path(table, rec.video_id)
        whole = self._whole.get(path)
        if whole is None:
            if not path.exists():
                return False
            whole = looks_complete(path)
            if not whole:
                self.drop_corrupt(path, f"{path}: truncated Parquet part")
                return False
            if rec.batch:  # a batch file is written once: remember it
                self._whole[path] = True
        return whole

    def status_table(self) -> pd.DataFrame:
        """``DIR/status.parquet``: every stage's newest record of every video (written by
        ``write_status_table``, then read back as a frame for callers that want one)."""
        self.write_status_table()
        return read_parquet(self.table_path("status"))

    def write_status_table(self) -> int:
        """Write ``DIR/status.parquet`` (sorted by stage, then video) a stage at a time, a
        chunk at a time from a k-way merge of its manifests (``merge.newest_sorted``): no
        table of every video's record (2.4M rows and ~250 MB as Arrow columns for a
        HowTo100M caption run). Returns the row count."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = arrow_schema("status")
        cols = [c for c in target.names if c not in ("video_id", "stage")]
        total = [0]

        def write(tmp: str) -> None:
            with pq.ParquetWriter(tmp, target) as writer:
                for stage in sorted(self.stages_with_results()):
                    folder = self.batch_dir(stage)
                    names = manifest_names(folder)
                    old = self.legacy_record_table(stage, ["video_id", *cols])
                    for part in merging.newest_sorted(self, stage, [folder / n for n in names],
                                                      old, cols, STATUS_ROWS):
                        part = part.append_column("stage", pa.array([stage] * part.num_rows,
                                                                    pa.string()))
                        writer.write_table(part.select(target.names).cast(target))
                        total[0] += part.num_rows

        atomic_write(self.table_path("status"), write)
        return total[0]

    # -- fingerprints, stats, invalidation ------------------------------------------------
    def fingerprint_path(self, stage: str) -> Path:
        return self.root / "parts" / "fingerprints" / f"{stage}.json"

    def read_fingerprint(self, stage: str) -> dict[str, Any] | None:
        """``{"config_id": …, "fingerprint": {…}}`` of the settings the stage's parts were
        made with, or None (a new stage, or a run from before fingerprints)."""
        path = self.fingerprint_path(stage)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "config_id" in data else None

    def write_fingerprint(self, stage: str, config_id: str, fingerprint: dict[str, Any]) -> None:
        atomic_write_text(self.fingerprint_path(stage), json.dumps(
            {"config_id": config_id, "fingerprint": fingerprint}, indent=1, default=str))

    def has_results(self, stage: str) -> bool:
        """Whether any video has a status record for ``stage`` (done or failed)."""
        for folder, pattern in ((self.batch_dir(stage), f"{BATCH_PREFIX}*.parquet"),
                                (self.status_dir / stage, "*.json")):
            if folder.is_dir() and next(folder.glob(pattern), None) is not None:
                return self._index(stage).count() > 0
        return False

    def status_records(self, stage: str) -> list[StatusRecord]:
        """Every video's newest record of ``stage``, whole (small runs and tests; ``records``
        is the index's columns, ``newest`` any columns as Arrow)."""
        t = self.newest(stage, RECORD_COLS)
        cols = {c: t.column(c).to_pylist() for c in t.column_names}
        return [_record(v, {c: cols[c][i] for c in cols if c != "video_id"})
                for i, v in enumerate(cols["video_id"])]

    def invalidate(self, stage: str, tables: Iterable[str]) -> None:
        """Forget a stage's results (``--redo``): its status records and manifests, parts,
        merged tables, fingerprint and timing. The fingerprint goes last, so a kill midway
        still refuses."""
        import shutil

        tables = list(tables)
        for path in [self.status_dir / stage, self.batch_dir(stage),
                     *(self.part_dir(t) for t in tables)]:
            if path.exists():
                shutil.rmtree(path)
        self._drop_indexes()
        self._whole.clear()
        self._batch_cache.clear()
        self._manifests.clear()
        for t in tables:
            self.table_path(t).unlink(missing_ok=True)
        self._stats_path(stage).unlink(missing_ok=True)
        self.fingerprint_path(stage).unlink(missing_ok=True)

    def _stats_path(self, stage: str) -> Path:
        return self.root / "parts" / "stats" / f"{stage}.json"

    def read_stats(self, stage: str) -> dict[str, float]:
        try:
            data = json.loads(self._stats_path(stage).read_text())
            return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError, TypeError):
            return {}

    def add_stats(self, stage: str, **values: float) -> None:
        """Add one stage run's wall time and counts to the stage's totals (for `status`)."""
        stats = self.read_stats(stage)
        for k, v in values.items():
            stats[k] = stats.get(k, 0.0) + float(v)
        atomic_write_text(self._stats_path(stage), json.dumps(stats))

    # -- claims ---------------------------------------------------------------------------
    def _claims_dir(self, stage: str) -> Path:
        return self.root / "parts" / "claims" / stage

    def claim_batch(self, stage: str, video_ids: Sequence[str], owner: Owner,
                    keep: Callable[[str], bool] | None = None
                    ) -> tuple[Path | None, list[str], int]:
        """Take the videos of ``video_ids`` no live process holds, as one claim file:
        ``(its path or None, the videos taken, how many a live claim held)``.

        Under the stage's lock (a file created with O_EXCL, held for the time of a listing),
        this process reads the live claims (a dead owner's go: same host when its process is
        gone, elsewhere when older than ``owner.lease``), looks again at the manifests (what
        finished since), keeps a video when ``keep(video_id)`` says it is still to do, and
        writes its claim listing them. So two processes on one run directory never hold
        the same video, and a batch of one holds videos no other batch has (tested on a
        local directory; on NFS this relies on the server's exclusive create).
        """
        folder = self._claims_dir(stage)
        folder.mkdir(parents=True, exist_ok=True)
        with claim_lock(folder, owner):
            held = live_claims(folder, owner)
            self._index(stage, refresh=True)
            taken = [v for v in video_ids if v not in held and (keep is None or keep(v))]
            elsewhere = sum(1 for v in video_ids if v in held)
            if not taken:
                return None, [], elsewhere
            self._claims += 1
            path = folder / f"claim-{time.time_ns():020d}-{writer_tag()}-{self._claims}.json"
            write_claim(path, owner, taken)
            return path, taken, elsewhere

    def claim(self, stage: str, video_id: str, owner: Owner) -> Path | None:
        """Claim one video (its claim file, or None when a live process holds it)."""
        return self.claim_batch(stage, [video_id], owner)[0]

    def release_claim(self, path: Path | None) -> None:
        if path is not None:
            path.unlink(missing_ok=True)

    # -- videos ---------------------------------------------------------------------------
    def record_videos(self, items: Iterable[Any]) -> int:
        """Remember which file each video id came from (later stages find videos here);
        returns how many videos the run now has.

        An empty ``video_path`` means "no video file known yet" (a caption run from
        ``--subtitles`` alone); it never erases a path recorded before, so re-running such a
        run keeps the files ``howtocap align --videos`` attached."""
        import pyarrow as pa

        schema = arrow_schema("videos")

        def tables() -> Iterator[Any]:  # one pass over an iterator: items never all held
            cols: tuple[list[str], list[str], list[str]] = ([], [], [])
            for it in items:
                cols[0].append(it.video_id)
                cols[1].append(str(it.video_path or ""))
                cols[2].append(str(it.subtitle_path or ""))
                if len(cols[0]) >= VIDEO_CHUNK:
                    yield pa.table([pa.array(c, pa.string()) for c in cols], schema=schema)
                    for c in cols:
                        c.clear()
            if cols[0]:
                yield pa.table([pa.array(c, pa.string()) for c in cols], schema=schema)

        return self._record_video_tables(tables())

    def record_video_ids(self, ids: Iterable[Any]) -> int:
        """``record_videos`` of ids with no files yet (a text-only run), given as Arrow
        string arrays: a HowTo100M source's 1.2M ids never become Python objects."""
        import pyarrow as pa

        schema = arrow_schema("videos")

        def tables() -> Iterator[Any]:
            for arr in ids:
                empty = pa.repeat(pa.scalar("", pa.string()), len(arr))
                yield pa.table([arr.cast(pa.string()), empty, empty], schema=schema)

        return self._record_video_tables(tables())

    def _record_video_tables(self, tables: Iterable[Any]) -> int:
        """Fold ``tables`` (``videos`` rows, a chunk each) into ``videos.parquet`` with a
        sort (``_fold_videos``); past one chunk, each is sorted into a file of its own and
        the files and the table so far are merged as streams (``_merge_videos``): the
        memory of a chunk, not of every id (1.2M ids held and sorted at once were ~140
        MB)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = arrow_schema("videos")
        chunks: list[Any] = []
        spill = self.spill_dir() / "videos"
        runs: list[Path] = []
        path = self.table_path("videos")
        try:
            for chunk in tables:
                chunks.append(chunk)
                if len(chunks) + len(runs) > 1:  # a second chunk: every chunk to a sorted file
                    with disk_full_as(path):
                        spill.mkdir(parents=True, exist_ok=True)
                        for c in chunks:
                            runs.append(spill / f"{len(runs):06d}.parquet")
                            pq.write_table(_fold_videos(None, c, schema), runs[-1],
                                           row_group_size=VIDEO_STEP)
                    chunks.clear()
            if runs:
                return _merge_videos(path, runs, schema)
        finally:
            if runs:
                import shutil

                shutil.rmtree(spill, ignore_errors=True)
                self.drop_spill()
        old = pq.read_table(path).select(schema.names).cast(schema) if path.exists() \
            else None
        table = _fold_videos(old, pa.concat_tables(chunks) if chunks else schema.empty_table(),
                             schema)
        chunks.clear()  # the table holds the rows: one copy alive
        old = None
        atomic_write(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))
        return table.num_rows

    def attach_videos(self, items: Iterable[Any]) -> tuple[list[str], list[str]]:
        """Record video files for videos this run already has (e.g. captioned from
        ``--subtitles`` alone): ``(ids attached, ids this run does not know)``; unknown ids are
        left out, so a folder holding more videos than the run does not add any."""
        known = set(self.table("videos", ["video_id"])["video_id"])
        items = list(items)
        attach = [it for it in items if it.video_id in known and it.video_path]
        if attach:
            self.record_videos(attach)
        return [it.video_id for it in attach], [it.video_id for it in items
                                                if it.video_id not in known]

    # -- config --------------------------------------------------------------------------
    def write_config(self, stage: str, config: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config" / f"{stage}.json",
                          json.dumps(config, indent=2, default=str))

    def read_config(self, stage: str) -> dict[str, Any] | None:
        path = self.root / "config" / f"{stage}.json"
        return json.loads(path.read_text()) if path.exists() else None


BATCH_CACHE = 4  # batch files a process keeps decoded for ``read_part``
VIDEO_CHUNK = 65_536  # items ``record_videos`` holds as Python strings at a time
VIDEO_STEP = 8_192  # rows of each sorted run ``record_videos`` reads at a time
STATUS_ROWS = 65_536  # rows of status.parquet sorted and written at a time


@dataclass
class _BatchFile:
    """A batch file read once: its Arrow table, each video's row range, and the frame or
    plain columns decoded from it on the first ``read_part`` / ``read_rows``."""

    arrow: Any
    starts: dict[str, tuple[int, int]]
    df: pd.DataFrame | None = None
    cols: dict[str, Any] | None = None


def _video_ranges(arrow: Any) -> dict[str, tuple[int, int]]:
    """Each video's ``[first, end)`` rows in a batch file (grouped by video when written)."""
    if "video_id" not in arrow.column_names or not arrow.num_rows:
        return {}
    ids = np.asarray(arrow.column("video_id").to_numpy(zero_copy_only=False), dtype=object)
    cut = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    bounds = [0, *cut.tolist(), len(ids)]
    return {ids[a]: (a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)}


def _merge_videos(path: Path, runs: Sequence[Path], schema: Any) -> int:
    """``videos.parquet`` as ``_fold_videos`` of the table at ``path`` (if any) and the
    sorted ``runs`` in order, merged as streams (``merge.sorted_steps``): each step holds
    every row of its ids, so folding step by step gives the rows folding all at once does.
    At most ``MERGE_FAN_IN`` streams are open at once: more runs are first merged in levels,
    neighbours together so that later rows still win (memory goes with the streams open:
    1.2M ids are 19 runs, 10M would be 153)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def tables(source: Path, old: bool) -> Iterator[Any]:
        for b in pq.ParquetFile(source).iter_batches(batch_size=VIDEO_STEP,
                                                      columns=schema.names):
            t = pa.Table.from_batches([b]).select(schema.names).cast(schema)
            yield t.append_column("_old", pa.array(np.full(t.num_rows, old)))

    runs = list(runs)
    depth = 0
    while len(runs) >= merging.MERGE_FAN_IN:  # the table so far is one more stream
        depth += 1
        group = merging.level_group(len(runs))
        level = []
        for lo in range(0, len(runs), group):
            out = runs[0].parent / f"level{depth}-{len(level):06d}.parquet"
            with disk_full_as(path), pq.ParquetWriter(out, schema) as w:
                _fold_steps(w, [tables(r, False) for r in runs[lo:lo + group]], schema)
            level.append(out)
        for r in runs:
            r.unlink(missing_ok=True)
        runs = level
    sources = [tables(path, True)] if path.exists() else []
    sources += [tables(r, False) for r in runs]
    rows = [0]

    def write(tmp: str) -> None:
        with pq.ParquetWriter(tmp, schema, write_page_checksum=True) as out:
            rows[0] = _fold_steps(out, sources, schema)

    atomic_write(path, write)
    return rows[0]


def _fold_steps(out: Any, sources: Sequence[Iterator[Any]], schema: Any) -> int:
    """Each step of the sources' k-way merge folded (``_fold_videos``: the ``_old`` rows
    first) and written to ``out`` in row groups of about ``VIDEO_STEP`` rows."""
    import pyarrow as pa

    held: list[Any] = []  # folded steps, written as whole row groups
    n_held = rows = 0
    for parts in merging.sorted_steps(sources):  # the table so far comes first
        both = pa.concat_tables(parts)
        n_old = int(np.count_nonzero(both.column("_old").to_numpy(zero_copy_only=False)))
        both = both.drop_columns(["_old"])
        held.append(_fold_videos(both.slice(0, n_old) if n_old else None,
                                 both.slice(n_old), schema))
        n_held += held[-1].num_rows
        if n_held >= VIDEO_STEP:
            out.write_table(pa.concat_tables(held))
            rows += n_held
            held, n_held = [], 0
    if held:
        out.write_table(pa.concat_tables(held))
        rows += n_held
    return rows


def _fold_videos(old: Any, new: Any, schema: Any) -> Any:
    """``videos.parquet``'s rows: the last row of each id of ``old`` then ``new``, sorted
    by id, a new row's empty path taken from the id's last old row. A stable Arrow sort
    of the ids and numpy over their positions: no Python object per video."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n_old = old.num_rows if old is not None else 0
    both = pa.concat_tables([old, new]) if n_old else new
    if not both.num_rows:
        return both
    order = pc.sort_indices(both.column("video_id")).to_numpy().astype(np.int64)  # stable
    ranked = both.column("video_id").take(pa.array(order)).combine_chunks()
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = pc.not_equal(ranked.slice(1), ranked.slice(0, len(ranked) - 1)) \
        .to_numpy(zero_copy_only=False)
    del ranked
    first = np.flatnonzero(starts)
    last = order[np.append(first[1:] - 1, len(order) - 1)]  # each id's last row, id order
    table = both.take(pa.array(last))
    if n_old:
        old_rows = np.maximum.reduceat(np.where(order < n_old, order, -1), first)
        fill = pa.array((last >= n_old) & (old_rows >= 0))
        cols = {}
        for c in ("video_path", "subtitle_path"):
            mine = pc.fill_null(table.column(c), "")
            theirs = pc.fill_null(both.column(c).take(pa.array(np.maximum(old_rows, 0))), "")
            cols[c] = pc.if_else(pc.and_(fill, pc.equal(mine, "")), theirs, mine)
        table = pa.table([table.column("video_id"), cols["video_path"],
                          cols["subtitle_path"]], schema=schema)
    return table.cast(schema)


def pa_is_number(kind: Any) -> bool:
    """Arrow types whose column slices stay numpy arrays in ``Rows`` (floats, ints, bools)."""
    import pyarrow.types as pat

    return bool(pat.is_floating(kind) or pat.is_integer(kind) or pat.is_boolean(kind))


def _column_values(name: str, col: Any) -> Any:
    """A batch file's column as ``Rows`` holds it: numbers as numpy; strings as a list, one
    Python object per distinct value outside free text (a batch's ``video_id``, ``source``
    and ``config_id`` repeat ~40 times a video: four decoded files held ~40 MB of copies)."""
    import pyarrow as pa

    if pa_is_number(col.type):
        return col.to_numpy()
    if name in FREE_TEXT or col.null_count or not pa.types.is_string(col.type):
        return col.to_pylist()
    enc = col.combine_chunks().dictionary_encode()
    return np.asarray(enc.dictionary.to_pylist(), dtype=object)[
        enc.indices.to_numpy()].tolist()


_NOT_TABLES = {"batches", "status", "claims", "fingerprints", "stats"}


def _write_arrow_batch(table: Any, path: Path) -> None:
    """An Arrow batch table, grouped by video like a frame's (a stable sort keeps each
    video's rows in their order), with page checksums."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if "video_id" in table.column_names and table.num_rows > 1:
        ids = table.column("video_id")
        n = table.num_rows  # sorted already when its videos were (``core.commit_batch``)
        if not pc.all(pc.greater_equal(ids.slice(1), ids.slice(0, n - 1))).as_py():
            table = table.take(pc.sort_indices(table, sort_keys=[("video_id", "ascending")]))
    # statistics only where a reader could use them (nothing reads a batch by its values)
    stats = ["video_id"] if "video_id" in table.column_names else False
    atomic_write(path, lambda tmp: pq.write_table(
        table, tmp, write_page_checksum=True, row_group_size=merging.PART_ROW_GROUP,
        use_dictionary=parquet_dictionary(table.schema), write_statistics=stats))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0
