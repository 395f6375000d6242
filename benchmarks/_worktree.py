"""The "before" side of a before/after benchmark: an older commit checked out as a detached git
worktree, so both versions run on the same machine, data and load in one invocation."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def add_worktree(rev: str, work: Path, prefix: str = "base") -> Path:
    """``rev`` checked out once under ``work`` (reused when already there)."""
    path = work / f"{prefix}-{rev}"
    if not (path / "src").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
                       check=True, capture_output=True)
    return path


def remove_worktree(path: Path) -> None:
    """Unregister and delete it: a worktree is recorded in the shared .git, so a benchmark
    must not leave one behind."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                   check=False, capture_output=True)
