"""Claims: a shard is worked on by the process holding an ``flock`` on its lock file; the
kernel drops it when the process dies (SIGKILL too), so no dead holder is ever looked for."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

from howtocap.atomic import FILE_MODE, disk_full_as
from howtocap.errors import HowtocapError

_held: dict[str, int] = {}  # this process's claims: lock file (resolved) -> its locked fd
_guard = threading.Lock()


def claim(path: Path) -> bool:
    """Lock ``path``: True when locked (or already this process's), False at once when another
    process holds it."""
    key = str(path.resolve())
    with _guard, disk_full_as(path):
        while key not in _held:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            except FileNotFoundError:  # another's release removed the empty folder: again
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with contextlib.suppress(FileNotFoundError):  # unlinked by a release: again
                    if os.path.samestat(os.fstat(fd), os.stat(path)):
                        _held[key] = fd
            except BlockingIOError:  # another live process holds it
                return False
            except OSError as exc:  # e.g. Lustre mounted without -o flock
                raise HowtocapError(f"{path}: no file lock ({exc.strerror}): claims need a "
                                    "file system with working locks (docs/runs.md)") from None
            finally:
                if key not in _held:
                    os.close(fd)
        return True


def release(path: Path) -> None:
    """The file goes before its lock: whoever locks it next finds it unlinked."""
    with _guard:
        if (fd := _held.pop(str(path.resolve()), None)) is not None:  # never another's
            path.unlink(missing_ok=True)
            os.close(fd)
    with contextlib.suppress(OSError):  # the folders go with their last claim
        path.parent.rmdir()
        path.parent.parent.rmdir()
