"""``howtocap status DIR``: what a run did, what failed and why, and how fast each stage ran.

Read-only: it streams each stage's status records a shard at a time (six columns, as Arrow),
counted in groups of ~64k, plus the fingerprints and ``run_stage``'s totals; never the tables.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from howtocap.engine.graph import StageGraph
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import CAUSES
from howtocap.errors import InputError

EXAMPLES = 3  # video ids shown per failure cause
COUNTED = ("video_id", "status", "cause", "attempts", "warnings", "seconds")


def _numbers(data: dict[str, Any] | None) -> dict[str, float]:
    try:
        return {k: float(v) for k, v in (data or {}).items()}
    except (TypeError, ValueError):
        return {}


def _throughput(stats: dict[str, float], rates: Mapping[str, str]) -> dict[str, float | None]:
    wall = stats.get("wall_seconds", 0.0)  # processed: done or failed
    stats = {**stats, "processed": stats.get("videos", 0.0) + stats.get("failed", 0.0)}
    return {out: round(stats[m] / wall, 4) if wall > 0 and m in stats else None
            for out, m in {"videos_per_s": "processed", **rates}.items()}


def status_of(run_dir: str | Path, graph: StageGraph,
              rates: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per stage: done / failed / pending, failures by cause with example ids, attempts, wall
    time and throughput (``videos_per_s``, and per ``rates`` entry ``name: metric`` the summed
    metric per wall second, None where a stage has none), as plain data."""
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "not a run directory")
    rd = RunDir(root, create=False)
    n_videos = rd.video_count()
    found = rd.stages_with_results() | rd.fingerprints.names()
    stages = [s for s in graph.names if s in found] + sorted(found - set(graph.names))
    if not stages and not n_videos:
        raise InputError(root, "not a howtocap run directory (no videos.parquet, no status)")
    counted = {st: _count(rd.records(st, COUNTED)) for st in stages}
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
        stats = _numbers(rd.stats.read(stage))
        fp = rd.fingerprints.read(stage)
        out.append({
            "stage": stage, "done": done, "failed": failed,
            "pending": max(0, total - done - failed), "warned": c["warned"],
            "failures": c["failures"], "failed_attempts": c["failed_attempts"],
            "wall_seconds": round(stats.get("wall_seconds", 0.0), 3),
            "video_seconds": c["video_seconds"],
            "throughput": _throughput(stats, rates or {}),
            "config_id": (fp or {}).get("config_id"),
        })
    return {"run_dir": str(root), "videos": n_videos, "stages": out}


def _count(parts: Iterable[Any]) -> dict[str, Any]:
    """One stage's counts from its records, Arrow tables of disjoint videos folded in as
    they are read (memory does not grow with the failures); seconds summed by one
    ``math.fsum`` (exact: the same however the videos were split)."""
    n = {"done": 0, "failed": 0, "warned": 0}
    causes: dict[str, dict[str, Any]] = {}
    attempts: Counter[int] = Counter()

    def seconds() -> Iterator[list[float]]:
        for recs in _batched(parts):
            ok = pc.equal(recs.column("status"), "ok").to_numpy(zero_copy_only=False)
            bad = recs.filter(~ok).select(["video_id", "cause", "attempts"])
            for c, f in _failures(bad).items():  # only the failed rows leave Arrow
                have = causes.setdefault(c, {"count": 0, "examples": []})
                have["count"] += f["count"]
                have["examples"] = sorted(have["examples"] + f["examples"])[:EXAMPLES]
            attempts.update(bad.column("attempts").to_numpy().tolist())
            n["done"] += int(ok.sum())
            n["failed"] += int(len(ok) - ok.sum())
            n["warned"] += int(np.count_nonzero(ok & (recs.column("warnings").to_numpy() > 0)))
            secs = recs.column("seconds").fill_null(0.0).to_numpy().tolist()
            del recs, ok, bad  # not held while the next shard is read
            yield secs

    total = math.fsum(itertools.chain.from_iterable(seconds()))
    return {**n,
            "failures": {c: causes[c] for c in (*CAUSES, *sorted(set(causes) - set(CAUSES)))
                         if c in causes},
            "failed_attempts": {str(k): v for k, v in sorted(attempts.items())},
            "video_seconds": round(total, 3)}


def _failures(bad: Any) -> dict[str, dict[str, Any]]:
    """Per cause ("" counts as internal): how many, and the first ids in sorted order."""
    cause = bad.column("cause").cast(pa.string())
    cause = pc.if_else(pc.equal(cause, ""), "internal", cause)
    out = {}
    for c in sorted(set(pc.unique(cause).to_pylist())):
        ids = bad.column("video_id").filter(pc.equal(cause, c))
        out[str(c)] = {"count": len(ids),
                       "examples": ids.take(pc.sort_indices(ids)[:EXAMPLES]).to_pylist()}
    return out


def _batched(parts: Iterable[Any], rows: int = 1 << 16) -> Iterator[Any]:
    """The shards' tables joined into tables of about ``rows``: counting costs a few calls
    per table, which at a thousand videos a shard outweighed the counting itself."""
    held: list[Any] = []
    n = 0
    for t in parts:
        held.append(t)
        n += len(t)
        if n >= rows:
            yield pa.concat_tables(held)
            held, n = [], 0
    if held:
        yield pa.concat_tables(held)
