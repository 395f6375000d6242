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
from typing import TYPE_CHECKING, Any

from rich.progress import TextColumn

from howtocap.atomic import disk_full_error, is_disk_full, sweep_temp_files
from howtocap.engine.fingerprint import config_id, describe_change
from howtocap.engine.graph import StageGraph, discover
from howtocap.engine.rundir import Owner, RunDir, StatusRecord
from howtocap.engine.stage import Stage, VideoInput, VideoResult
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.hashing import hash_text
from howtocap.progress import progress_bar
from howtocap.schemas import SCHEMAS, empty_table

if TYPE_CHECKING:
    from howtocap.engine.runners import Runner


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
    failed_before: int = 0  # failed in an earlier run and left alone (see --retry-failed)
    gave_up: int = 0  # of those, failed --max-attempts times: not retried even with the flag

    @property
    def ok(self) -> bool:
        return not self.failed

    def absorb(self, again: StageSummary) -> StageSummary:
        """This summary plus a second pass over the same videos (corrupt parts redone)."""
        self.done += again.done
        self.failed += again.failed
        self.warned += again.warned
        self.skipped -= again.done + len(again.failed)
        self.seconds += again.seconds
        return self


def _inputs(rundir: RunDir, stage: Stage, item: Any) -> VideoInput | None:
    """The video's rows of the tables the stage reads; None when one of them turned out
    corrupt (removed: its own stage redoes it first, then this video runs)."""
    tables = {}
    seen = len(rundir.corrupted)
    for name in stage.reads:
        part = rundir.read_part(name, item.video_id)
        if len(rundir.corrupted) > seen:
            return None
        tables[name] = part if part is not None else (
            empty_table(name) if name in SCHEMAS else None)
    return VideoInput(item, {k: v for k, v in tables.items() if v is not None})


MAX_ATTEMPTS = 3


class SettingsChanged(HowtocapError):
    """A stage re-run with settings other than those its results were made with."""


def stage_fingerprint(stage: Stage) -> dict[str, Any]:
    fp = getattr(stage, "fingerprint", None)
    return fp() if callable(fp) else {"stage": stage.name}


def prepare_stages(rundir: RunDir, stages: Sequence[Stage], *, redo: bool = False,
                   check_only: bool = False,
                   fingerprints: dict[str, dict[str, Any]] | None = None,
                   graph: StageGraph | None = None) -> dict[str, str]:
    """Compare each stage's fingerprint with the one its results were made with, before any
    work: equal resumes; different refuses (one line naming the changed settings) unless
    ``redo``, which clears that stage and the stages downstream of it (``graph``: derived from
    the stages' declarations; by default every step's, found by ``graph.discover``). Returns
    the ``config_id`` of each stage."""
    ids: dict[str, str] = {}
    changed: list[tuple[Stage, dict[str, Any], dict[str, Any]]] = []
    if not check_only and rundir.root.is_dir():
        sweep_temp_files(rundir.root)  # what a killed writer left; never taken as done
    fps = {st.name: (fingerprints or {}).get(st.name) or stage_fingerprint(st) for st in stages}
    olds = {st.name: rundir.read_fingerprint(st.name) for st in stages}
    for st in stages:
        fp = fps[st.name]
        ids[st.name] = config_id(fp)
        old = olds[st.name]
        if old is not None and old["config_id"] != ids[st.name] and rundir.has_results(st.name):
            changed.append((st, old.get("fingerprint") or {}, fp))
    # the whole graph only when something changed (discovery imports every step's stage)
    g = (graph or discover()).with_stages(stages) if changed else StageGraph(stages)
    if changed and not redo:
        st, old_fp, fp = changed[0]
        below = g.downstream(st.name)
        also = f" and invalidate {', '.join(below)}" if below else ""
        raise SettingsChanged(
            f"{rundir.root}: {st.name} results were made with other settings "
            f"({describe_change(old_fp, fp) or 'model or schema'}); add --redo to recompute "
            f"{st.name}{also}, or write to a new --out")
    if check_only:
        return ids
    for st, _, _ in changed:
        for name in (st.name, *g.downstream(st.name)):
            rundir.invalidate(name, g.tables(name))
            olds[name] = None  # its fingerprint went with its results
    for st in stages:
        old = olds[st.name]
        if old is None or old["config_id"] != ids[st.name]:
            rundir.write_fingerprint(st.name, ids[st.name], fps[st.name])
    return ids


def run_stage(rundir: RunDir, items: Sequence[Any], stage: Stage, *,
              runner: Runner | None = None, shard: Shard | None = None,
              skip_done: bool = True, progress: bool = True, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, cid: str | None = None) -> StageSummary:
    """Run ``stage`` on every item (of this ``shard``) that has no ``ok`` status yet (every
    item when ``skip_done`` is off: for stages whose own cache makes a repeat cheap).

    A video that failed before stays failed (``status`` lists it) unless ``retry_failed``
    and it has failed fewer than ``max_attempts`` times; one that failed because a service
    was down is retried anyway (its input is fine). ``cid``: the stage's config id, from
    ``prepare_stages`` (called here when not given: it refuses changed settings)."""
    from howtocap.engine.runners import LocalRunner

    if cid is None:
        cid = prepare_stages(rundir, [stage])[stage.name]
    runner = runner or LocalRunner()
    main = stage.writes[0] if stage.writes else None
    summary = StageSummary(stage.name)
    todo = []
    attempts: dict[str, int] = {}
    for it in items if shard is None else [it for it in items if shard.owns(it.video_id)]:
        rec = rundir.status(stage.name, it.video_id)
        if rec is not None:
            attempts[it.video_id] = rec.attempts
        if not skip_done or rec is None:
            todo.append(it)
        elif rundir.record_done(rec, main, cid):
            summary.skipped += 1
        elif rec.status == "ok" or rec.config_id not in ("", cid) or rec.cause == "service":
            todo.append(it)  # a lost or torn part, or a record of other settings: redo
        elif not retry_failed:
            summary.failed_before += 1
        elif rec.attempts >= max_attempts:
            summary.failed_before += 1
            summary.gave_up += 1
        else:
            todo.append(it)
    owner = Owner.me()
    held: set[str] = set()  # claimed and not yet committed
    totals: dict[str, float] = {}  # the stages' metrics, summed (throughput in `status`)
    down: list[VideoResult] = []  # a fatal result (the LLM server is gone): stop feeding work
    t0 = time.perf_counter()

    def claimed() -> Iterator[VideoInput]:
        """Claims are taken as the runner asks for work, so two processes share a batch."""
        for it in todo:
            if down:
                return
            if not rundir.claim(stage.name, it.video_id, owner):
                summary.claimed_elsewhere += 1
                continue
            if skip_done and rundir.is_done(stage.name, it.video_id, main, cid):
                rundir.release(stage.name, it.video_id)  # finished while we were listing
                summary.skipped += 1
                continue
            video = _inputs(rundir, stage, it)
            if video is None:  # an input part was corrupt: not this video's failure
                rundir.release(stage.name, it.video_id)
                continue
            held.add(it.video_id)
            yield video

    with progress_bar(f"[bold]{stage.name}", TextColumn("{task.fields[last]}"),
                      disable=not progress) as bar:
        task = bar.add_task(stage.name, total=len(todo), last="")

        def commit(res: VideoResult) -> None:
            if res.fatal:  # not the video's fault: no status, its claim goes back below
                down.append(res)
                return
            commit_result(rundir, stage, res, config_id=cid,
                          attempts=attempts.get(res.video_id, 0) + 1)
            held.discard(res.video_id)
            for k, v in res.metrics.items():
                totals[k] = totals.get(k, 0.0) + float(v)
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
    if summary.done or summary.failed:
        rundir.add_stats(stage.name, wall_seconds=summary.seconds, videos=summary.done,
                         failed=len(summary.failed), **totals)
    if down:  # finished videos are committed; the ones in flight are simply not done
        raise ServiceUnavailable(down[0].message)
    return summary


def commit_result(rundir: RunDir, stage: Stage, res: VideoResult, *, config_id: str = "",
                  attempts: int = 1) -> None:
    """Parts first, then the status record, then the claim goes: the order a kill respects.
    Every row and the record carry the stage's ``config_id``."""
    for name, df in res.tables.items():
        if "config_id" in SCHEMAS.get(name, {}):
            df = df.assign(config_id=config_id)
        rundir.write_part(name, res.video_id, df)
    main = stage.writes[0] if stage.writes else None
    if not res.ok and main:
        # a part left by an earlier run must not be merged beside this failure
        rundir.part_path(main, res.video_id).unlink(missing_ok=True)
    if res.internal:
        log = rundir.log_path("errors")
        try:  # an append-only log, not a result: a torn last entry harms nothing
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as fh:
                fh.write(f"[{stage.name}] {res.video_id}\n{res.internal}\n")
        except OSError as exc:
            if is_disk_full(exc):
                raise disk_full_error(log) from None
            raise
    rundir.write_status(StatusRecord(res.video_id, stage.name, "ok" if res.ok else "error",
                                     " ".join(res.message.split())[:500], res.seconds,
                                     warnings=len(res.warnings),
                                     cause="" if res.ok else (res.cause or "internal"),
                                     attempts=attempts, config_id=config_id,
                                     metrics={k: float(v) for k, v in res.metrics.items()}))
    rundir.release(stage.name, res.video_id)
