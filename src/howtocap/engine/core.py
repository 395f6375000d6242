"""Orchestration of one stage over many videos: pick what is left, claim it a batch at a
time, feed a runner, commit results in batches to the run directory, show progress.

Only this module (through ``RunDir``) writes batches, status records and claims; stages
compute, runners decide where they compute. A batch has its table files written (temp file +
rename) before its manifest (the batch's status records), so a kill leaves whole batches or
no manifest, and a re-run redoes only what has no ``ok`` record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.progress import TextColumn

from howtocap.atomic import disk_full_error, is_disk_full, sweep_temp_files
from howtocap.engine.claims import Owner
from howtocap.engine.fingerprint import config_id, describe_change
from howtocap.engine.graph import StageGraph, discover
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import Stage, VideoInput, VideoResult
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.hashing import hash_text
from howtocap.progress import progress_bar
from howtocap.schemas import SCHEMAS, Rows, empty_rows, empty_table, rows_to_arrow

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

    def add(self, other: StageSummary) -> StageSummary:
        """This summary plus the stage's run over other videos (a run taken a window of
        videos at a time reports once for all of them)."""
        self.done += other.done
        self.skipped += other.skipped
        self.claimed_elsewhere += other.claimed_elsewhere
        self.failed += other.failed
        self.warned += other.warned
        self.seconds += other.seconds
        self.failed_before += other.failed_before
        self.gave_up += other.gave_up
        return self

    def absorb(self, again: StageSummary) -> StageSummary:
        """This summary plus a second pass over the same videos (corrupt parts redone)."""
        self.done += again.done
        self.failed += again.failed
        self.warned += again.warned
        self.skipped -= again.done + len(again.failed)
        self.seconds += again.seconds
        return self


def _inputs(rundir: RunDir, stage: Stage, item: Any,
            batches: dict[str, str | None] | None = None) -> VideoInput | None:
    """The video's rows of the tables the stage reads; None when one of them turned out
    corrupt (removed: its own stage redoes it first, then this video runs). ``batches``:
    where each table's rows are, when looked up for the claimed batch at once
    (``RunDir.live_batches``, columnar stages)."""
    tables: dict[str, Any] = {}
    seen = len(rundir.corrupted)
    columnar = getattr(stage, "columnar", False)
    for name in stage.reads:
        if columnar:
            part = rundir.read_rows(name, item.video_id,
                                    False if batches is None else batches[name])
        else:
            part = rundir.read_part(name, item.video_id)
        if len(rundir.corrupted) > seen:
            return None
        if part is None and name in SCHEMAS:
            part = empty_rows(name) if columnar else empty_table(name)
        tables[name] = part
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
        rundir.sweep_orphans()  # table files of a batch whose manifest never came
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


BATCH_SIZE = 1000  # videos a batch commits at most (``--batch-size``)
BATCH_SECONDS = 60.0  # a batch is committed once its oldest result waited this long


@dataclass(frozen=True)
class Batching:
    """How often a stage commits its finished videos: every ``size`` videos, or once the
    oldest waited ``seconds`` (``--batch-size`` / ``--batch-seconds``). A kill loses the batch
    in flight; smaller batches lose less and write more files. Passed down from the command
    to every stage it runs (``None`` anywhere: these defaults)."""

    size: int = BATCH_SIZE
    seconds: float = BATCH_SECONDS

    def __post_init__(self) -> None:
        if self.size < 1 or self.seconds < 0:
            raise HowtocapError(f"--batch-size must be >= 1 and --batch-seconds >= 0, got "
                                f"{self.size}, {self.seconds}")

    @classmethod
    def of(cls, size: int | None = None, seconds: float | None = None) -> Batching:
        """The given settings, the defaults for those not given."""
        return cls(BATCH_SIZE if size is None else size,
                   BATCH_SECONDS if seconds is None else seconds)


def _select(rundir: RunDir, stage: Stage, items: Sequence[Any], main: str | None, cid: str,
            skip_done: bool, retry_failed: bool, max_attempts: int,
            summary: StageSummary) -> tuple[list[Any], dict[str, int]]:
    """What is left to do, from the stage's newest records (column-wise: a HowTo100M run
    lists 1.2M videos), and the attempts each listed video has had."""
    col = rundir.newest_of(stage.name, [it.video_id for it in items],
                           ("status", "config_id", "cause", "attempts", "batch"))
    todo: list[Any] = []
    attempts: dict[str, int] = {}
    whole: dict[str, bool] = {}  # per batch: its main table file is whole
    for p, it in enumerate(items):
        if not col["found"][p]:
            todo.append(it)
            continue
        status, rec_cid, cause = col["status"][p], col["config_id"][p], col["cause"][p]
        attempts[it.video_id] = int(col["attempts"][p])
        if not skip_done:
            todo.append(it)
            continue
        done = status == "ok" and (not rec_cid or rec_cid == cid)
        if done and main is not None:
            batch = col["batch"][p]
            if batch:
                if batch not in whole:
                    whole[batch] = rundir.is_done(stage.name, it.video_id, main, cid)
                done = whole[batch]
            else:
                done = rundir.is_done(stage.name, it.video_id, main, cid)
        if done:
            summary.skipped += 1
        elif status == "ok" or rec_cid not in ("", cid) or cause == "service":
            todo.append(it)  # a lost or torn part, or a record of other settings: redo
        elif not retry_failed:
            summary.failed_before += 1
        elif attempts[it.video_id] >= max_attempts:
            summary.failed_before += 1
            summary.gave_up += 1
        else:
            todo.append(it)
    if stage.reads and len(todo) > 1:  # visit the inputs batch by batch (read once each)
        src = rundir.source_batches(stage.reads[0], [it.video_id for it in todo])
        order = sorted(range(len(todo)), key=lambda i: src[i])
        todo = [todo[i] for i in order]
    return todo, attempts


def run_stage(rundir: RunDir, items: Sequence[Any], stage: Stage, *,
              runner: Runner | None = None, shard: Shard | None = None,
              skip_done: bool = True, progress: bool = True, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, cid: str | None = None,
              batching: Batching | None = None) -> StageSummary:
    """Run ``stage`` on every item (of this ``shard``) that has no ``ok`` status yet (every
    item when ``skip_done`` is off: for stages whose own cache makes a repeat cheap).

    A video that failed before stays failed (``status`` lists it) unless ``retry_failed``
    and it has failed fewer than ``max_attempts`` times; one that failed because a service
    was down is retried anyway (its input is fine). ``cid``: the stage's config id, from
    ``prepare_stages`` (called here when not given: it refuses changed settings).

    Videos are claimed ``batching.size`` at a time and their results committed in batches of
    up to that many videos or ``batching.seconds`` (``Batching``), each batch atomically
    (``RunDir.commit_batch``): a kill loses the batch in flight, nothing else."""
    from howtocap.engine.runners import LocalRunner

    size, seconds = (batching or Batching()).size, (batching or Batching()).seconds
    if cid is None:
        cid = prepare_stages(rundir, [stage])[stage.name]
    runner = runner or LocalRunner()
    main = stage.writes[0] if stage.writes else None
    summary = StageSummary(stage.name)
    mine = items if shard is None else [it for it in items if shard.owns(it.video_id)]
    todo, attempts = _select(rundir, stage, mine, main, cid, skip_done, retry_failed,
                             max_attempts, summary)
    owner = Owner.me()
    claims: dict[Path, set[str]] = {}  # claim file -> its videos not yet committed
    claim_of: dict[str, Path] = {}
    totals: dict[str, float] = {}  # the stages' metrics, summed (throughput in `status`)
    down: list[VideoResult] = []  # a fatal result (the LLM server is gone): stop feeding work
    pending: list[VideoResult] = []  # finished, not yet committed
    t0 = time.perf_counter()
    first = [0.0]  # when the oldest pending result arrived

    mark = [rundir.manifests_read(stage.name)]  # manifests read when listing
    recent: list[set[str]] = [set()]  # ok in manifests read since (ours or another's)

    def still_to_do(vid: str) -> bool:
        if skip_done and vid in recent[0]:
            summary.skipped += 1  # finished elsewhere while we were listing
            return False
        return True

    def claimed() -> Iterator[VideoInput]:
        """Claims are taken a batch at a time as the runner asks for work, so two processes
        share a run: each holds whole batches the other does not."""
        for lo in range(0, len(todo), size):
            if down:
                return
            chunk = todo[lo:lo + size]

            def keep(vid: str, fresh: list[bool] = [True]) -> bool:  # noqa: B006
                # called under the claim lock, the manifests just re-read: what finished
                # since is looked up at the batch's first video (two stat calls a video)
                if fresh[0]:
                    fresh[0] = False
                    if mark[0] != rundir.manifests_read(stage.name):
                        more, mark[0] = rundir.finished_since(stage.name, mark[0])
                        recent[0] |= more
                return still_to_do(vid)

            path, taken, elsewhere = rundir.claim_batch(
                stage.name, [it.video_id for it in chunk], owner, keep)
            summary.claimed_elsewhere += elsewhere
            if path is None:
                continue
            claims[path] = set(taken)
            keep = set(taken)
            mine = [it for it in chunk if it.video_id in keep]
            # where their inputs are, looked up at once (one look-up a video was a third of
            # the committing thread's time on a text-only run)
            where = {name: rundir.live_batches(name, [it.video_id for it in mine])
                     for name in stage.reads} if getattr(stage, "columnar", False) else {}
            for k, it in enumerate(mine):
                if down:
                    return
                video = _inputs(rundir, stage, it,
                                {n: b[k] for n, b in where.items()} if where else None)
                if video is None:  # an input part was corrupt: not this video's failure
                    _settle(it.video_id)
                    continue
                claim_of[it.video_id] = path
                yield video

    def _settle(vid: str) -> None:
        """The video is committed or given back: its claim file goes with its last video."""
        path = claim_of.pop(vid, None) or next((p for p, v in claims.items() if vid in v),
                                               None)
        if path is not None and path in claims:
            claims[path].discard(vid)
            if not claims[path]:
                del claims[path]
                rundir.release_claim(path)

    def flush() -> None:
        if not pending:
            return
        batch = list(pending)
        commit_batch(rundir, stage, batch, config_id=cid, attempts=attempts)
        pending.clear()
        for res in batch:
            _settle(res.video_id)

    with progress_bar(f"[bold]{stage.name}", TextColumn("{task.fields[last]}"),
                      disable=not progress) as bar:
        task = bar.add_task(stage.name, total=len(todo), last="")

        def commit(res: VideoResult) -> None:
            if res.fatal:  # not the video's fault: no status, its claim goes back below
                down.append(res)
                return
            if not pending:
                first[0] = time.monotonic()
            pending.append(res)
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
            if len(pending) >= size or time.monotonic() - first[0] >= seconds:
                flush()

        try:
            try:
                runner.map(stage, claimed(), commit)
            finally:  # finished work is kept, whatever stopped the runner
                flush()
        finally:  # claims of videos a crash or Ctrl-C left unfinished go back
            for path in list(claims):
                rundir.release_claim(path)
    summary.seconds = time.perf_counter() - t0
    if summary.done or summary.failed:
        rundir.add_stats(stage.name, wall_seconds=summary.seconds, videos=summary.done,
                         failed=len(summary.failed), **totals)
    if down:  # finished videos are committed; the ones in flight are simply not done
        raise ServiceUnavailable(down[0].message)
    return summary


def commit_batch(rundir: RunDir, stage: Stage, results: Sequence[VideoResult], *,
                 config_id: str = "", attempts: dict[str, int] | None = None) -> str:
    """One batch of results, atomically: a file per table, then the manifest (``RunDir.
    commit_batch``). Every row and record carry the stage's ``config_id``; a failed video has
    no rows (its newest record, the failure, supersedes an older result)."""
    tables: dict[str, list[Any]] = {}
    records = []
    # in id order: a batch file's rows are grouped by video in id order, which a table
    # built from them already is (no sort of its rows; ids order alike in Python and Arrow)
    for res in sorted(results, key=_by_video):
        if res.ok:
            for name, df in res.tables.items():
                if "config_id" in SCHEMAS.get(name, {}):
                    if isinstance(df, Rows):
                        df.cols["config_id"] = config_id
                    else:
                        df = df.assign(config_id=config_id)
                tables.setdefault(name, []).append(df)  # conformed once, per batch
        if res.internal:
            _log_error(rundir, stage, res)
        records.append(StatusRecord(res.video_id, stage.name, "ok" if res.ok else "error",
                                    " ".join(res.message.split())[:500], res.seconds,
                                    warnings=len(res.warnings),
                                    cause="" if res.ok else (res.cause or "internal"),
                                    attempts=(attempts or {}).get(res.video_id, 0) + 1,
                                    config_id=config_id,
                                    metrics={k: float(v) for k, v in res.metrics.items()}))
    return rundir.commit_batch(stage.name, stage.writes, records,
                               {name: _one_table(name, parts) for name, parts in tables.items()})


_by_video = attrgetter("video_id")


def _one_table(name: str, parts: list[Any]) -> Any:
    """A batch's rows of one table: an Arrow table when every video gave plain columns
    (``Rows``: no pandas on the text-only path), else one frame."""
    if all(isinstance(p, Rows) for p in parts) and name in SCHEMAS:
        return rows_to_arrow(name, parts)
    dfs = [p.to_pandas() if isinstance(p, Rows) else p for p in parts]
    return pd.concat(dfs, ignore_index=True) if len(dfs) > 1 else dfs[0]


def _log_error(rundir: RunDir, stage: Stage, res: VideoResult) -> None:
    log = rundir.log_path("errors")
    try:  # an append-only log, not a result: a torn last entry harms nothing
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"[{stage.name}] {res.video_id}\n{res.internal}\n")
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(log) from None
        raise
