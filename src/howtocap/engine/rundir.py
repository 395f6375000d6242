"""The run directory: per-video part files, the status table, and merged tables.

Only this module knows the layout (parts, status, claims, fingerprints, config, logs, cache,
index). What it is built on sits in the bottom layer and knows no layout: ``atomic`` (whole
files, a full disk, corrupt Parquet), ``hashing`` (stable hashes, file-safe names) and
``schemas`` (the tables' columns and ``conform``).

A stage writes one part file per video (temp file + rename), then one status record. A killed
run therefore leaves, per video, either a finished part or nothing, and a re-run redoes only
what has no ``ok`` record. Merged tables (``captions.parquet`` …) are rebuilt from the parts, so
they never hold duplicates.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.atomic import (
    FILE_MODE,
    CorruptFile,
    CorruptPartWarning,
    atomic_write,
    atomic_write_parquet,
    atomic_write_text,
    looks_complete,
    read_parquet,
)
from howtocap.hashing import safe_name
from howtocap.schemas import DEFAULTS, SCHEMAS, conform, empty_table


def _start_ticks(pid: int) -> str:
    """A process's start time (Linux), so a reused pid is not taken for the old process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Owner:
    """This process, as written into the claims it holds."""

    host: str
    pid: int
    started: str
    lease: float = 6 * 3600.0  # seconds after which another host's claim counts as dead

    @classmethod
    def me(cls) -> Owner:
        import socket

        lease = float(os.environ.get("HOWTOCAP_CLAIM_LEASE", 6 * 3600))
        return cls(socket.gethostname(), os.getpid(), _start_ticks(os.getpid()), lease)

    @property
    def token(self) -> str:
        return json.dumps({"host": self.host, "pid": self.pid, "started": self.started})

    def is_stale(self, path: Path) -> bool:
        """Whether the claim at ``path`` belongs to a process that is gone."""
        try:
            held = json.loads(path.read_text() or "{}")
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return True
        except (OSError, ValueError):
            return False  # being written right now
        if held.get("host") != self.host:
            return age > self.lease
        pid = int(held.get("pid", 0))
        if pid == self.pid:
            return False
        return _start_ticks(pid) != held.get("started") or not _start_ticks(pid)


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
    config_id: str = ""  # fingerprint of the settings that made it ("" = before fingerprints)
    metrics: dict[str, float] = field(default_factory=dict)  # for throughput (`status`)


class RunDir:
    """All reads and writes of one run directory go through here."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(root)
        self.corrupted: list[Path] = []  # corrupt files found (and removed) while reading
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
        return self.status_dir / stage / f"{safe_name(video_id)}.json"

    @property
    def status_dir(self) -> Path:
        """Where the per-video status records live (one folder per stage)."""
        return self.root / "parts" / "status"

    @property
    def index_dir(self) -> Path:
        """The search index (``search.index`` owns what is inside)."""
        return self.root / "index"

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    # -- parts ---------------------------------------------------------------------------
    def write_part(self, table: str, video_id: str, df: pd.DataFrame) -> None:
        atomic_write_parquet(conform(df, table) if table in SCHEMAS else df,
                             self.part_path(table, video_id))

    def read_part(self, table: str, video_id: str) -> pd.DataFrame | None:
        """A video's part, or None when it is missing or corrupt (then removed with a
        warning, so the stage that writes it redoes the video)."""
        path = self.part_path(table, video_id)
        if not path.exists():
            return None
        try:
            return read_parquet(path)
        except CorruptFile as exc:
            self.drop_corrupt(path, exc)
            return None
        except FileNotFoundError:
            return None

    def part_ok(self, table: str, video_id: str) -> bool:
        """The part exists and was written to its end (cheap: no full read)."""
        return looks_complete(self.part_path(table, video_id))

    def drop_corrupt(self, path: Path, exc: BaseException | str) -> None:
        """Remove a corrupt file so it is recomputed; the warning names it."""
        warnings.warn(f"{exc}; removed, it will be recomputed", CorruptPartWarning,
                      stacklevel=3)
        self.corrupted.append(path)
        path.unlink(missing_ok=True)

    def _read_parts(self, table: str) -> list[pd.DataFrame]:
        frames = []
        for p in sorted(self.part_dir(table).glob("*.parquet")):
            try:
                frames.append(read_parquet(p))
            except CorruptFile as exc:
                self.drop_corrupt(p, exc)
            except FileNotFoundError:
                continue
        return frames

    def merge(self, table: str) -> pd.DataFrame:
        """Rebuild ``DIR/<table>.parquet`` from its parts (sorted, so runs compare equal).
        A corrupt part is dropped with a warning (and listed in ``corrupted``)."""
        frames = self._read_parts(table)
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

    def merge_streaming(self, table: str, batch_rows: int = 65_536) -> int:
        """``merge`` without holding the table in memory: the same rows in the same order,
        written ``batch_rows`` at a time (a HowTo100M-size run has millions of subtitle rows).

        A part holds one video, so parts in video-id order, each sorted by start, end, text,
        is ``merge``'s order; the video id comes from the part's footer statistics, so each
        part is opened twice but read once. Returns the row count. A table it cannot order
        that way (no video_id/start, a part holding several videos) goes to ``merge``.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = SCHEMAS.get(table, {})
        if not {"video_id", "start"} <= set(schema):
            return len(self.merge(table))
        order: list[tuple[str, Path]] = []
        extras: dict[str, pa.DataType] = {}
        for path in sorted(self.part_dir(table).glob("*.parquet")):
            try:
                md = pq.read_metadata(path)
            except (pa.ArrowException, OSError) as exc:
                self.drop_corrupt(path, CorruptFile(f"{path}: corrupt or truncated Parquet "
                                                    f"file ({' '.join(str(exc).split())[:80]})"))
                continue
            if md.num_rows == 0:
                continue
            part_schema = md.schema.to_arrow_schema()
            vid = _only_value(md, part_schema.get_field_index("video_id"))
            if vid is None:
                return len(self.merge(table))
            for f in part_schema:
                if f.name not in schema and f.name not in extras and not pa.types.is_null(f.type):
                    extras[f.name] = f.type
            order.append((vid, path))
        if not order:
            return len(self.merge(table))
        order.sort(key=lambda x: x[0])
        arrow = {"str": pa.string(), "float64": pa.float64(), "int64": pa.int64(),
                 "bool": pa.bool_()}
        target = pa.schema([(c, arrow[t]) for c, t in schema.items()] + list(extras.items()))
        keys = [k for k in ("video_id", "start", "end", "text") if k in schema]
        total = 0

        def write(tmp: str) -> None:
            nonlocal total
            writer: pq.ParquetWriter | None = None
            batch: list[pa.Table] = []
            rows = 0

            def flush() -> None:
                nonlocal writer, total
                df = pa.concat_tables(batch, promote_options="permissive").to_pandas()
                for c in extras:
                    if c not in df.columns:
                        df[c] = pd.Series([None] * len(df), dtype=object)
                df = conform(df, table)[target.names].sort_values(keys, kind="stable")
                out = pa.Table.from_pandas(df, preserve_index=False)
                out = out.cast(target.with_metadata(out.schema.metadata))
                if writer is None:
                    writer = pq.ParquetWriter(tmp, out.schema)
                writer.write_table(out)
                total += len(out)

            try:
                for _, path in order:
                    try:
                        part = pq.read_table(path, page_checksum_verification=True)
                    except (pa.ArrowException, OSError) as exc:
                        self.drop_corrupt(path, CorruptFile(
                            f"{path}: corrupt Parquet part ({' '.join(str(exc).split())[:80]})"))
                        continue
                    batch.append(part)
                    rows += len(part)
                    if rows >= batch_rows:
                        flush()
                        batch, rows = [], 0
                if batch:
                    flush()
            finally:
                if writer is not None:
                    writer.close()

        atomic_write(self.table_path(table), write)
        return total

    def read_table(self, table: str) -> pd.DataFrame:
        """The merged table, or the parts merged now when the merge has not happened yet."""
        path, parts = self.table_path(table), self.part_dir(table)
        # Adding or replacing a part renames into the folder, which bumps its mtime.
        if path.exists() and (not parts.exists()
                              or path.stat().st_mtime_ns >= parts.stat().st_mtime_ns):
            try:
                return read_parquet(path)
            except CorruptFile as exc:
                if not parts.exists():
                    raise
                self.drop_corrupt(path, exc)  # rebuilt from the parts just below
        return self.merge(table)

    # -- status --------------------------------------------------------------------------
    def write_status(self, rec: StatusRecord) -> None:
        rec_d = dict(rec.__dict__)
        rec_d["finished_at"] = rec.finished_at or time.time()
        atomic_write_text(self.status_path(rec.stage, rec.video_id), json.dumps(rec_d))

    def status(self, stage: str, video_id: str) -> StatusRecord | None:
        path = self.status_path(stage, video_id)
        try:
            data = json.loads(path.read_text())
            known = {f.name for f in fields(StatusRecord)}
            return StatusRecord(**{k: v for k, v in data.items() if k in known})
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, AttributeError, OSError):
            return None  # a torn or foreign file: treat as not done

    def is_done(self, stage: str, video_id: str, table: str | None = None,
                config_id: str | None = None) -> bool:
        """An ``ok`` record (made with ``config_id`` when given) whose part is whole."""
        rec = self.status(stage, video_id)
        return self.record_done(rec, table, config_id) if rec is not None else False

    def record_done(self, rec: StatusRecord, table: str | None,
                    config_id: str | None = None) -> bool:
        if rec.status != "ok":
            return False
        if config_id is not None and rec.config_id and rec.config_id != config_id:
            return False
        if table is None:
            return True
        path = self.part_path(table, rec.video_id)
        if not path.exists():
            return False
        if not looks_complete(path):
            self.drop_corrupt(path, f"{path}: truncated Parquet part")
            return False
        return True

    def status_table(self) -> pd.DataFrame:
        root = self.status_dir
        rows: list[dict[str, Any]] = []
        for path in sorted(root.glob("*/*.json")) if root.exists() else []:
            try:
                rows.append(json.loads(path.read_text()))
            except ValueError:
                continue
        df = pd.DataFrame(rows) if rows else empty_table("status")
        if "warnings" not in df.columns:  # records written before warnings were counted
            df["warnings"] = 0
        df["warnings"] = df["warnings"].fillna(0)
        for col, default in DEFAULTS.items():  # records written before causes/attempts
            if col in df.columns:
                df[col] = df[col].fillna(default)
        df = df.drop(columns=[c for c in ("metrics",) if c in df.columns])
        df = conform(df, "status").sort_values(["stage", "video_id"]).reset_index(drop=True)
        atomic_write_parquet(df, self.table_path("status"))
        return df

    # -- fingerprints, stats, invalidation ------------------------------------------------
    def fingerprint_path(self, stage: str) -> Path:
        return self.root / "parts" / "fingerprints" / f"{stage}.json"

    def read_fingerprint(self, stage: str) -> dict[str, Any] | None:
        """``{"config_id": …, "fingerprint": {…}}`` of the settings the stage's parts were
        made with, or None (a new stage, or a run from before fingerprints)."""
        path = self.fingerprint_path(stage)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "config_id" in data else None

    def write_fingerprint(self, stage: str, config_id: str, fingerprint: dict[str, Any]) -> None:
        atomic_write_text(self.fingerprint_path(stage), json.dumps(
            {"config_id": config_id, "fingerprint": fingerprint}, indent=1, default=str))

    def has_results(self, stage: str) -> bool:
        """Whether any video has a status record for ``stage`` (done or failed)."""
        folder = self.status_dir / stage
        return folder.is_dir() and next(folder.glob("*.json"), None) is not None

    def status_records(self, stage: str) -> list[StatusRecord]:
        folder = self.status_dir / stage
        recs = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = json.loads(path.read_text())
                known = {f.name for f in fields(StatusRecord)}
                recs.append(StatusRecord(**{k: v for k, v in data.items() if k in known}))
            except (OSError, ValueError, TypeError):
                continue
        return recs

    def invalidate(self, stage: str, tables: Iterable[str]) -> None:
        """Forget a stage's results (``--redo``): its status records, parts, merged tables,
        fingerprint and timing. The fingerprint goes last, so a kill midway still refuses."""
        import shutil

        for path in [self.status_dir / stage, *(self.part_dir(t) for t in tables)]:
            if path.exists():
                shutil.rmtree(path)
        for t in tables:
            self.table_path(t).unlink(missing_ok=True)
        self.stats_path(stage).unlink(missing_ok=True)
        self.fingerprint_path(stage).unlink(missing_ok=True)

    def stats_path(self, stage: str) -> Path:
        return self.root / "parts" / "stats" / f"{stage}.json"

    def read_stats(self, stage: str) -> dict[str, float]:
        try:
            data = json.loads(self.stats_path(stage).read_text())
            return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError, TypeError):
            return {}

    def add_stats(self, stage: str, **values: float) -> None:
        """Add one stage run's wall time and counts to the stage's totals (for `status`)."""
        stats = self.read_stats(stage)
        for k, v in values.items():
            stats[k] = stats.get(k, 0.0) + float(v)
        atomic_write_text(self.stats_path(stage), json.dumps(stats))

    # -- claims ---------------------------------------------------------------------------
    def claim_path(self, stage: str, video_id: str) -> Path:
        return self.root / "parts" / "claims" / stage / f"{safe_name(video_id)}.json"

    def claim(self, stage: str, video_id: str, owner: Owner) -> bool:
        """Take ``video_id`` for this process, unless a live process holds it.

        Claims are files created with O_EXCL, so of two processes on one run directory exactly
        one gets each video (tested on a local directory; on NFS this relies on the server's
        exclusive create, which NFSv3 and later provide). A claim whose owner died is taken
        over: on the same host when its process is gone, elsewhere when it is older than
        ``owner.lease``.
        """
        path = self.claim_path(stage, video_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
            except FileExistsError:
                if not owner.is_stale(path):
                    return False
                path.unlink(missing_ok=True)  # a dead owner's claim; race for it once more
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(owner.token)
            return True
        return False

    def release(self, stage: str, video_id: str) -> None:
        self.claim_path(stage, video_id).unlink(missing_ok=True)

    # -- videos ---------------------------------------------------------------------------
    def record_videos(self, items: Iterable[Any]) -> pd.DataFrame:
        """Remember which file each video id came from (later stages find videos here).

        An empty ``video_path`` means "no video file known yet" (a caption run from
        ``--subtitles`` alone); it never erases a path recorded before, so re-running such a
        run keeps the files ``howtocap align --videos`` attached. Built column-wise: a
        HowTo100M run records 1.2M ids.
        """
        items = list(items)
        new = pd.DataFrame({
            "video_id": pd.Series([it.video_id for it in items], dtype=object),
            "video_path": pd.Series([str(it.video_path or "") for it in items], dtype=object),
            "subtitle_path": pd.Series([str(it.subtitle_path or "") for it in items],
                                       dtype=object)})
        old = self.videos()
        if len(old) and len(new):
            before = old.drop_duplicates("video_id", keep="last").set_index("video_id")
            for col in ("video_path", "subtitle_path"):
                known = new["video_id"].map(before[col].astype(object)).fillna("")
                new[col] = new[col].where(new[col] != "", known)
        df = pd.concat([old, new], ignore_index=True) if len(new) else old
        df = df.drop_duplicates("video_id", keep="last").sort_values("video_id")
        df = conform(df, "videos")
        atomic_write_parquet(df, self.table_path("videos"))
        return df

    def videos(self) -> pd.DataFrame:
        """``video_id, video_path, subtitle_path`` of every video this run was given
        (``video_path`` is empty for a video captioned from text alone, until one is attached)."""
        path = self.table_path("videos")
        return pd.read_parquet(path) if path.exists() else empty_table("videos")

    def attach_videos(self, items: Iterable[Any]) -> tuple[list[str], list[str]]:
        """Record video files for videos this run already has (e.g. captioned from
        ``--subtitles`` alone): ``(ids attached, ids this run does not know)``; unknown ids are
        left out, so a folder holding more videos than the run does not add any."""
        known = set(self.videos()["video_id"])
        items = list(items)
        attach = [it for it in items if it.video_id in known and it.video_path]
        if attach:
            self.record_videos(attach)
        return [it.video_id for it in attach], [it.video_id for it in items
                                                if it.video_id not in known]

    # -- config --------------------------------------------------------------------------
    def write_config(self, stage: str, config: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config" / f"{stage}.json",
                          json.dumps(config, indent=2, default=str))

    def read_config(self, stage: str) -> dict[str, Any] | None:
        path = self.root / "config" / f"{stage}.json"
        return json.loads(path.read_text()) if path.exists() else None


def _only_value(md: Any, column: int) -> str | None:
    """The one value a Parquet column holds in every row (from the footer's statistics), or
    None when it holds several or the statistics do not say."""
    if column < 0:
        return None
    value = None
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(column).statistics
        if st is None or not st.has_min_max or st.min != st.max or \
                (value is not None and st.min != value):
            return None
        value = st.min
    return value if isinstance(value, str) else None
