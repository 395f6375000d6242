"""Claims: one lock file per (stage, shard), created with O_EXCL and holding its ``Owner``; a
claim whose owner is gone (same host: its process; elsewhere: not refreshed within the lease)
is taken over."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from howtocap.atomic import FILE_MODE, disk_full_as


def _start_ticks(pid: int) -> str:
    """A process's start time (Linux), so a reused pid is not taken for the old process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


LEASE = 6 * 3600.0  # seconds after which another host's claim is dead (HOWTOCAP_CLAIM_LEASE)


@dataclass(frozen=True)
class Owner:
    """This process, as written into the claims it holds."""

    host: str
    pid: int
    started: str
    lease: float = LEASE

    @classmethod
    def me(cls) -> Owner:
        lease = float(os.environ.get("HOWTOCAP_CLAIM_LEASE", LEASE))
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
        ticks = _start_ticks(pid)
        return pid != self.pid and (not ticks or ticks != held.get("started"))


def try_claim(path: Path, owner: Owner) -> bool:
    """Take the lock file ``path`` (O_EXCL) as ``owner``'s: True when taken (or already ours),
    False when a live process holds it; a dead holder's is taken over."""
    for _ in range(5):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        except FileNotFoundError:  # another worker released its last claim: the folder went
            continue
        except FileExistsError:
            with contextlib.suppress(OSError, ValueError):
                held = json.loads(path.read_text() or "{}")
                if (held.get("host"), held.get("pid")) == (owner.host, owner.pid):
                    return True
            if not owner.is_stale(path):
                return False
            _drop_stale(path, owner)  # its holder is gone
            continue
        with disk_full_as(path):
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(owner.token)
            except OSError:
                path.unlink(missing_ok=True)
                raise
        return True
    return False


def _drop_stale(path: Path, owner: Owner) -> None:
    """Remove a dead holder's lock file, asked again under an ``flock`` of a guard file: two
    processes that both found it dead would otherwise both take it (the later removing the
    lock the first had just made)."""
    with open(path.with_name(path.name + ".guard"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if owner.is_stale(path):  # still the dead holder's, not a new live one
            path.unlink(missing_ok=True)


def refresh_claim(path: Path) -> None:
    """Mark the claim as still held (another host counts it dead after the lease)."""
    with contextlib.suppress(OSError):
        os.utime(path)

