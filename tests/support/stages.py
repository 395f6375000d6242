"""A small real stage for runner tests: it sleeps a little, records which process ran each
video and how often ``setup`` ran, and fails on purpose for video ids containing "bad"; and
another real process holding a claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import InputError, ServiceUnavailable
from howtocap.io.inputs import VideoItem


class SquareStage(BaseStage):
    name = "square"
    writes = ("squares",)

    def __init__(self, log_dir: Path, delay: float = 0.0, models: bool = True) -> None:
        self.log_dir = Path(log_dir)
        self.delay = delay
        self.resources = Resources(kind="toy", models=models)

    def load(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / "setup.log").open("a") as fh:
            fh.write(f"{os.getpid()}\n")

    def process(self, video: VideoInput) -> StageOutput:
        if "bad" in video.video_id:
            raise InputError(video.video_id, "scripted failure")
        time.sleep(self.delay)
        with (self.log_dir / "done.log").open("a") as fh:
            fh.write(f"{video.video_id} {os.getpid()}\n")
        n = int(video.video_id.split("_")[-1])
        return StageOutput({"squares": pd.DataFrame({"video_id": [video.video_id] * 2,
                                                     "start": [float(n), float(n) + 1],
                                                     "value": [n * n, n * n + 1]})})


def setups(log_dir: Path) -> list[int]:
    path = Path(log_dir) / "setup.log"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def done_ids(log_dir: Path) -> list[str]:
    path = Path(log_dir) / "done.log"
    return [ln.split()[0] for ln in path.read_text().splitlines()] if path.exists() else []


def committed(run: Path, stage: str) -> int:
    """Videos committed by the stage: in its finished shards' status files and in the chunk
    status files of unfinished ones (each written whole, by rename)."""
    root = Path(run)
    while True:
        try:  # a shard finishing mid-look removes its work folder: look again
            return sum(pq.read_metadata(p).num_rows for p in
                       [*(root / "status" / stage).glob("shard-*.parquet"),
                        *(root / "work" / stage).glob("shard-*/*.status.parquet")])
        except FileNotFoundError:
            continue


# which stage writes each table (fixtures are committed as that stage would commit them)
WRITER = {"subtitles": "subtitles", "captions": "caption", "align_scores": "align",
          "shots": "shots", "framecaps": "framecaps", "downloads": "download",
          "tdr_frames": "tdr_frames"}


def write_rows(rundir: RunDir, table: str, df: pd.DataFrame, stage: str | None = None,
               config_id: str = "") -> None:
    """Put ``df``'s rows into the run's ``table`` as its stage would commit them: each
    video numbered (``videos.parquet``), an ``ok`` record per video, shard by shard. A
    video given again replaces its earlier rows (a fixture built in steps)."""
    from howtocap.io.inputs import VideoItem

    stage = stage or WRITER.get(table, table)
    ids = list(dict.fromkeys(df["video_id"].astype(str)))
    rundir.record_videos(VideoItem(v, None) for v in ids)
    ks = rundir.shard_of(ids)
    for k in sorted(set(ks.tolist())):
        mine = [v for v, kk in zip(ids, ks, strict=True) if kk == k]
        w = rundir.writer(stage, k, (table,))
        w.commit([StatusRecord(v, stage, "ok", config_id=config_id) for v in mine],
                 {table: df[df["video_id"].isin(mine)].reset_index(drop=True)})
        w.finish()


def record_table(rundir: RunDir, stage: str, columns: list[str] | None = None) -> pa.Table:
    """Every video's status record of ``stage`` as one Arrow table (``RunDir.records``
    gives them a shard at a time)."""
    from howtocap.engine.records import empty_records

    parts = list(rundir.records(stage, columns))
    return pa.concat_tables(parts) if parts else empty_records(columns)


def status_records(rundir: RunDir, stage: str) -> list[StatusRecord]:
    """Every video's status record of ``stage`` as records (``metrics`` decoded)."""
    table = record_table(rundir, stage)
    names = [f.name for f in fields(StatusRecord)]
    return [StatusRecord(**{**row, "metrics": json.loads(row.get("metrics") or "{}")})
            for row in table.select([c for c in table.column_names if c in names]).to_pylist()]


class Lines(BaseStage):
    """Three subtitle-like rows per video; fails for the ids in ``fail`` (not a setting: a
    retry may succeed), stops the run (a service down) at the ids in ``down``; ``offset``
    is a setting."""

    name = "lines"
    writes = ("subtitles",)

    def __init__(self, fail: set[str] | None = None, offset: float = 0.0,
                 down: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.down = down or set()
        self.offset = offset

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "offset": self.offset}

    def process(self, video: VideoInput) -> StageOutput:
        if video.video_id in self.down:
            raise ServiceUnavailable("the service went away")
        if video.video_id in self.fail:
            raise InputError(video.video_id, "scripted failure")
        return StageOutput({"subtitles": rows(video.video_id, self.offset)})


ITEMS = [VideoItem(f"v_{i:02d}", None) for i in range(10)]


def rows(vid: str, offset: float = 0.0) -> pd.DataFrame:
    n = int(vid.split("_")[1])
    return pd.DataFrame({"video_id": [vid] * 3, "start": [2.0, 0.0, 1.0],  # not sorted
                         "end": [3.0, 1.0, 2.0],
                         "text": [f"{vid} c {n + offset}", f"{vid} a", f"{vid} b"],
                         "source": ["vtt"] * 3})


# A process that claims ``argv[1]`` through the library once ``argv[2]`` exists (if given),
# prints whether it got it and holds it; each line on its stdin releases it ("released").
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from howtocap.engine import claims
    path = Path(sys.argv[1])
    while len(sys.argv) > 2 and not Path(sys.argv[2]).exists():
        time.sleep(0.005)
    print(claims.claim(path), flush=True)
    for _ in sys.stdin:
        claims.release(path)
        print("released", flush=True)
""")


def claim_holder(path: Path, go: Path | None = None) -> subprocess.Popen[str]:
    """A real other process holding (or trying for) the claim ``path`` (``HOLDER``)."""
    args = [sys.executable, "-c", HOLDER, str(path), *([str(go)] if go else [])]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.communicate()  # (its pipes closed)
