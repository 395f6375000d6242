"""``howtocap status DIR``: what a run did, what failed and why, and how fast each stage ran.

Read-only: it reads the batch manifests (and an older run's per-video status records), the
stage fingerprints and the per-stage totals ``run_stage`` keeps (wall time and the stages'
counts), never the parts; only the six columns it counts, as Arrow columns, never one object
per video. A stage whose records fit in one bucket (``STATUS_BUCKET_ROWS``, counted from the
manifests' footers) is folded in memory (``RunDir.newest``); a larger one is first routed, a
bounded group of manifests at a time, to hash buckets on disk (scratch files under the system
temp dir, removed after) and each bucket folded alone: its memory is a bucket's, whatever the
number of videos (1.2M videos: 19 buckets a stage, ~3.4 s, as before). Which stages exist, in
which order, and which stage feeds which comes from the ``StageGraph`` the caller gives
(``pipeline.run.run_status``: every step's, in pipeline order).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.atomic import CorruptFile, dead_here, disk_full_as, writer_tag
from howtocap.engine.graph import StageGraph
from howtocap.engine.records import (
    FORGOTTEN,
    MANIFEST_THREADS,
    last_per_key,
    manifest_names,
    read_manifests,
    short_hashes,
)
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import CAUSES
from howtocap.errors import InputError

EXAMPLES = 3  # video ids shown per failure cause
# a stage's records folded in memory at once; a stage with more is split into hash buckets of
# about this many rows on disk, folded one by one: ``howtocap status`` peaks at ~176 MB at 1.2M
# and at 2.4M videos (19 and 38 buckets a stage; 167 MB at 100k); 131,072 a bucket: ~187 MB
STATUS_BUCKET_ROWS = 65_536
FILES_SPARE = 64  # open files left to the rest of the process while buckets are written
SCRATCH_PREFIX = "howtocap-status-"  # ends .<host>~<pid>: a killed process's is swept
ROUTE_ROWS = 32_768  # rows of manifests read (and routed) at once
COUNTED = ("video_id", "status", "cause", "attempts", "warnings", "seconds")


def _stages(rd: RunDir, order: list[str]) -> list[str]:
    found = rd.stages_with_results()
    fp_dir = rd.fingerprint_path("x").parent
    if fp_dir.is_dir():
        found |= {p.stem for p in fp_dir.glob("*.json")}
    return [s for s in order if s in found] + sorted(found - set(order))


def _throughput(stats: dict[str, float], rates: Mapping[str, str]) -> dict[str, float | None]:
    wall = stats.get("wall_seconds", 0.0)

    def rate(key: str) -> float | None:
        return round(stats[key] / wall, 4) if wall > 0 and key in stats else None

    stats = {**stats, "processed": stats.get("videos", 0.0) + stats.get("failed", 0.0)}
    # done or failed: what the stage got through
    return {"videos_per_s": rate("processed"), **{out: rate(m) for out, m in rates.items()}}


def status_of(run_dir: str | Path, graph: StageGraph,
              rates: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per stage: done / failed / pending, failures by cause with example ids, attempts,
    wall time and throughput (``videos_per_s``, and per ``rates`` entry ``name: metric`` the
    stages' summed metric per wall second, for every stage: None where it has none). Plain
    data (the CLI prints it or dumps it as JSON)."""
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "not a run directory")
    rd = RunDir(root, create=False)
    n_videos = _count_videos(rd)
    stages = _stages(rd, graph.names)
    if not stages and not n_videos:
        raise InputError(root, "not a howtocap run directory (no videos.parquet, no status)")
    n_videos = n_videos or 0
    # one stage (and one bucket of it) at a time: its counts are kept, its table is not
    counted = {st: _count_stage(rd, st) for st in stages}
    out: list[dict[str, Any]] = []
    for stage, c in counted.items():
        done, failed = c["done"], c["failed"]
        # which videos the stage could still do: those the stage whose table it reads did not
        # fail, when that one sees every video (the same command runs both); else those it
        # finished (a later command runs on what is done)
        feeder = graph.feeder(stage)
        if feeder in counted and graph.is_source(feeder):
            total = n_videos - counted[feeder]["failed"]
        elif feeder in counted:
            total = counted[feeder]["done"]
        else:
            total = max(n_videos, done + failed)
        stats = rd.read_stats(stage)
        fp = rd.read_fingerprint(stage)
        out.append({
            "stage": stage, "done": done, "failed": failed,
            "pending": max(0, total - done - failed), "warned": c["warned"],
            "failures": c["failures"], "failed_attempts": c["failed_attempts"],
            "wall_seconds": round(stats.get("wall_seconds", 0.0), 3),
            "video_seconds": c["video_seconds"],
            "throughput": _throughput(stats, rates or {}),
            "config_id": fp["config_id"] if fp else None,
        })
    return {"run_dir": str(root), "videos": n_videos, "stages": out}


def _count_stage(rd: RunDir, stage: str) -> dict[str, Any]:
    """``_count`` of the stage's newest records, its scratch files gone when it returns."""
    with _newest_parts(rd, stage) as parts:
        return _count(parts)


def _count(parts: Iterable[Any]) -> dict[str, Any]:
    """One stage's counts from its newest records, given as Arrow tables of disjoint videos
    (the whole stage, or a hash bucket each, read as they are counted): done, failed,
    warned, failures by cause with the overall first example ids, attempts of the failed,
    summed seconds. Every table's seconds go through one ``math.fsum``: exact, so the sum
    does not depend on how the videos were split or ordered."""
    import pyarrow.compute as pc

    n = {"done": 0, "failed": 0, "warned": 0}
    causes: dict[str, dict[str, Any]] = {}
    attempts: Counter[int] = Counter()

    def seconds() -> Iterator[list[float]]:
        for recs in parts:
            ok = pc.equal(recs.column("status"), "ok").to_numpy(zero_copy_only=False)
            bad = recs.filter(~ok).select(["video_id", "cause", "attempts"])
            for c, f in _failures(bad).items():  # only the failed rows leave Arrow
                have = causes.setdefault(c, {"count": 0, "examples": []})
                have["count"] += f["count"]
                have["examples"] = sorted(have["examples"] + f["examples"])[:EXAMPLES]
            attempts.update(int(a) for a in bad.column("attempts").to_numpy())
            n["done"] += int(ok.sum())
            n["failed"] += int(len(ok) - ok.sum())
            n["warned"] += int(np.count_nonzero(ok & (recs.column("warnings").to_numpy() > 0)))
            secs = recs.column("seconds").fill_null(0.0).to_numpy().tolist()
            del recs, ok, bad  # not held while the next bucket is read
            yield secs

    total = math.fsum(itertools.chain.from_iterable(seconds()))
    return {**n,
            "failures": {c: causes[c] for c in (*CAUSES, *sorted(set(causes) - set(CAUSES)))
                         if c in causes},
            "failed_attempts": {str(k): v for k, v in sorted(attempts.items())},
            "video_seconds": round(total, 3)}


@contextlib.contextmanager
def _newest_parts(rd: RunDir, stage: str) -> Iterator[Iterable[Any]]:
    """The newest record of every video of ``stage`` (``COUNTED``; forgotten ones left out)
    as Arrow tables of disjoint videos: ``rd.newest`` whole when the stage's rows fit in one
    bucket, else one table per hash bucket, each read and folded when asked for (scratch
    files in a folder of the system temp dir, removed on the way out: status writes nothing
    into the run directory)."""
    folder = rd.batch_dir(stage)
    paths = [folder / n for n in manifest_names(folder)]
    rows = _footer_rows(paths)
    legacy = rd.status_dir / stage  # an older run's records: a JSON file a video
    total = sum(rows) + (sum(1 for _ in legacy.glob("*.json")) if legacy.is_dir() else 0)
    if total <= STATUS_BUCKET_ROWS:
        yield [rd.newest(stage, COUNTED)]
        return
    with disk_full_as(Path(tempfile.gettempdir())):
        _sweep_dead(Path(tempfile.gettempdir()))
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, suffix=f".{writer_tag()}"))
    try:
        with disk_full_as(scratch):
            files = _route(_sources(rd, stage, paths, rows), bucket_count(total), scratch)
        yield (_fold(f) for f in files)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def bucket_count(total: int) -> int:
    """Buckets for a stage of ``total`` records: one a ``STATUS_BUCKET_ROWS``, each an open
    file while records are routed, so at most what the open-file limit leaves (its soft
    limit raised to the hard one first; past that, buckets hold more records: memory grows,
    the answer does not change). 1,024 open files by default would end at ~60M records."""
    want = -(-total // STATUS_BUCKET_ROWS)
    try:
        import resource
    except ImportError:  # not POSIX: the default limits of other systems are larger
        return want
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = want + FILES_SPARE
    if soft != resource.RLIM_INFINITY and need > soft:
        up = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):  # not allowed: the soft limit stays
            resource.setrlimit(resource.RLIMIT_NOFILE, (up, hard))
            soft = up
    if soft == resource.RLIM_INFINITY:
        return want
    return max(1, min(want, soft - FILES_SPARE))


def _sweep_dead(tmp: Path) -> None:
    """Remove the bucket folders of this host's ``status`` processes that were killed (a
    SIGKILL skips the ``finally`` that removes them)."""
    for d in tmp.glob(f"{SCRATCH_PREFIX}*"):
        if dead_here(d.name.rpartition(".")[2]):
            shutil.rmtree(d, ignore_errors=True)


def _footer_rows(paths: Sequence[Path]) -> list[int]:
    """Each manifest's rows from its footer (0 when unreadable: the read drops it)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq

    def one(path: Path) -> int:
        try:
            return int(pq.read_metadata(path).num_rows)
        except (pa.ArrowException, OSError):
            return 0

    if len(paths) < 8:
        return [one(p) for p in paths]
    out: list[int] = []
    with ThreadPoolExecutor(MANIFEST_THREADS) as pool:  # a slice at a time: a future per
        for lo in range(0, len(paths), 256):  # manifest at once was ~2 KB a manifest kept
            out += pool.map(one, paths[lo:lo + 256])
    return out


def _sources(rd: RunDir, stage: str, paths: Sequence[Path], rows: Sequence[int]
             ) -> Iterator[Any]:
    """Every record of ``stage`` in commit order (an older run's per-video records first,
    then the manifests in name order) as Arrow tables of ``COUNTED`` (status and cause
    dictionary-encoded, as ``read_manifests`` gives them: a few bytes a row), a group of
    manifests of about ``ROUTE_ROWS`` rows each: memory for a group, not the stage. A
    corrupt manifest is dropped as ``rd.newest`` drops it (its videos are redone)."""
    import pyarrow as pa

    old = rd.legacy_record_table(stage, COUNTED)  # the same records rd.newest reads
    if old is not None:
        for lo in range(0, old.num_rows, ROUTE_ROWS):
            yield old.slice(lo, ROUTE_ROWS)
        del old
    lo = 0
    while lo < len(paths):
        hi, n = lo + 1, rows[lo]
        while hi < len(paths) and n + rows[hi] <= ROUTE_ROWS:
            n += rows[hi]
            hi += 1
        tables = []
        for path, got in zip(paths[lo:hi], read_manifests(paths[lo:hi], COUNTED), strict=True):
            if isinstance(got, CorruptFile):
                rd.drop_corrupt(path, got)
            elif got is not None and got.num_rows:
                tables.append(got)
        lo, group = hi, pa.concat_tables(tables) if tables else None
        del tables, got  # not kept while the group is routed
        if group is not None:
            yield group


def _route(sources: Iterable[Any], buckets: int, scratch: Path) -> list[Path]:
    """Each record into the bucket file of its id's hash (Arrow IPC streams in ``scratch``),
    in the order read: a bucket holds every record of its videos in commit order. Returns
    the files written."""
    import pyarrow as pa

    files = [scratch / f"bucket-{k:05d}.arrow" for k in range(buckets)]
    writers: list[Any] = [None] * buckets
    with contextlib.ExitStack() as stack:
        for t in sources:
            b = short_hashes(t.column("video_id").to_pylist()) % np.uint32(buckets)
            t = t.take(pa.array(np.argsort(b, kind="stable")))  # stable: in commit order
            sizes = np.bincount(b, minlength=buckets)
            starts = (np.cumsum(sizes) - sizes).tolist()
            for k in np.flatnonzero(sizes).tolist():
                if writers[k] is None:
                    writers[k] = stack.enter_context(pa.ipc.new_stream(str(files[k]),
                                                                        t.schema))
                writers[k].write_table(t.slice(starts[k], int(sizes[k])))
    return [f for f, w in zip(files, writers, strict=True) if w is not None]


def _fold(path: Path) -> Any:
    """A bucket's newest record of each video, forgotten ones left out (its file removed
    once read). Its rows are in commit order, so each id's last; ids are compared as
    strings, so two videos whose hashes collide stay two."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with pa.OSFile(str(path)) as f:
        t = pa.ipc.open_stream(f).read_all()
    path.unlink()
    keep = last_per_key(t.column("video_id"))
    live = pc.not_equal(pc.take(t.column("status"), pa.array(keep)), FORGOTTEN)
    return t.take(pa.array(keep[live.to_numpy(zero_copy_only=False)]))


def _count_videos(rd: RunDir) -> int | None:
    """Rows of ``videos.parquet`` from its footer (None: no such file), not the table."""
    import pyarrow.parquet as pq

    path = rd.table_path("videos")
    if not path.exists():
        return None
    return pq.read_metadata(path).num_rows


def _failures(bad: Any) -> dict[str, dict[str, Any]]:
    """Per cause ("" counts as internal): how many, and the first ids in sorted order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cause = bad.column("cause").cast(pa.string())  # the failed rows only: decoded
    cause = pc.if_else(pc.equal(cause, ""), "internal", cause)
    out: dict[str, dict[str, Any]] = {}
    for c in sorted(set(pc.unique(cause).to_pylist())):
        ids = bad.column("video_id").filter(pc.equal(cause, c))
        first = pc.take(ids, pc.sort_indices(ids)[:EXAMPLES]).to_pylist()
        out[str(c)] = {"count": len(ids), "examples": first}
    return out
