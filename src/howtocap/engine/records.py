"""Status records: one row per video a stage handled, as a shard's status file holds them
(and, with the same columns, the chunk status files of an unfinished shard)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

STATUS_META = b"howtocap_status"  # the status file's JSON: {"stage", "writes"}


@dataclass(frozen=True)
class StatusRecord:
    video_id: str
    stage: str
    status: str  # "ok" | "error"
    message: str = ""
    seconds: float = 0.0
    finished_at: float = 0.0
    warnings: int = 0
    cause: str = ""  # of an error: bad input | model output | service | internal
    attempts: int = 1  # times this stage ran on this video (counted across runs)
    config_id: str = ""  # fingerprint of the settings that made it
    metrics: dict[str, float] = field(default_factory=dict)  # for throughput (`status`)


RECORD_COLS = [f.name for f in fields(StatusRecord)]
_NUMBERS = {"seconds": pa.float64(), "finished_at": pa.float64(), "warnings": pa.int64(),
            "attempts": pa.int64()}
RECORD_SCHEMA = pa.schema([(c, _NUMBERS.get(c, pa.string())) for c in RECORD_COLS])  # metrics: JSON


def records_table(records: Sequence[StatusRecord], stage: str, writes: Sequence[str]) -> Any:
    """Records as a status file's Arrow table, sorted by video, with the stage's tables in
    its metadata (``drop_corrupt`` finds whose shard a lost table file was)."""
    now = time.time()
    rows = [{**r.__dict__, "metrics": json.dumps(r.metrics), "finished_at": r.finished_at or now}
            for r in sorted(records, key=lambda r: r.video_id)]
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA).replace_schema_metadata(
        {STATUS_META: json.dumps({"stage": stage, "writes": list(writes)}).encode()})


def record_columns(columns: Sequence[str] | None) -> list[str]:
    """``video_id`` and ``columns`` (every column when None): what a status file is read for."""
    return list(dict.fromkeys(["video_id", *(columns or RECORD_COLS)]))


def empty_records(columns: Sequence[str] | None = None) -> Any:
    """No records, with ``video_id`` and ``columns`` in their types."""
    return pa.schema([RECORD_SCHEMA.field(c) for c in record_columns(columns)]).empty_table()


def status_writes(path: Path) -> list[str]:
    """The tables a status file's stage writes (its metadata); [] when unreadable."""
    try:
        meta = pq.read_schema(path).metadata or {}
        return list(json.loads(meta.get(STATUS_META, b"{}")).get("writes", []))
    except (FileNotFoundError, pa.ArrowException, OSError, ValueError):
        return []

