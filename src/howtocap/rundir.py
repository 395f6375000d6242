"""The run directory: per-video part files, the status table, and merged tables.

A stage writes one part file per video (temp file + rename), then one status record. A killed
run therefore leaves, per video, either a finished part or nothing, and a re-run redoes only
what has no ``ok`` record. Merged tables (``captions.parquet`` …) are rebuilt from the parts, so
they never hold duplicates.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

# Column order of every table the pipeline writes; see docs/architecture.md.
SCHEMAS: dict[str, dict[str, str]] = {
    # What the run was given: one row per video (written by the caption stage).
    "videos": {"video_id": "str", "video_path": "str", "subtitle_path": "str"},
    "subtitles": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "source": "str"},
    "captions": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                 "source": "str", "block": "int64", "model": "str"},
    "aligned": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                "orig_start": "float64", "orig_end": "float64", "offset": "float64",
                "score": "float64", "kept": "bool", "encoders": "str", "source": "str",
                "block": "int64", "model": "str"},
    # Frame captions as labels (Ventura et al.): one row per caption of one sampled frame.
    "framecaps": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "captioner": "str", "frame_time": "float64", "clipscore": "float64",
                  "kept": "bool"},
    "status": {"video_id": "str", "stage": "str", "status": "str", "message": "str",
               "seconds": "float64", "finished_at": "float64"},
}


def empty_table(name: str) -> pd.DataFrame:
    """An empty frame with the table's columns and dtypes (so concat keeps the schema)."""
    return pd.DataFrame({c: pd.Series(dtype=t if t != "str" else object)
                         for c, t in SCHEMAS[name].items()})


def conform(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Columns in schema order with schema dtypes; extra columns are kept after them."""
    schema = SCHEMAS[name]
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise ValueError(f"{name} table lacks columns {missing}")
    out = df[list(schema) + [c for c in df.columns if c not in schema]].copy()
    for col, dtype in schema.items():
        out[col] = out[col].astype(object if dtype == "str" else dtype)
    return out.reset_index(drop=True)


def safe_name(video_id: str) -> str:
    """A file name for a video id that cannot escape its folder and stays unique."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", video_id)[:120]
    if clean != video_id:
        clean += "-" + format(abs(hash_text(video_id)) % 16**8, "08x")
    return clean


def hash_text(text: str) -> int:
    """A stable (process-independent) 64-bit hash."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp alone gives 0600


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp_name)`` then rename onto ``path``: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write(path, write)


def atomic_write_parquet(df: pd.DataFrame, path: Path) -> None:
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@dataclass(frozen=True)
class StatusRecord:
    video_id: str
    stage: str
    status: str  # "ok" | "error"
    message: str = ""
    seconds: float = 0.0
    finished_at: float = 0.0


class RunDir:
    """All reads and writes of one run directory go through here."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(root)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)

    # -- paths ---------------------------------------------------------------------------
    def table_path(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def part_dir(self, table: str) -> Path:
        return self.root / "parts" / table

    def part_path(self, table: str, video_id: str) -> Path:
        return self.part_dir(table) / f"{safe_name(video_id)}.parquet"

    def status_path(self, stage: str, video_id: str) -> Path:
        return self.root / "parts" / "status" / stage / f"{safe_name(video_id)}.json"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    # -- parts ---------------------------------------------------------------------------
    def write_part(self, table: str, video_id: str, df: pd.DataFrame) -> None:
        atomic_write_parquet(conform(df, table) if table in SCHEMAS else df,
                             self.part_path(table, video_id))

    def read_part(self, table: str, video_id: str) -> pd.DataFrame | None:
        path = self.part_path(table, video_id)
        return pd.read_parquet(path) if path.exists() else None

    def merge(self, table: str) -> pd.DataFrame:
        """Rebuild ``DIR/<table>.parquet`` from its parts (sorted, so runs compare equal)."""
        parts = sorted(self.part_dir(table).glob("*.parquet"))
        frames = [pd.read_parquet(p) for p in parts]
        frames = [f for f in frames if len(f)]
        if frames:
            df = pd.concat(frames, ignore_index=True)
        else:
            df = empty_table(table) if table in SCHEMAS else pd.DataFrame()
        if table in SCHEMAS:
            df = conform(df, table)
        if len(df) and {"video_id", "start"} <= set(df.columns):
            keys = [k for k in ("video_id", "start", "end", "text") if k in df.columns]
            df = df.sort_values(keys, kind="stable").reset_index(drop=True)
        atomic_write_parquet(df, self.table_path(table))
        return df

    def read_table(self, table: str) -> pd.DataFrame:
        """The merged table, or the parts merged now when the merge has not happened yet."""
        path, parts = self.table_path(table), self.part_dir(table)
        # Adding or replacing a part renames into the folder, which bumps its mtime.
        if path.exists() and (not parts.exists()
                              or path.stat().st_mtime_ns >= parts.stat().st_mtime_ns):
            return pd.read_parquet(path)
        return self.merge(table)

    # -- status --------------------------------------------------------------------------
    def write_status(self, rec: StatusRecord) -> None:
        rec_d = dict(rec.__dict__)
        rec_d["finished_at"] = rec.finished_at or time.time()
        atomic_write_text(self.status_path(rec.stage, rec.video_id), json.dumps(rec_d))

    def status(self, stage: str, video_id: str) -> StatusRecord | None:
        path = self.status_path(stage, video_id)
        if not path.exists():
            return None
        try:
            return StatusRecord(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            return None  # a torn or foreign file: treat as not done

    def is_done(self, stage: str, video_id: str, table: str | None = None) -> bool:
        rec = self.status(stage, video_id)
        if rec is None or rec.status != "ok":
            return False
        return table is None or self.part_path(table, video_id).exists()

    def status_table(self) -> pd.DataFrame:
        root = self.root / "parts" / "status"
        rows: list[dict[str, Any]] = []
        for path in sorted(root.glob("*/*.json")) if root.exists() else []:
            try:
                rows.append(json.loads(path.read_text()))
            except ValueError:
                continue
        df = pd.DataFrame(rows) if rows else empty_table("status")
        df = conform(df, "status").sort_values(["stage", "video_id"]).reset_index(drop=True)
        atomic_write_parquet(df, self.table_path("status"))
        return df

    # -- videos ---------------------------------------------------------------------------
    def record_videos(self, items: Iterable[Any]) -> pd.DataFrame:
        """Remember which file each video id came from (later stages find videos here)."""
        new = pd.DataFrame([{"video_id": it.video_id,
                             "video_path": str(it.video_path or ""),
                             "subtitle_path": str(it.subtitle_path or "")} for it in items])
        old = self.videos()
        df = pd.concat([old, new], ignore_index=True) if len(new) else old
        df = df.drop_duplicates("video_id", keep="last").sort_values("video_id")
        df = conform(df, "videos")
        atomic_write_parquet(df, self.table_path("videos"))
        return df

    def videos(self) -> pd.DataFrame:
        """``video_id, video_path, subtitle_path`` of every video this run was given."""
        path = self.table_path("videos")
        return pd.read_parquet(path) if path.exists() else empty_table("videos")

    # -- config --------------------------------------------------------------------------
    def write_config(self, stage: str, config: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config" / f"{stage}.json",
                          json.dumps(config, indent=2, default=str))

    def read_config(self, stage: str) -> dict[str, Any] | None:
        path = self.root / "config" / f"{stage}.json"
        return json.loads(path.read_text()) if path.exists() else None


def concat_or_empty(frames: Iterable[pd.DataFrame], table: str) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return conform(pd.concat(frames, ignore_index=True), table) if frames else empty_table(table)
