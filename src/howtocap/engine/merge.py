"""The merged tables (``DIR/<table>.parquet``), rebuilt from a run directory's batches.

``merge`` reads every live file of a table into one frame; ``merge_streaming`` writes the
same rows in the same order without holding the table: a k-way merge by video id over the
batch files (grouped by video when written) and older per-video parts, a record batch of each
at a time, at most ``MERGE_FAN_IN`` files open at once (more are merged in levels first).
Which files and videos are live comes from the run directory (``MergeDir``: ``RunDir``).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from howtocap.atomic import (
    CorruptFile,
    atomic_write,
    atomic_write_parquet,
    corrupt_parquet,
    disk_full_as,
    open_parquet,
)
from howtocap.engine.records import BATCH_PREFIX, last_per_key, manifest_names, short_hashes
from howtocap.hashing import SameHashes
from howtocap.schemas import SCHEMAS, arrow_schema, conform, empty_table, parquet_dictionary

STREAM_ROWS = 2048  # rows of a batch file ``merge_streaming`` decodes at a time
# files a merge reads at once (more: merged in levels). Memory goes with the files open, so
# a cap that a run's batches reach early keeps it flat: at 48, 1,200 batches merged 35 at a
# time peaked ~50 MB above 100 batches merged 10 at a time; at 16 both take ~10 (1,200:
# three levels, 13% more time)
MERGE_FAN_IN = 16
# rows of a row group in batch files: a stream decodes a whole row group of its file (100
# open files of align scores: 563 MB of Arrow memory with a row group per batch, 162 MB with
# these), so memory goes with the fan-in, not with the rows of a batch
PART_ROW_GROUP = 4096
# rows a merge sorts and writes at a time (a row group of the merged table): 100k videos'
# scores merged at 65,536 peaked ~30 MB higher
MERGE_CHUNK = 16_384
# a merge's level files (scratch, read back once, in order) are Arrow IPC streams of
# ``STREAM_ROWS``-row record batches, lz4-compressed: no footer, and a stream decodes one
# record batch. As Parquet, the last level's footers held every row group of the table
# (a driver's 2.4M-video subtitles: 96M rows) and a stream decoded a whole row group: the
# closing merge was the run's peak. A subtitle row on disk: lz4 52 bytes (Parquet 35, zstd
# 33, none 119); 9.6M rows merged in 10.4 s (Parquet 12.7 s, zstd 14.3 s, none 8.4 s)
LEVEL_SUFFIX = ".arrows"
LEVEL_COMPRESSION = "lz4"


class MergeDir(Protocol):
    """What the merge asks of the run directory (``RunDir``)."""

    @property
    def cache_dir(self) -> Path: ...

    def table_path(self, name: str) -> Path: ...

    def part_dir(self, table: str) -> Path: ...

    def batch_part_path(self, table: str, batch: str) -> Path: ...

    def batch_dir(self, stage: str) -> Path: ...

    def spill_dir(self) -> Path: ...

    def drop_spill(self) -> None: ...

    def writers(self, table: str, cached: bool = False) -> list[str]: ...

    def newest(self, stage: str, columns: Sequence[str] = ("status",),
               forgotten: bool = False) -> Any: ...

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None: ...


def _sources(rd: MergeDir, table: str) -> Iterator[tuple[Path, Any]]:
    """The files holding ``table``'s live rows, each with the rows to keep: None (all of
    it) or ``("not", ids)``, the videos to leave out. Per batch: its videos but those whose
    record in that batch is not ``ok`` or not their newest (``_left_out``: a few percent,
    not a list of every live id); per-video parts of older runs unless a manifest has named
    their video since."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for st in rd.writers(table):
        for name, out in _left_out(rd, st):
            yield rd.batch_part_path(table, name), ("not", out) if len(out) else None
    folder = rd.part_dir(table)
    legacy = sorted(p for p in folder.glob("*.parquet")
                    if not p.name.startswith(BATCH_PREFIX)) if folder.is_dir() else []
    if legacy:  # an older run's layout: every id a manifest names, read once
        named = []
        for st in rd.writers(table):
            t = rd.newest(st, ("status",), forgotten=True)  # a forgotten video is named
            code = t.column("batch").combine_chunks().indices.to_numpy(zero_copy_only=False)
            named.append(t.column("video_id").combine_chunks().filter(pa.array(code > 0)))
        skip = pc.unique(pa.concat_arrays(named)) if named else pa.array([], pa.string())
        for p in legacy:
            yield p, ("not", skip) if len(skip) else None


MANIFESTS_AT_ONCE = 64  # manifests decoded at a time by ``_left_out`` and ``_ids_back``


def _left_out(rd: MergeDir, stage: str) -> Iterator[tuple[str, Any]]:
    """Per batch of ``stage`` (in batch order) with a live video: the ids of its videos
    whose record there is not live (not ``ok``, or a later record of the video exists).

    A video's records are told apart by the 32-bit hash of its id, not its id (the ids of
    every record, sorted, were most of the merge's memory), in parts written to this
    process's spill folder past a few hundred thousand records (``SameHashes``: held whole,
    they grew the merge ~20 MB a million records); records of equal hash (one video's, or
    ~170 pairs of others among 1.2M ids) are compared by their ids, read back from their
    manifests."""
    import pyarrow as pa
    import pyarrow.compute as pc

    folder = rd.batch_dir(stage)
    names = [n[:-len(".parquet")] for n in manifest_names(folder)]
    paths = [folder / f"{n}.parquet" for n in names]
    if not paths:
        return
    bad: dict[int, list[str]] = {}  # per manifest: its ids whose record is not ok
    not_ok = []  # numbers of those records (a few percent: failures, forgotten videos)
    sizes = np.zeros(len(names), np.int64)
    same = SameHashes(rd.spill_dir())
    try:
        with disk_full_as(rd.spill_dir()):
            for k, t in _each_manifest(paths, range(len(paths)), ["video_id", "status"]):
                if isinstance(t, CorruptFile):
                    rd.drop_corrupt(paths[k], t)  # its videos are redone
                    continue
                if t is None or not t.num_rows:
                    continue
                ids = t.column("video_id").to_pylist()
                ok = pc.equal(t.column("status"), "ok").to_numpy(zero_copy_only=False)
                if not ok.all():
                    bad[k] = [v for v, good in zip(ids, ok.tolist(), strict=True) if not good]
                    not_ok.append(same.items + np.flatnonzero(~ok))
                same.add(short_hashes(ids))
                sizes[k] = len(ids)
            if not same.items:
                return
            hs, rec = same.pairs()
    finally:
        same.close()
        rd.drop_spill()
    first = np.concatenate([[0], np.cumsum(sizes)])  # each manifest's first record
    live: dict[int, set[str]] = {}  # per manifest: ids of equal hash live there
    if len(rec):  # records sharing a hash, told apart by their ids, read back
        code = np.searchsorted(first, rec, "right") - 1
        ids = [v if v is not None else f"\0gone{r}"  # unreadable: an id of its own
               for v, r in zip(_ids_back(rd, paths, code, rec - first[code]), rec.tolist(),
                               strict=True)]
        good = ~np.isin(rec, np.concatenate(not_ok)) if not_ok else np.ones(len(rec), bool)
        t = pa.table({"h": hs.astype(np.int64), "id": pa.array(ids, pa.string()), "at": rec,
                      "code": code, "good": good})
        t = t.sort_by([("h", "ascending"), ("id", "ascending"), ("at", "ascending")])
        n = t.num_rows
        later = np.append((np.diff(t.column("h").to_numpy()) == 0) & pc.equal(
            t.column("id").slice(1), t.column("id").slice(0, n - 1)).to_numpy(
            zero_copy_only=False), False)  # a later record of the same id follows
        for k, vid, old, ok in zip(t.column("code").to_pylist(), t.column("id").to_pylist(),
                                   later.tolist(), t.column("good").to_pylist(), strict=True):
            if old:
                bad.setdefault(k, []).append(vid)
            elif ok:
                live.setdefault(k, set()).add(vid)
    for k, name in enumerate(names):
        mine = live.get(k, set())
        out = [v for v in dict.fromkeys(bad.get(k, [])) if v not in mine]
        if sizes[k] > len(out):
            yield name, pa.array(out, pa.string())


def _ids_back(rd: MergeDir, paths: Sequence[Path], code: Any, row: Any) -> list[str | None]:
    """The id of each record (manifest ``code``, ``row``), read back (None: unreadable)."""
    import pyarrow as pa

    out: list[str | None] = [None] * len(code)
    for k, t in _each_manifest(paths, np.unique(code).tolist(), ["video_id"]):
        if t is None or isinstance(t, CorruptFile):
            continue
        sel = np.flatnonzero(code == k)
        got = t.column("video_id").take(pa.array(row[sel])).to_pylist()
        for i, v in zip(sel.tolist(), got, strict=True):
            out[i] = v
    return out


def _each_manifest(paths: Sequence[Path], ks: Sequence[int], cols: Sequence[str]
                   ) -> Iterator[tuple[int, Any]]:
    """``(k, what read_manifests gives for paths[k])`` for each of ``ks`` in turn,
    ``MANIFESTS_AT_ONCE`` manifests decoded at a time."""
    from howtocap.engine.records import read_manifests

    for lo in range(0, len(ks), MANIFESTS_AT_ONCE):
        part = ks[lo:lo + MANIFESTS_AT_ONCE]
        yield from zip(part, read_manifests([paths[k] for k in part], cols), strict=True)


def _read_source(rd: MergeDir, path: Path, keep: Any) -> Any:
    """A source's live rows as an Arrow table, or None (missing; corrupt: dropped)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path, page_checksum_verification=True)
    except FileNotFoundError:
        return None
    except (pa.ArrowException, OSError) as exc:
        rd.drop_corrupt(path, corrupt_parquet(path, exc, 80))
        return None
    # a file of no rows is skipped: its text columns have no Arrow type of their own
    if keep is None or "video_id" not in t.column_names or not t.num_rows:
        return t
    if isinstance(keep, tuple):
        return t.filter(pc.invert(pc.is_in(t["video_id"], value_set=keep[1])))
    return t.filter(pc.is_in(t["video_id"], value_set=keep))


def merge(rd: MergeDir, table: str) -> pd.DataFrame:
    """Rebuild ``DIR/<table>.parquet`` from its batches and parts (sorted, so runs compare
    equal). A corrupt file is dropped with a warning (and listed in ``corrupted``)."""
    frames = []
    for path, keep in _sources(rd, table):
        t = _read_source(rd, path, keep)
        if t is not None and t.num_rows:
            frames.append(t.to_pandas())
    if frames:
        df = pd.concat(frames, ignore_index=True)
    else:
        df = empty_table(table) if table in SCHEMAS else pd.DataFrame()
    if table in SCHEMAS:
        df = conform(df, table)
    if len(df) and {"video_id", "start"} <= set(df.columns):
        keys = [k for k in ("video_id", "start", "end", "text") if k in df.columns]
        df = df.sort_values(keys, kind="stable").reset_index(drop=True)
    atomic_write_parquet(df, rd.table_path(table))
    return df


def merge_streaming(rd: MergeDir, table: str, batch_rows: int | None = None) -> int:
    """``merge`` without holding the table in memory: the same rows in the same order,
    written ``batch_rows`` at a time (a HowTo100M-size run has millions of subtitle rows).

    Batch files are grouped by video id (sorted) when written, and a per-video part holds
    one video, so a k-way merge by video id over them (a record batch of each file at a
    time), each written chunk holding whole videos sorted by start, end, text, is
    ``merge``'s order. At most ``MERGE_FAN_IN`` files are open at once: with more, groups
    of that many are first merged into sorted files under ``cache/`` (removed after), and
    those merged again, so memory does not grow with the number of batches (1,200 per
    table at HowTo100M). Returns the row count. A table it cannot order that way (no
    video_id/start) goes to ``merge``.
    """
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = SCHEMAS.get(table, {})
    if not {"video_id", "start"} <= set(schema):
        return len(merge(rd, table))
    batch_rows = batch_rows or MERGE_CHUNK
    sources: list[tuple[Path, Any, bool]] = []  # (file, ids to keep, grouped by video)
    extras: dict[str, pa.DataType] = {}
    for path, keep in _sources(rd, table):
        try:
            md = pq.read_metadata(path)
        except FileNotFoundError:
            continue
        except (pa.ArrowException, OSError) as exc:
            rd.drop_corrupt(path, corrupt_parquet(path, exc, 80))
            continue
        if md.num_rows == 0:
            continue
        for f in md.schema.to_arrow_schema():
            if f.name not in schema and f.name not in extras and not pa.types.is_null(f.type):
                extras[f.name] = f.type
        sources.append((path, keep, path.name.startswith(BATCH_PREFIX)))
    arrow = {"str": pa.string(), "float64": pa.float64(), "int64": pa.int64(),
             "bool": pa.bool_()}
    target = pa.schema([(c, arrow[t]) for c, t in schema.items()] + list(extras.items()))
    merged = 0
    scratch: Path | None = None
    try:
        while len(sources) > MERGE_FAN_IN:  # a level of merges into sorted files
            level = []
            group = level_group(len(sources))
            with disk_full_as(rd.table_path(table)):  # its scratch files: a full disk too
                if scratch is None:
                    rd.cache_dir.mkdir(parents=True, exist_ok=True)
                    scratch = Path(tempfile.mkdtemp(prefix=f".merge-{table}-",
                                                    dir=rd.cache_dir))
                for lo in range(0, len(sources), group):
                    merged += 1
                    out = scratch / f"level-{merged:06d}{LEVEL_SUFFIX}"
                    _merge_into(rd, str(out), sources[lo:lo + group], table, target,
                                extras, batch_rows, level=True)
                    level.append((out, None, True))
            for path, _, _ in sources:
                if scratch in path.parents:
                    path.unlink(missing_ok=True)  # merged into the next level
            sources = level
        total = [0]

        def write(tmp: str) -> None:
            total[0] = _merge_into(rd, tmp, sources, table, target, extras, batch_rows)

        atomic_write(rd.table_path(table), write)
        return total[0]
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def level_group(files: int) -> int:
    """How many of ``files`` sorted files a level of a merge takes together: as few levels
    as ``MERGE_FAN_IN`` allows, groups as small as they allow (memory goes with the files
    open at once): 1,200 batches -> 110 files of 11 -> 10 -> 1."""
    levels = math.ceil(math.log(files) / math.log(MERGE_FAN_IN) - 1e-9)
    return math.ceil(files ** (1 / levels) - 1e-9)


def _merge_into(rd: MergeDir, sink: Any, sources: Sequence[tuple[Path, Any, bool]],
                table: str, target: Any, extras: dict[str, Any], batch_rows: int,
                level: bool = False) -> int:
    """k-way merge of ``sources`` (each in video order) into one Parquet file at ``sink``
    (``level``: a level's IPC stream), chunks of whole videos sorted by start, end, text,
    conformed to ``target``.

    Merged a record batch at a time, not a video at a time: every video below the smallest
    "last video" of the streams' pending rows is complete, so those rows are taken from each
    stream as one slice (a few Arrow objects per stream and step). A slice per video (what
    this did before) is a C++ table of its own, a few kB outside Arrow's pool: a chunk of
    captions (~2.5 rows a video) held ~25k of them, ~150 MB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = [k for k in ("video_id", "start", "end", "text") if k in SCHEMAS[table]]
    streams = [_Pending(_chunks(rd, path, keep, grouped)) for path, keep, grouped in sources]
    writer: Any = None
    batch: list[Any] = []
    total = rows = 0

    meta = arrow_schema(table).metadata if table in SCHEMAS and not extras else None

    def flush() -> None:
        nonlocal writer, total, meta
        out = _sorted_as_is(batch, target, keys, meta) if meta is not None else None
        if out is None:  # other columns or types, or nulls: conform through pandas
            if batch:
                df = pa.concat_tables(batch, promote_options="permissive").to_pandas()
            else:
                df = empty_table(table)
            for c in extras:
                if c not in df.columns:
                    df[c] = pd.Series([None] * len(df), dtype=object)
            df = conform(df, table)[target.names].sort_values(keys, kind="stable")
            out = pa.Table.from_pandas(df, preserve_index=False)
            out = out.cast(target.with_metadata(out.schema.metadata))
        if writer is None:
            writer = _level_writer(sink, out.schema) if level else pq.ParquetWriter(
                sink, out.schema, use_dictionary=parquet_dictionary(out.schema))
        if meta is None and extras:  # the next chunks as this one, sorted in Arrow (a chunk
            # through pandas held ~100 MB more at 65k rows of scores)
            meta = out.schema.metadata
        if level:
            writer.write_table(out, max_chunksize=STREAM_ROWS)
        else:
            writer.write_table(out)
        total += len(out)

    try:
        for parts in _kway(streams):
            batch += parts
            rows += sum(p.num_rows for p in parts)
            if rows >= batch_rows:  # whole videos only: every row taken is below a bound
                flush()
                batch, rows = [], 0
        if batch or writer is None:
            flush()
    finally:
        if writer is not None:
            writer.close()
        for stream in streams:
            stream.close()
    return total


def _level_writer(sink: Any, schema: Any, compression: str | None = LEVEL_COMPRESSION
                  ) -> Any:
    """A level file's writer: an IPC stream (``LEVEL_SUFFIX``), read back by ``_level``."""
    import pyarrow as pa

    return pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(
        compression=compression))


def _level(path: Path) -> Iterator[Any]:
    """A level file's rows, a record batch at a time, as tables."""
    import pyarrow as pa

    with pa.OSFile(str(path)) as f, pa.ipc.open_stream(f) as reader:
        for rb in reader:
            yield pa.Table.from_batches([rb])


def _kway(streams: Sequence[_Pending]) -> Iterator[list[Any]]:
    """The streams' rows merged by video id, as steps: each a list of slices (in stream
    order) holding every row of the videos below the smallest last video pending in a
    stream still reading; each video's rows are all in one step."""
    live = [s for s in streams if s.fill()]
    while live:
        reading = [s for s in live if not s.exhausted]
        bound = min(s.last for s in reading) if reading else None
        parts = [p for p in (s.take_below(bound) for s in live) if p is not None]
        if parts:
            yield parts
        for s in reading:
            if s.last == bound:  # its last video may go on in its next record batch
                s.fill()
        live = [s for s in live if s.rows]


def sorted_steps(sources: Sequence[Iterator[Any]]) -> Iterator[list[Any]]:
    """``_kway`` over any sorted Arrow tables (each source an iterator of them, in video id
    order): ``record_videos`` merges its sorted runs of ids with it."""
    return _kway([_Pending(s) for s in sources])


def newest_sorted(rd: MergeDir, stage: str, paths: Sequence[Path], legacy: Any,
                  cols: Sequence[str], chunk_rows: int) -> Iterator[Any]:
    """Every video's newest record of ``stage`` (forgotten ones left out), sorted by video
    id, ``chunk_rows`` rows at a time (the last chunk fewer): a k-way merge of its manifests
    (``paths`` in commit order, ``legacy``: an
    older run's per-video records, before them all), the last stream holding a video
    winning. At most ``MERGE_FAN_IN`` manifests are read at once (more: merged in levels
    first, forgotten rows kept so they still take older results back), so memory does not
    grow with the number of videos (``newest`` holds every video's columns at once).
    A manifest (a batch's records, in commit order) is small: read whole and sorted."""
    import tempfile

    import pyarrow as pa
    import pyarrow.compute as pc

    from howtocap.engine.records import FORGOTTEN, plain_record_table, read_manifest_table

    cols = ["video_id", "status", *[c for c in cols if c not in ("video_id", "status")]]
    schema = plain_record_table(pa.table({c: pa.array([], pa.string()) for c in cols}),
                                cols).schema

    def manifest(path: Path) -> Iterator[Any]:
        t = read_manifest_table(path, cols)
        if isinstance(t, CorruptFile):
            rd.drop_corrupt(path, t)  # its videos are redone
        elif t is not None and t.num_rows:  # in commit order: sorted (stable) by video
            t = plain_record_table(t, cols)
            yield t.take(pc.sort_indices(t.column("video_id")))

    def table(t: Any) -> Iterator[Any]:
        yield t

    def newest_of(parts: list[Any], keep_forgotten: bool) -> Any:
        t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        t = t.take(pa.array(last_per_key(t.column("video_id"))))
        if not keep_forgotten:
            t = t.filter(pc.not_equal(t.column("status"), FORGOTTEN))
        return t.take(pc.sort_indices(t.column("video_id")))

    sources: list[Callable[[], Iterator[Any]]] = []
    if legacy is not None and legacy.num_rows:
        first = plain_record_table(legacy, cols)
        first = first.take(pc.sort_indices(first.column("video_id")))
        sources.append(lambda t=first: table(t))
    sources += [lambda p=p: manifest(p) for p in paths]
    scratch: Path | None = None
    try:
        while len(sources) > MERGE_FAN_IN:  # a level of merges into sorted files
            if scratch is None:
                rd.cache_dir.mkdir(parents=True, exist_ok=True)
                scratch = Path(tempfile.mkdtemp(prefix=f".newest-{stage}-", dir=rd.cache_dir))
            group = level_group(len(sources))
            done: list[Callable[[], Iterator[Any]]] = []
            for lo in range(0, len(sources), group):
                out = scratch / f"level-{len(list(scratch.iterdir())):06d}{LEVEL_SUFFIX}"
                streams = [_Pending(src()) for src in sources[lo:lo + group]]
                try:
                    # status records: small, many columns (lz4 a column: 2.4M records'
                    # status table 7.3 -> 9.0 s)
                    with _level_writer(str(out), schema, None) as writer:
                        steps: list[Any] = []  # a merge step's few rows: batched to write
                        pending = 0
                        for parts in _kway(streams):
                            steps.append(newest_of(parts, True))
                            pending += steps[-1].num_rows
                            if pending >= STREAM_ROWS:
                                writer.write_table(pa.concat_tables(steps),
                                                   max_chunksize=STREAM_ROWS)
                                steps, pending = [], 0
                        if steps:
                            writer.write_table(pa.concat_tables(steps))
                finally:
                    for st in streams:
                        st.close()
                done.append(lambda p=out: _level(p))
            sources = done
        streams = [_Pending(src()) for src in sources]
        held: list[Any] = []
        rows = 0
        try:
            for parts in _kway(streams):
                t = newest_of(parts, False)
                held.append(t)
                rows += t.num_rows
                while rows >= chunk_rows:  # cut at multiples of ``chunk_rows``
                    whole = pa.concat_tables(held)
                    yield whole.slice(0, chunk_rows)
                    rest = whole.slice(chunk_rows)
                    held, rows = [rest], rest.num_rows
            if rows:
                yield pa.concat_tables(held)
        finally:
            for st in streams:
                st.close()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


class _Pending:
    """The rows of one merge source read but not yet merged, in video order, with their
    ids as a numpy array to cut them by a bound (``take_below``)."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self.chunks = chunks
        self.table: Any = None
        self.ids: Any = np.zeros(0, dtype=object)
        self.exhausted = False

    @property
    def rows(self) -> int:
        return len(self.ids)

    @property
    def last(self) -> str:
        return self.ids[-1]

    def fill(self) -> bool:
        """Append the source's next record batch (``exhausted`` when there is none); True
        while rows are pending."""
        import pyarrow as pa

        for t in self.chunks:
            ids = t["video_id"].to_numpy(zero_copy_only=False)
            if self.table is None or not len(self.ids):
                self.table, self.ids = t, ids
            else:
                self.table = pa.concat_tables([self.table, t])
                self.ids = np.concatenate([self.ids, ids])
            return True
        self.exhausted = True
        self.chunks.close()
        return bool(len(self.ids))

    def take_below(self, bound: str | None) -> Any:
        """The pending rows of videos before ``bound`` (all when None), or None."""
        k = len(self.ids) if bound is None else int(np.searchsorted(self.ids, bound, "left"))
        if not k:
            return None
        part = self.table.slice(0, k)
        self.table, self.ids = self.table.slice(k), self.ids[k:]
        return part

    def close(self) -> None:
        self.chunks.close()


def _chunks(rd: MergeDir, path: Path, keep: Any, grouped: bool = True) -> Iterator[Any]:
    """A file's live rows in video order as Arrow tables, a record batch read at a time
    (``grouped``: its rows are grouped by video, sorted; else a per-video part, read whole
    and sorted by video if it holds several)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if path.name.endswith(LEVEL_SUFFIX):  # a level of this merge: keeps every row
        yield from _level(path)
        return
    if not grouped:  # a per-video part: one small table
        t = _read_source(rd, path, keep)
        if t is not None and t.num_rows:
            if pc.count_distinct(t["video_id"]).as_py() > 1:  # not a per-video part after all
                t = t.take(pc.sort_indices(t, sort_keys=[("video_id", "ascending")]))
            yield t
        return
    try:
        for rb in open_parquet(path).iter_batches(batch_size=STREAM_ROWS):
            t = pa.Table.from_batches([rb])
            if keep is not None:  # ("not", ids): those videos left out
                t = t.filter(pc.invert(pc.is_in(t["video_id"], value_set=keep[1])))
            if t.num_rows:
                yield t
    except FileNotFoundError:
        return
    except (pa.ArrowException, OSError) as exc:
        rd.drop_corrupt(path, CorruptFile(f"{path}: corrupt Parquet part "
                                            f"({' '.join(str(exc).split())[:80]})"))


def _sorted_as_is(parts: list[Any], target: Any, keys: list[str], meta: Any) -> Any:
    """A merge chunk sorted by ``keys`` in Arrow (a stable sort, the order pandas gives),
    when its parts already have ``target``'s columns and types and no nulls (what batch files
    and merge levels hold), so ``conform`` has nothing to change; else None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not parts or any(not p.schema.equals(target, check_metadata=False) for p in parts):
        return None
    t = pa.concat_tables(parts).combine_chunks()
    if any(col.null_count for col in t.columns):
        return None
    t = t.take(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in keys]))
    return t.replace_schema_metadata(meta)
