"""Claims: which process holds which videos of a stage, and whether a writer is alive.

A process claims videos as one file under the stage's claims folder (``claim-*.json``: its
``Owner`` and the videos), written under the folder's lock (a file created with O_EXCL); a
claim whose owner is gone (same host: its process; elsewhere: older than the lease) no longer
counts. The run directory says where the folders are (``RunDir.claim_batch``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from howtocap.atomic import FILE_MODE, HOST, disk_full_error, is_disk_full
from howtocap.engine.records import BATCH_RE

LOCK_LEASE = 120.0  # seconds after which another host's claim lock counts as dead


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


@contextlib.contextmanager
def claim_lock(folder: Path, owner: Owner) -> Iterator[None]:
    """The claims folder's lock (``.lock``, created with O_EXCL), held for the time of a
    listing; a dead holder's lock is taken over."""
    lock = folder / ".lock"
    waited = 0.0
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
            break
        except FileExistsError:
            # a holder that died (same host: process gone; elsewhere: the lock is old)
            lease = Owner(owner.host, owner.pid, owner.started, LOCK_LEASE)
            if waited > 0.05 and lease.is_stale(lock):
                lock.unlink(missing_ok=True)
                continue
            time.sleep(0.002)
            waited += 0.002
    try:
        _write_fd(fd, lock, owner.token)
        yield
    finally:
        lock.unlink(missing_ok=True)


def live_claims(folder: Path, owner: Owner) -> set[str]:
    """The videos the live claims in ``folder`` hold; a dead owner's claims are removed."""
    held: set[str] = set()
    for path in folder.glob("claim-*.json"):
        if owner.is_stale(path):
            path.unlink(missing_ok=True)
            continue
        try:
            held.update(json.loads(path.read_text()).get("videos", []))
        except (OSError, ValueError, AttributeError):
            continue  # gone meanwhile
    return held


def write_claim(path: Path, owner: Owner, videos: list[str]) -> None:
    """Create the claim file ``path`` (exclusively) listing ``videos`` as ``owner``'s."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    _write_fd(fd, path, json.dumps({**json.loads(owner.token), "videos": videos}))


def _write_fd(fd: int, path: Path, text: str) -> None:
    """Write a claim or lock file just created; a full disk removes it and is one line."""
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as exc:
        path.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full_error(path) from None
        raise


def writer_alive(batch: str) -> bool:
    """Whether the process that writes batch ``batch`` may still be writing it."""
    from howtocap.atomic import pid_alive

    m = BATCH_RE.match(batch)
    if m is None:
        return True  # not ours to judge
    if m.group(1) != HOST:
        ns = int(batch.split("-")[1])
        return time.time() - ns / 1e9 < Owner.me().lease
    return pid_alive(int(m.group(2)))
