"""``howtocap status DIR``: what a run did, what failed and why, and how fast each stage ran.

Read-only: each stage's status records (six columns, streamed a shard at a time), fingerprints
and totals; never the tables.
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


def _timing(data: dict[str, Any] | None, rates: Mapping[str, str]
            ) -> tuple[float, dict[str, float | None]]:
    """``run_stage``'s wall seconds and each rate's metric per wall second (processed: done or
    failed); None where a stage has none, nothing from totals that are not numbers."""
    try:
        stats = {k: float(v) for k, v in (data or {}).items()}
    except (TypeError, ValueError):
        stats = {}
    wall = stats.get("wall_seconds", 0.0)
    stats["processed"] = stats.get("videos", 0.0) + stats.get("failed", 0.0)
    return round(wall, 3), {out: round(stats[m] / wall, 4) if wall > 0 and m in stats else None
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
        # left to do: what its feeder (whose table it reads) did not fail when that one sees every
        # video (one command runs both), else what the feeder finished (a later command runs it)
        feeder = graph.feeder(stage)
        if feeder in counted and graph.is_source(feeder):
            total = n_videos - counted[feeder]["failed"]
        elif feeder in counted:
            total = counted[feeder]["done"]
        else:
            total = max(n_videos, done + failed)
        wall, throughput = _timing(rd.stats.read(stage), rates or {})
        out.append({"stage": stage, "done": done, "failed": failed,
                    "pending": max(0, total - done - failed), "warned": c["warned"],
                    "failures": c["failures"], "failed_attempts": c["failed_attempts"],
                    "wall_seconds": wall, "video_seconds": c["video_seconds"],
                    "throughput": throughput,
                    "config_id": (rd.fingerprints.read(stage) or {}).get("config_id")})
    return {"run_dir": str(root), "videos": n_videos, "stages": out}


def _count(parts: Iterable[Any]) -> dict[str, Any]:
    """One stage's counts, its shards' records counted by Arrow ~64 shards at a time and folded
    in (memory does not grow with the run); the seconds by one ``math.fsum`` (exact however
    the videos were split)."""
    n = {"done": 0, "failed": 0, "warned": 0}
    found: dict[str, dict[str, Any]] = {}
    tries: Counter[int] = Counter()

    def seconds() -> Iterator[list[float]]:
        shards = iter(parts)
        while group := list(itertools.islice(shards, 64)):
            t = pa.concat_tables(group)
            ok = pc.equal(t["status"], "ok").to_numpy(zero_copy_only=False)
            bad = t.filter(~ok).sort_by("video_id")  # then a cause's first ids are its examples
            cause = pc.if_else(pc.equal(bad["cause"], ""), "internal", bad["cause"])
            g = pa.table({"cause": cause, "id": bad["video_id"]}).group_by(
                "cause", use_threads=False).aggregate([("id", "list")])  # ids stay in order
            for c, ids in zip(g["cause"].to_pylist(), g["id_list"].to_pylist(), strict=True):
                have = found.setdefault(c, {"count": 0, "examples": []})
                have["count"] += len(ids)
                have["examples"] = sorted(have["examples"] + ids[:EXAMPLES])[:EXAMPLES]
            tries.update(bad["attempts"].to_numpy().tolist())
            n["done"] += int(ok.sum())
            n["failed"] += int(len(ok) - ok.sum())
            n["warned"] += int(np.count_nonzero(ok & (t["warnings"].to_numpy() > 0)))
            yield t["seconds"].fill_null(0.0).to_numpy().tolist()

    total = math.fsum(itertools.chain.from_iterable(seconds()))
    return {**n, "failures": {c: found[c] for c in (*CAUSES, *sorted(set(found) - set(CAUSES)))
                              if c in found},
            "failed_attempts": {str(k): v for k, v in sorted(tries.items())},
            "video_seconds": round(total, 3)}
