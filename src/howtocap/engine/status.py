"""``howtocap status DIR``: what a run did, what failed and why, and how fast each stage ran.

Read-only: it reads the batch manifests (and an older run's per-video status records), the
stage fingerprints and the per-stage totals ``run_stage`` keeps (wall time and the stages'
counts), never the parts; each stage's records as columns, never one object per video. Which stages
exist, in which order, and which stage feeds which comes from the ``StageGraph`` the caller
gives (``pipeline.run.run_status``: every step's, in pipeline order).
"""

from __future__ import annotations

from collections import Counter, defaultdict
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
    videos = rd.videos()
    n_videos = len(videos)
    records = {st: rd.records(st) for st in _stages(rd, graph.names)}
    if not records and not n_videos:
        raise InputError(root, "not a howtocap run directory (no videos.parquet, no status)")
    is_ok = {st: (df["status"] == "ok").to_numpy() for st, df in records.items()}
    count_ok = {st: int(ok.sum()) for st, ok in is_ok.items()}
    count_failed = {st: len(ok) - count_ok[st] for st, ok in is_ok.items()}
    out: list[dict[str, Any]] = []
    for stage, recs in records.items():
        done, failed = count_ok[stage], count_failed[stage]
        # which videos the stage could still do: those the stage whose table it reads did not
        # fail, when that one sees every video (the same command runs both); else those it
        # finished (a later command runs on what is done)
        feeder = graph.feeder(stage)
        if feeder in records and graph.is_source(feeder):
            total = n_videos - count_failed[feeder]
        elif feeder in records:
            total = count_ok[feeder]
        else:
            total = max(n_videos, done + failed)
        bad = recs[~is_ok[stage]]
        causes: dict[str, list[str]] = defaultdict(list)
        for vid, cause in zip(bad.index, bad["cause"], strict=True):
            causes[cause or "internal"].append(str(vid))
        attempts = Counter(int(a) for a in bad["attempts"])
        stats = rd.read_stats(stage)
        fp = rd.read_fingerprint(stage)
        out.append({
            "stage": stage, "done": done, "failed": failed,
            "pending": max(0, total - done - failed),
            "warned": int((is_ok[stage] & (recs["warnings"].to_numpy() > 0)).sum()),
            "failures": {c: {"count": len(causes[c]), "examples": sorted(causes[c])[:EXAMPLES]}
                         for c in (*CAUSES, *sorted(set(causes) - set(CAUSES))) if causes[c]},
            "failed_attempts": {str(k): v for k, v in sorted(attempts.items())},
            "wall_seconds": round(stats.get("wall_seconds", 0.0), 3),
            "video_seconds": round(float(recs["seconds"].sum()), 3),
            "throughput": _throughput(stats, rates or {}),
            "config_id": fp["config_id"] if fp else None,
        })
    return {"run_dir": str(root), "videos": n_videos, "stages": out}
