"""The run directory: per-video part files, the status table, and merged tables.

A stage writes one part file per video (temp file + rename), then one status record. A killed
run therefore leaves, per video, either a finished part or nothing, and a re-run redoes only
what has no ``ok`` record. Merged tables (``captions.parquet`` …) are rebuilt from the parts, so
they never hold duplicates.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.errors import HowtocapError

# Column order of every table the pipeline writes; see docs/architecture.md.
SCHEMAS: dict[str, dict[str, str]] = {
    # What the run was given: one row per video (written by the caption stage).
    "videos": {"video_id": "str", "video_path": "str", "subtitle_path": "str"},
    # config_id: the fingerprint of the stage run that made the row (DIR/parts/fingerprints/)
    "subtitles": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "source": "str", "config_id": "str"},
    # rejected: "" = kept, else why the caption shows nothing (llm.filler); align, export and
    # index read only kept rows (``kept_captions``)
    "captions": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                 "source": "str", "block": "int64", "model": "str", "config_id": "str",
                 "rejected": "str"},
    "aligned": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                "orig_start": "float64", "orig_end": "float64", "offset": "float64",
                "score": "float64", "kept": "bool", "encoders": "str", "source": "str",
                "block": "int64", "model": "str", "config_id": "str"},
    # Frame captions as labels (Ventura et al.): one row per caption of one sampled frame.
    "framecaps": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "captioner": "str", "frame_time": "float64", "clipscore": "float64",
                  "kept": "bool", "config_id": "str"},
    # message: the error, or the warnings of an ``ok`` video (``warnings`` counts them);
    # cause of an error: bad input | model output | service | internal; attempts so far
    "status": {"video_id": "str", "stage": "str", "status": "str", "message": "str",
               "seconds": "float64", "finished_at": "float64", "warnings": "int64",
               "cause": "str", "attempts": "int64", "config_id": "str"},
}
# Columns older tables (or a stage's raw output) may lack, filled by ``conform``.
# (captions without ``rejected`` were made before the filler test: all kept)
DEFAULTS: dict[str, Any] = {"config_id": "", "cause": "", "attempts": 1, "rejected": ""}


def kept_captions(captions: pd.DataFrame) -> pd.DataFrame:
    """The captions that are training text: rows not rejected as showing nothing, without the
    ``rejected`` column (a table from before the column exists is kept whole)."""
    if "rejected" not in captions.columns:
        return captions
    keep = captions["rejected"].fillna("").astype(str) == ""
    return captions[keep].drop(columns="rejected").reset_index(drop=True)


def empty_table(name: str) -> pd.DataFrame:
    """An empty frame with the table's columns and dtypes (so concat keeps the schema)."""
    return pd.DataFrame({c: pd.Series(dtype=t if t != "str" else object)
                         for c, t in SCHEMAS[name].items()})


def conform(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Columns in schema order with schema dtypes; extra columns are kept after them."""
    schema = SCHEMAS[name]
    missing = [c for c in schema if c not in df.columns]
    if missing and all(c in DEFAULTS for c in missing):
        df = df.assign(**{c: DEFAULTS[c] for c in missing})
        missing = []
    if missing:
        raise ValueError(f"{name} table lacks columns {missing}")
    # Already conforming (a stage's output, conformed again by write_part): a shallow copy is
    # enough under copy-on-write, and saves ~2 ms a call, a minute per 10k videos.
    if list(df.columns[:len(schema)]) == list(schema) and isinstance(df.index, pd.RangeIndex) \
            and df.index.start == 0 and df.index.step == 1 \
            and [str(t) for t in df.dtypes.iloc[:len(schema)]] == \
            ["object" if t == "str" else t for t in schema.values()]:
        return df.copy(deep=False)
    # One frame built from converted columns: assigning column by column costs ~5 ms a table
    # (pandas block consolidation), most of the per-video overhead of a text-only run.
    idx = pd.RangeIndex(len(df))
    data = {}
    for col, dtype in schema.items():
        kind = object if dtype == "str" else dtype
        values = df[col]
        if values.dtype != kind:
            values = values.astype(kind)
        data[col] = pd.Series(values.to_numpy(), index=idx, name=col, dtype=kind)
    data.update({c: pd.Series(df[c].array, index=idx, name=c)
                 for c in df.columns if c not in schema})
    return pd.DataFrame(data, index=idx)


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


class DiskFull(HowtocapError):
    """The disk (or quota) is full: the run stops; nothing half-written is left behind."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and (
        exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(exc)
        or "Disk quota exceeded" in str(exc))


def disk_full_error(path: Path) -> DiskFull:
    return DiskFull(f"{path}: no space left on device; the run stopped and left no "
                    "half-written file: free space and run the same command to resume")


def _fsync_file(name: str) -> None:
    fd = os.open(name, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is still atomic
    finally:
        os.close(fd)


def _writer_tag() -> str:
    import socket

    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] + "~" + str(os.getpid())


_WRITER = _writer_tag()  # in temp names: which host and process is writing
_TEMP = re.compile(r"^\..+\.([A-Za-z0-9-]*)~(\d+)\.[^.]+\.tmp$")


def sweep_temp_files(root: Path) -> int:
    """Remove temp files a killed writer of this host left (never another host's, never a
    live process's) in ``root`` and three levels below (``parts/status/<stage>/`` holds
    per-video status files); returns how many went."""
    host = _WRITER.split("~")[0]
    removed = 0
    folders = [root]
    for depth in range(4):
        nxt: list[Path] = []
        for folder in folders:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if depth < 3 and e.name not in ("cache", "index"):
                        nxt.append(Path(e.path))
                    continue
                m = _TEMP.match(e.name) if e.name.endswith(".tmp") else None
                if m and m.group(1) == host and not _alive(int(m.group(2))):
                    Path(e.path).unlink(missing_ok=True)
                    removed += 1
        folders = nxt
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp_name)``, fsync, then rename onto ``path``: readers (and a re-run after a
    crash or power loss) see the old file or the whole new one, never a torn one. A full disk
    raises ``DiskFull`` (one line) after removing the temp file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_WRITER}.",
                                   suffix=".tmp")
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path) from None
        raise
    os.close(fd)
    try:
        write(tmp)
        _fsync_file(tmp)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full_error(path) from None
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(path, write)


def atomic_write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Parquet with page checksums, so a flipped byte is caught on read (``read_parquet``)."""
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False, write_page_checksum=True))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class CorruptPartWarning(UserWarning):
    """A corrupt or truncated file was found and removed; it will be recomputed."""


class CorruptFile(HowtocapError):
    """A Parquet file that is truncated or whose checksums do not match."""


def read_parquet(path: Path, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_parquet`` verifying page checksums; a torn or corrupt file raises
    ``CorruptFile`` naming it (a missing file stays ``FileNotFoundError``)."""
    import pyarrow as pa

    try:
        return pd.read_parquet(path, page_checksum_verification=True, **kwargs)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFile(f"{path}: corrupt or truncated Parquet file "
                          f"({' '.join(str(exc).split())[:120]})") from None


def looks_complete(path: Path) -> bool:
    """Cheap check that a Parquet file was written to its end (footer magic and length),
    without reading it: a truncated part is redone on resume."""
    try:
        size = path.stat().st_size
        if size < 12:
            return False
        with path.open("rb") as fh:
            fh.seek(size - 8)
            tail = fh.read(8)
            fh.seek(0)
            head = fh.read(4)
    except OSError:
        return False
    footer = int.from_bytes(tail[:4], "little")
    return head == b"PAR1" and tail[4:] == b"PAR1" and 0 < footer <= size - 12


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
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _FILE_MODE)
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


def concat_or_empty(frames: Iterable[pd.DataFrame], table: str) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return conform(pd.concat(frames, ignore_index=True), table) if frames else empty_table(table)
