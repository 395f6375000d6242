"""``howtocap status DIR``: what a run did, what failed and why, and how fast each stage ran.

Read-only: it reads the batch manifests (and an older run's per-video status records), the
stage fingerprints and the per-stage totals ``run_stage`` keeps (wall time and the stages'
counts), never the parts; each stage's newest records as Arrow columns (only the five it
counts), never one object per video: a million videos in a few seconds. Which stages
exist, in which order, and which stage feeds which comes from the ``StageGraph`` the caller
gives (``pipeline.run.run_status``: every step's, in pipeline order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from howtocap.engine.graph import StageGraph
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import CAUSES
from howtocap.errors import InputError

EXAMPLES = 3  # video ids shown per failure cause


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
    cols = ("status", "cause", "attempts", "warnings", "seconds")
    stages = _stages(rd, graph.names)
    if not stages and not n_videos:
        raise InputError(root, "not a howtocap run directory (no videos.parquet, no status)")
    n_videos = n_videos or 0
    # one stage's columns at a time: its counts are kept, its table is not
    counted = {st: _count(rd.newest(st, cols)) for st in stages}
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


def _count(recs: Any) -> dict[str, Any]:
    """One stage's counts from its newest records (Arrow): done, failed, warned, failures
    by cause with example ids, attempts of the failed, summed seconds."""
    import numpy as np
    import pyarrow.compute as pc

    ok = pc.equal(recs.column("status"), "ok").to_numpy(zero_copy_only=False)
    bad = recs.filter(~ok).select(["video_id", "cause", "attempts"])
    causes = _failures(bad)  # only the failed rows leave Arrow
    attempts = Counter(int(a) for a in bad.column("attempts").to_numpy())
    return {"done": int(ok.sum()), "failed": int(len(ok) - ok.sum()),
            "warned": int(np.count_nonzero(ok & (recs.column("warnings").to_numpy() > 0))),
            "failures": {c: causes[c] for c in (*CAUSES, *sorted(set(causes) - set(CAUSES)))
                         if c in causes},
            "failed_attempts": {str(k): v for k, v in sorted(attempts.items())},
            "video_seconds": round(float(pc.sum(recs.column("seconds")).as_py() or 0.0), 3)}


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
