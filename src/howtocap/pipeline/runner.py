"""The local runner: skip finished videos, run a stage per video, record status, show progress.

Stages never see the runner; the runner never knows what a stage computes. A stage is
``fn(item) -> {table: DataFrame}``; raising records an error for that video only.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import pandas as pd
from rich.progress import TextColumn

from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.progress import progress_bar
from howtocap.rundir import RunDir, StatusRecord, hash_text

StageFn = Callable[[VideoItem], dict[str, pd.DataFrame]]


@dataclass(frozen=True)
class Shard:
    """``K/N``: this worker owns the videos whose stable id hash is K mod N. N machines on one
    shared run directory split a batch without talking to each other (parts are per video)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str | None) -> Shard | None:
        if not text:
            return None
        try:
            k, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise HowtocapError(f"--shard takes K/N (e.g. 0/8), got {text!r}") from None
        if not 0 <= k < n:
            raise HowtocapError(f"--shard {text}: need 0 <= K < N")
        return cls(k, n)

    def owns(self, video_id: str) -> bool:
        return hash_text(video_id) % self.count == self.index


@dataclass
class StageSummary:
    stage: str
    done: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def one_line(exc: BaseException) -> str:
    """A user mistake reads as its message; anything else as ``Type: message``, one line."""
    msg = str(exc) if isinstance(exc, HowtocapError) else f"{type(exc).__name__}: {exc}"
    return " ".join(msg.split())[:500] or type(exc).__name__


def run_stage(rundir: RunDir, items: Sequence[VideoItem], stage: str, fn: StageFn,
              *, main_table: str | None = None, workers: int = 1,
              progress: bool = True, skip_done: bool = True,
              shard: Shard | None = None) -> StageSummary:
    """Run ``fn`` on every item that has no ``ok`` status for ``stage`` yet (on every item
    when ``skip_done`` is off: for stages whose own cache makes a repeat cheap)."""
    summary = StageSummary(stage)
    todo = []
    for it in items if shard is None else [it for it in items if shard.owns(it.video_id)]:
        if skip_done and rundir.is_done(stage, it.video_id, main_table):
            summary.skipped += 1
        else:
            todo.append(it)
    t0 = time.perf_counter()
    log_lock = threading.Lock()

    def work(item: VideoItem) -> tuple[VideoItem, str | None]:
        start = time.perf_counter()
        try:
            tables = fn(item)
            for name, df in tables.items():
                rundir.write_part(name, item.video_id, df)
            err = None
        except Exception as exc:  # one video's failure must not stop the batch
            err = one_line(exc)
            if not isinstance(exc, HowtocapError):
                with log_lock:
                    log = rundir.root / "logs" / "errors.log"
                    log.parent.mkdir(parents=True, exist_ok=True)
                    with log.open("a") as fh:
                        fh.write(f"[{stage}] {item.video_id}\n{traceback.format_exc()}\n")
        rundir.write_status(StatusRecord(item.video_id, stage, "error" if err else "ok",
                                         err or "", time.perf_counter() - start))
        return item, err

    with progress_bar(f"[bold]{stage}", TextColumn("{task.fields[last]}"),
                      disable=not progress) as bar:
        task = bar.add_task(stage, total=len(todo), last="")
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(work, it) for it in todo]
            for fut in as_completed(futures):
                item, err = fut.result()
                if err:
                    summary.failed.append((item.video_id, err))
                    bar.console.print(f"[red]✗[/red] {stage} {item.video_id}: {err}",
                                      markup=True, highlight=False)
                else:
                    summary.done += 1
                bar.update(task, advance=1, last=item.video_id)
    summary.seconds = time.perf_counter() - t0
    return summary
