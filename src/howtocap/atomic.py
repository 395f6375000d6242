"""Files that are whole or absent: atomic writes (temp file + fsync + rename), a full disk as one
line (``DiskFull``), a torn or corrupt Parquet file told from a good one. Bottom layer: imports
nothing of the package but ``errors``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from howtocap.errors import HowtocapError

_MASK = os.umask(0)
os.umask(_MASK)
FILE_MODE = 0o666 & ~_MASK  # what open() would give; mkstemp alone gives 0600
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]
_TEMP = re.compile(r"^\..+\.([A-Za-z0-9-]*)~(\d+)\.[^.]+\.tmp$")  # a writer_tag()'s temp file


class DiskFull(HowtocapError):
    """The disk (or quota) is full: the run stops; nothing half-written is left behind."""


def _fsync(path: str | Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where a directory cannot be synced)."""
    with contextlib.suppress(OSError):
        _fsync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def writer_tag() -> str:
    """Which host and process is writing (in temp names); the pid read at each write, so a
    forked child's temp files are not taken for its live parent's."""
    return f"{HOST}~{os.getpid()}"


def sweep_temp_files(root: Path) -> int:
    """Remove the temp files a killed writer of this host left in ``root`` and three levels
    below (``work/<stage>/shard-k/``, ``cache/frames/<encoder>/``; not ``index/``); returns how
    many. Streamed with ``scandir``: a cache folder holds a file per video."""
    def dead(folder: str, depth: int) -> Iterator[str]:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.startswith(".") and e.name.endswith(".tmp"):
                    if (m := _TEMP.match(e.name)) and dead_here(f"{m[1]}~{m[2]}"):
                        yield e.path
                elif depth < 3 and e.name != "index" and e.is_dir(follow_symlinks=False):
                    yield from dead(e.path, depth + 1)

    gone = list(dead(str(root), 0)) if root.is_dir() else []
    for path in gone:
        Path(path).unlink(missing_ok=True)
    return len(gone)


def dead_here(tag: str) -> bool:
    """Whether ``tag`` (a ``writer_tag()``) names a gone process of this host (never another
    host's, nor this one)."""
    host, _, pid = tag.rpartition("~")
    return host == HOST and pid.isdigit() and int(pid) != os.getpid() \
        and not pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    """Whether a process of this host runs with this pid (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        pass
    return True


@contextlib.contextmanager
def disk_full_as(path: Path) -> Iterator[None]:
    """A full disk inside the block is ``DiskFull`` naming ``path``: one line, no traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(exc) \
                or "Disk quota exceeded" in str(exc):
            raise DiskFull(f"{path}: no space left on device; the run stopped and left no "
                           "half-written file: free space and run the same command to "
                           "resume") from None
        raise


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp_name)``, fsync, then rename onto ``path``: readers (and a re-run after a
    crash or power loss) see the old file or the whole new one, never a torn one."""
    with disk_full_as(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{writer_tag()}.",
                                   suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            _fsync(tmp)
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(data: pd.DataFrame | pa.Table, path: Path, **options: Any) -> None:
    """Parquet with page checksums, so a flipped byte is caught on read (``open_parquet``)."""
    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, preserve_index=False)
    atomic_write(path, lambda tmp: pq.write_table(data, tmp, write_page_checksum=True,
                                                  **options))


@dataclass(frozen=True)
class JsonFolder:
    """Small JSON documents, one per stage or step, written whole; None when unreadable."""

    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write(self, name: str, data: dict[str, Any]) -> None:
        atomic_write_text(self.path(name), json.dumps(data, indent=2, default=str))

    def names(self) -> set[str]:
        return {p.stem for p in self.folder.glob("*.json")} if self.folder.is_dir() else set()


class CorruptPartWarning(UserWarning):
    """A corrupt or truncated file was found and removed; it will be recomputed."""


class CorruptFile(HowtocapError):
    """A Parquet file that is truncated or whose checksums do not match."""


def corrupt_parquet(path: Path, exc: BaseException) -> CorruptFile:
    """A Parquet file that would not read, as one line: its path and pyarrow's reason."""
    return CorruptFile(f"{path}: corrupt or truncated Parquet file "
                       f"({' '.join(str(exc).split())[:120]})")


def open_parquet(path: Path) -> Any:
    """A Parquet file to read a batch at a time in bounded memory (no ``pre_buffer``: it
    buffers whole column chunks)."""
    return pq.ParquetFile(path, page_checksum_verification=True, pre_buffer=False,
                          buffer_size=1 << 16)
