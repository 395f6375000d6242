"""Orchestration of one stage over many videos: pick what is left, claim it, feed a runner,
commit each result to the run directory, show progress.

Only this module (through ``RunDir``) writes parts, status records and claims; stages compute,
runners decide where they compute. A committed video has its parts written (temp file +
rename) before its status record, so a kill leaves a finished part or nothing, and a re-run
redoes only what has no ``ok`` record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.progress import TextColumn

from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.progress import progress_bar
from howtocap.rundir import SCHEMAS, Owner, RunDir, StatusRecord, empty_table, hash_text
from howtocap.stage import Stage, VideoInput, VideoResult

if TYPE_CHECKING:
    from howtocap.pipeline.runners import Runner


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
    claimed_elsewhere: int = 0  # another live process on this run directory had them
    failed: list[tuple[str, str]] = field(default_factory=list)
    warned: list[tuple[str, str]] = field(default_factory=list)  # done, with caveats
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def _inputs(rundir: RunDir, stage: Stage, item: VideoItem) -> VideoInput:
    tables = {}
    for name in stage.reads:
        part = rundir.read_part(name, item.video_id)
        tables[name] = part if part is not None else (
            empty_table(name) if name in SCHEMAS else None)
    return VideoInput(item, {k: v for k, v in tables.items() if v is not None})


def run_stage(rundir: RunDir, items: Sequence[VideoItem], stage: Stage, *,
              runner: Runner | None = None, shard: Shard | None = None,
              skip_done: bool = True, progress: bool = True) -> StageSummary:
    """Run ``stage`` on every item (of this ``shard``) that has no ``ok`` status yet (every
    item when ``skip_done`` is off: for stages whose own cache makes a repeat cheap)."""
    from howtocap.pipeline.runners import LocalRunner

    runner = runner or LocalRunner()
    main = stage.writes[0] if stage.writes else None
    summary = StageSummary(stage.name)
    todo = []
    for it in items if shard is None else [it for it in items if shard.owns(it.video_id)]:
        if skip_done and rundir.is_done(stage.name, it.video_id, main):
            summary.skipped += 1
        else:
            todo.append(it)
    owner = Owner.me()
    held: set[str] = set()  # claimed and not yet committed
    t0 = time.perf_counter()

    def claimed() -> Iterator[VideoInput]:
        """Claims are taken as the runner asks for work, so two processes share a batch."""
        for it in todo:
            if not rundir.claim(stage.name, it.video_id, owner):
                summary.claimed_elsewhere += 1
                continue
            if skip_done and rundir.is_done(stage.name, it.video_id, main):
                rundir.release(stage.name, it.video_id)  # finished while we were listing
                summary.skipped += 1
                continue
            held.add(it.video_id)
            yield _inputs(rundir, stage, it)

    with progress_bar(f"[bold]{stage.name}", TextColumn("{task.fields[last]}"),
                      disable=not progress) as bar:
        task = bar.add_task(stage.name, total=len(todo), last="")

        def commit(res: VideoResult) -> None:
            commit_result(rundir, stage, res)
            held.discard(res.video_id)
            if not res.ok:
                summary.failed.append((res.video_id, res.message))
                bar.console.print(f"[red]✗[/red] {stage.name} {res.video_id}: {res.message}",
                                  markup=True, highlight=False)
            else:
                summary.done += 1
                if res.warnings:
                    summary.warned.append((res.video_id, res.message))
                    bar.console.print(f"[yellow]![/yellow] {stage.name} {res.video_id}: "
                                      f"{res.message}", markup=True, highlight=False)
            bar.update(task, advance=1, last=res.video_id)

        try:
            runner.map(stage, claimed(), commit)
        finally:  # claims of videos a crash or Ctrl-C left unfinished go back
            for vid in held:
                rundir.release(stage.name, vid)
    summary.seconds = time.perf_counter() - t0
    return summary


def commit_result(rundir: RunDir, stage: Stage, res: VideoResult) -> None:
    """Parts first, then the status record, then the claim goes: the order a kill respects."""
    for name, df in res.tables.items():
        rundir.write_part(name, res.video_id, df)
    main = stage.writes[0] if stage.writes else None
    if not res.ok and main:
        # a part left by an earlier run must not be merged beside this failure
        rundir.part_path(main, res.video_id).unlink(missing_ok=True)
    if res.internal:
        log = rundir.log_path("errors")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"[{stage.name}] {res.video_id}\n{res.internal}\n")
    rundir.write_status(StatusRecord(res.video_id, stage.name, "ok" if res.ok else "error",
                                     " ".join(res.message.split())[:500], res.seconds,
                                     warnings=len(res.warnings)))
    rundir.release(stage.name, res.video_id)
