"""What every benchmark shares, so a figure is measured, described and written one way.

* where results go: ``results/<name>.json`` (what the docs render from, see ``render_docs.py``)
  and ``results/<name>.md`` (what a person reads), written together so they never disagree;
* the machine a figure was measured on (a figure without it cannot be compared);
* best-of-N wall time and peak RSS;
* one Markdown table renderer;
* an older commit checked out as a git worktree: the "before" side of a before/after run.

A script in a kind folder (``quality/``, ``speed/``, ``scale/``, ``robustness/``) puts this
folder on ``sys.path`` first: ``sys.path.insert(0, str(Path(__file__).resolve().parents[1]))``.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
DATA = BENCH / "data"
WORK = BENCH / "work"  # scratch (git-ignored): generated inputs, run directories

T = TypeVar("T")


# ---- the machine ------------------------------------------------------------------------------
def machine(*extra: str, torch_threads: bool = False) -> str:
    """One line: architecture, cores, Python, torch's threads (a model benchmark's speed
    depends on them) and whatever else the benchmark adds."""
    if torch_threads:
        import torch

        extra = (f"torch threads {torch.get_num_threads()}", *extra)
    return ", ".join([f"{platform.machine()} ({cpu_model()}), {os.cpu_count()} cores, Python "
                      f"{platform.python_version()}", *extra])


def cpu_model() -> str:
    """The CPU's name (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(**extra: Any) -> dict[str, Any]:
    """The same as fields, for a report that prints them apart; ``extra`` adds e.g. the load
    average at start and end (shared machines make times noisy: a report says how loaded)."""
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), **extra}


def load_avg() -> list[float]:
    """The 1/5/15-minute load averages now: other jobs on a shared machine add time."""
    return [round(x, 1) for x in os.getloadavg()]


def stamp() -> str:
    """When a figure was measured (UTC), for results kept across sessions."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


# ---- timing and memory ----------------------------------------------------------------------
def best_time(fn: Callable[[], T], repeats: int = 1) -> tuple[float, T]:
    """``(fastest seconds of `repeats` calls, the last call's result)``: other jobs on the
    machine only ever add time, so the minimum is the fairest single figure."""
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out  # type: ignore[return-value]


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident memory of this process (or of its waited-for children) in MB (Linux
    reports KiB)."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


# ---- writing results ------------------------------------------------------------------------
def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> list[str]:
    """A Markdown table's lines (``render_docs.py`` copies such tables into the docs);
    ``align`` has an ``r`` for each right-aligned column (numbers), e.g. ``"lrr"``."""
    rule = ["---:" if a == "r" else "---" for a in align.ljust(len(header), "l")]

    def line(cells: Iterable[Any]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"
    return [line(header), "|" + "|".join(rule) + "|", *(line(row) for row in rows)]


def write_json(name: str, result: Any, **dump: Any) -> Path:
    """``results/<name>.json`` alone (a script that writes its md later, or a partial save)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, **{"indent": 2, **dump}) + "\n")
    return path


def write_md(name: str, lines: Sequence[str] | str, echo: bool = True) -> Path:
    """``results/<name>.md`` (and the report on stdout)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
    path = RESULTS / f"{name}.md"
    path.write_text(text)
    if echo:
        print(text)
    return path


def write_results(name: str, result: Any, lines: Sequence[str] | str, echo: bool = True,
                  plot: Callable[[Path], object] | None = None, **dump: Any) -> None:
    """Both files of one benchmark, the report on stdout, and ``plot(results/<name>.png)``
    when the benchmark draws one."""
    write_json(name, result, **dump)
    write_md(name, lines, echo)
    if plot is not None:
        plot(RESULTS / f"{name}.png")


def load_results(name: str) -> Any:
    """A results file as the last run wrote it (``--render`` modes re-render from it)."""
    return json.loads((RESULTS / f"{name}.json").read_text())


# ---- run directories ---------------------------------------------------------------------------
def write_rows(rundir: Any, table: str, df: Any, stage: str | None = None) -> None:
    """Put ``df``'s rows into a run directory's ``table`` as its stage would commit them
    (videos numbered, an ``ok`` record per video, shard by shard): a benchmark builds its run
    the way the tests build theirs (``tests/support/stages.py``), not a second way."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.support.stages import write_rows as commit

    commit(rundir, table, df, stage)


# ---- before/after --------------------------------------------------------------------------
def add_worktree(rev: str, work: Path, prefix: str = "base") -> Path:
    """``rev`` checked out once under ``work`` (reused when already there): both versions run
    on the same machine, data and load in one invocation."""
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
