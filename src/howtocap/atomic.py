"""Files that are whole or absent: atomic writes (temp file + fsync + rename), a full disk as one
line (``DiskFull``), and telling a torn or corrupt Parquet file from a good one.

Bottom layer: imports nothing of the package but ``errors``, so every writer (run directory,
caches, exports, checkpoints) uses it without pulling in the run-directory layout.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.errors import HowtocapError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp alone gives 0600


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


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a no-op where a directory cannot be synced)."""
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


def host_tag() -> str:
    import socket

    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]


HOST = host_tag()


def writer_tag() -> str:
    """Which host and process is writing (in temp names). The pid is read at each write, not
    at import: a forked child (multiprocessing, a benchmark's workers) must not sign its temp
    files with its parent's pid, or a resume would take them for a live writer's and keep them."""
    return f"{HOST}~{os.getpid()}"

_TEMP = re.compile(r"^\..+\.([A-Za-z0-9-]*)~(\d+)\.[^.]+\.tmp$")


def sweep_temp_files(root: Path) -> int:
    """Remove temp files a killed writer of this host left (never another host's, never a
    live process's) in ``root`` and three levels below (``work/<stage>/shard-k/`` holds a
    shard's chunks; ``cache/`` and ``index/`` are not walked); returns how many went."""
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
                if m and dead_here(f"{m.group(1)}~{m.group(2)}"):
                    Path(e.path).unlink(missing_ok=True)
                    removed += 1
        folders = nxt
    return removed


def dead_here(tag: str) -> bool:
    """Whether ``tag`` (a ``writer_tag()``: ``<host>~<pid>``) names a process of this host
    that is gone, so what it left (temp files, scratch folders) may go. Another host's
    processes are never judged, nor this one."""
    host, _, pid = tag.rpartition("~")
    return host == HOST and pid.isdigit() and int(pid) != os.getpid() \
        and not pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    """Whether a process of this host runs with this pid (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@contextlib.contextmanager
def disk_full_as(path: Path) -> Iterator[None]:
    """A full disk inside the block is ``DiskFull`` naming ``path``: what the user asked for,
    also when the write that failed was a scratch file of it (a merge level, a spilled
    index), so a user never sees a traceback for a full disk."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path) from None
        raise


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """``write(tmp_name)``, fsync, then rename onto ``path``: readers (and a re-run after a
    crash or power loss) see the old file or the whole new one, never a torn one. A full disk
    raises ``DiskFull`` (one line) after removing the temp file."""
    with disk_full_as(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{writer_tag()}.",
                                   suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            _fsync_file(tmp)
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(path, write)


def atomic_write_parquet(df: pd.DataFrame, path: Path, row_group_size: int | None = None
                         ) -> None:
    """Parquet with page checksums, so a flipped byte is caught on read (``read_parquet``);
    ``row_group_size``: rows a row group holds at most (pyarrow's default: 1M)."""
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False, write_page_checksum=True,
                                                 row_group_size=row_group_size))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class CorruptPartWarning(UserWarning):
    """A corrupt or truncated file was found and removed; it will be recomputed."""


class CorruptFile(HowtocapError):
    """A Parquet file that is truncated or whose checksums do not match."""


def corrupt_parquet(path: Path, exc: BaseException, width: int = 120) -> CorruptFile:
    """The error a Parquet file that would not read becomes: its path and the first
    ``width`` characters of pyarrow's reason, on one line."""
    return CorruptFile(f"{path}: corrupt or truncated Parquet file "
                       f"({' '.join(str(exc).split())[:width]})")


def read_parquet(path: Path, **kwargs: Any) -> pd.DataFrame:
    """``pd.read_parquet`` verifying page checksums; a torn or corrupt file raises
    ``CorruptFile`` naming it (a missing file stays ``FileNotFoundError``)."""
    import pyarrow as pa

    try:
        return pd.read_parquet(path, page_checksum_verification=True, **kwargs)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise corrupt_parquet(path, exc) from None


STREAM_BUFFER = 1 << 16  # bytes of a column chunk a streamed Parquet file reads ahead


def open_parquet(path: Path, *, verify: bool = True) -> Any:
    """A Parquet file to read a record batch at a time in bounded memory (``verify``: page
    checksums checked). Without ``pre_buffer`` (pyarrow's default), ``iter_batches`` buffered
    whole column chunks as it went: 1.5M rows of scores peaked at 126 MB of Arrow memory,
    against 35 MB without."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, page_checksum_verification=verify, pre_buffer=False,
                          buffer_size=STREAM_BUFFER)


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
