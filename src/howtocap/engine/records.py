"""Status records: one row per video a stage handled, as a shard's status file holds them.

A shard's status file (``status/<stage>/<shard>.parquet``) is written last, after the shard's
table files, so it says the shard is finished; each video appears in it once. Chunk status
files inside an unfinished shard's work folder have the same columns.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from howtocap.atomic import corrupt_parquet

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
_DEFAULTS = {"message": "", "seconds": 0.0, "finished_at": 0.0, "warnings": 0, "cause": "",
             "attempts": 1, "config_id": "", "metrics": "{}"}


@functools.cache
def record_schema() -> Any:
    """The Arrow schema of a status file (``metrics`` as JSON text)."""
    import pyarrow as pa

    kinds = {"seconds": pa.float64(), "finished_at": pa.float64(), "warnings": pa.int64(),
             "attempts": pa.int64()}
    return pa.schema([(c, kinds.get(c, pa.string())) for c in RECORD_COLS])


def records_table(records: Sequence[StatusRecord], stage: str, writes: Sequence[str]) -> Any:
    """Records as a status file's Arrow table, sorted by video, with the stage's tables in
    its metadata (``drop_corrupt`` finds whose shard a lost table file was)."""
    import pyarrow as pa

    now = time.time()
    recs = sorted(records, key=lambda r: r.video_id)
    cols: dict[str, list[Any]] = {c: [] for c in RECORD_COLS}
    for r in recs:
        for c in RECORD_COLS:
            v = getattr(r, c)
            cols[c].append(json.dumps(v) if c == "metrics" else
                           (v or now) if c == "finished_at" else v)
    return pa.table(cols, schema=record_schema()).replace_schema_metadata(
        {STATUS_META: json.dumps({"stage": stage, "writes": list(writes)}).encode()})


def read_records(path: Path, columns: Sequence[str] | None = None) -> Any:
    """A status file's rows (only ``columns``, with ``video_id`` first) as Arrow, in the
    record types; a missing column (an older file) gets its default. Raises
    ``FileNotFoundError`` or ``CorruptFile``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = list(dict.fromkeys(["video_id", *(columns or RECORD_COLS)]))
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        have = set(pf.schema_arrow.names)
        t = pf.read(columns=[c for c in want if c in have], use_threads=False)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise corrupt_parquet(path, exc) from None
    schema = record_schema()
    out = {}
    for c in want:
        kind = schema.field(c).type if c in schema.names else pa.string()
        out[c] = t.column(c).cast(kind) if c in t.column_names else \
            pa.array([_DEFAULTS.get(c, "")] * t.num_rows, kind)
    return pa.table(out)


def empty_records(columns: Sequence[str] | None = None) -> Any:
    """No records, with ``video_id`` and ``columns`` in their types."""
    import pyarrow as pa

    schema = record_schema()
    return pa.schema([schema.field(c) for c in dict.fromkeys(
        ["video_id", *(columns or RECORD_COLS)])]).empty_table()


def status_writes(path: Path) -> list[str]:
    """The tables a status file's stage writes (its metadata); [] when unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
        return list(json.loads(meta.get(STATUS_META, b"{}")).get("writes", []))
    except (FileNotFoundError, pa.ArrowException, OSError, ValueError):
        return []


def to_records(table: Any) -> list[StatusRecord]:
    """Arrow rows of a status file as records (small runs, tests, ``status`` examples)."""
    cols = {c: table.column(c).to_pylist() for c in table.column_names}
    known = {f.name for f in fields(StatusRecord)}
    out = []
    for i in range(table.num_rows):
        row = {c: v[i] for c, v in cols.items() if c in known}
        row["metrics"] = json.loads(row.get("metrics") or "{}")
        out.append(StatusRecord(**row))
    return out
