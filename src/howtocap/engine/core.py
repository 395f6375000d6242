"""One stage over many videos, a shard at a time: claim each shard with work left, feed its
videos to a runner, commit results in chunks, finish the shard. Only this module (through
``RunDir``) writes results, records and claims; a re-run redoes what has no ``ok`` record."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from rich.progress import TextColumn

from howtocap.atomic import disk_full_as, sweep_temp_files
from howtocap.engine import processes
from howtocap.engine.fingerprint import config_id, describe_change
from howtocap.engine.graph import StageGraph, discover
from howtocap.engine.options import BatchConfig, Shard
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir, ShardWriter
from howtocap.engine.runners import LocalRunner, Runner
from howtocap.engine.stage import (
    MAX_ATTEMPTS,
    Stage,
    VideoInput,
    VideoResult,
)
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.progress import progress_bar
from howtocap.schemas import FREE_TEXT, SCHEMAS, Rows, empty_rows, empty_table, rows_to_arrow


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
        """This summary plus the stage's run over other videos."""
        for f in fields(self)[1:]:
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def absorb(self, again: StageSummary) -> StageSummary:
        """This summary plus a second pass over the same videos (corrupt parts redone)."""
        self.done += again.done
        self.failed += again.failed
        self.warned += again.warned
        self.skipped -= again.done + len(again.failed)
        self.seconds += again.seconds
        return self


class SettingsChanged(HowtocapError):
    """A stage re-run with settings other than those its results were made with."""


def prepare_stages(rundir: RunDir, stages: Sequence[Stage], *, redo: bool = False,
                   check_only: bool = False, graph: StageGraph | None = None) -> dict[str, str]:
    """Compare each stage's fingerprint with the one its results were made with, before any
    work: equal resumes; different refuses (one line naming the changed settings) unless
    ``redo``, which clears that stage and the stages downstream of it (``graph``; by default
    ``graph.discover``'s). Returns the ``config_id`` of each stage."""
    if not check_only:
        sweep_temp_files(rundir.root)  # what a killed writer left; never taken as done
    fps = {st.name: st.fingerprint() if callable(getattr(st, "fingerprint", None))
           else {"stage": st.name} for st in stages}
    ids = {name: config_id(fp) for name, fp in fps.items()}
    olds = {st.name: rundir.fingerprints.read(st.name) for st in stages}
    with_results = rundir.stages_with_results()
    changed = [name for name, old in olds.items() if old is not None
               and old.get("config_id") != ids[name] and name in with_results]
    # the whole graph only when something changed (discovery imports every step's stage)
    g = (graph or discover()).with_stages(stages) if changed else StageGraph(stages)
    if changed and not redo:
        name = changed[0]
        below = g.downstream(name)
        also = f" and invalidate {', '.join(below)}" if below else ""
        was = describe_change((olds[name] or {}).get("fingerprint") or {}, fps[name])
        raise SettingsChanged(
            f"{rundir.root}: {name} results were made with other settings "
            f"({was or 'model or schema'}); add --redo to recompute {name}{also}, or write "
            f"to a new --out")
    if check_only:
        return ids
    for changed_name in changed:
        for name in (changed_name, *g.downstream(changed_name)):
            rundir.invalidate(name, g.tables(name))
            olds[name] = None  # its fingerprint went with its results
    for name, fp in fps.items():
        if (olds[name] or {}).get("config_id") != ids[name]:
            rundir.fingerprints.write(name, {"config_id": ids[name], "fingerprint": fp})
    return ids


def _todo(recs: Any, items: Sequence[Any], args: _PlanArgs, summary: StageSummary
          ) -> tuple[list[Any], dict[str, int]]:
    """What of a shard's ``items`` is left to do, from its records (``ShardWriter.records``),
    and the attempts each has had; counts what is skipped into ``summary``."""
    found = {r[0]: r[1:] for r in zip(*(recs.column(c).to_pylist()
                                        for c in ("video_id", *_SELECT_COLS)), strict=True)}
    todo: list[Any] = []
    attempts: dict[str, int] = {}
    unique: dict[str, Any] = {}
    for it in items:  # given twice: done once (its rows would be written twice)
        unique.setdefault(it.video_id, it)
    for it in unique.values():
        status, rec_cid, cause, tries = found.get(it.video_id, (None, "", "", 0))
        if status is not None:
            attempts[it.video_id] = int(tries)
        if status is None or not args.skip_done:
            todo.append(it)
        elif status == "ok" and (not rec_cid or rec_cid == args.cid):
            summary.skipped += 1
        elif status == "ok" or rec_cid not in ("", args.cid) or cause == "service" \
                or (args.retry_failed and tries < args.max_attempts):
            todo.append(it)  # other settings, a service was down, or retried: redo
        else:
            summary.failed_before += 1
            summary.gave_up += args.retry_failed
    return todo, attempts


_SELECT_COLS = ("status", "config_id", "cause", "attempts")


def _by_shard(rundir: RunDir, items: Sequence[Any],
              shards: Iterable[int] | None) -> Iterator[tuple[int, list[Any]]]:
    """``(shard, its items)`` in shard order, within ``shards``; unnumbered items are recorded
    first."""
    ids = [it.video_id for it in items]
    ks = rundir.shard_of(ids)
    if (ks < 0).any():
        rundir.record_videos(it for it, k in zip(items, ks, strict=True) if k < 0)
        ks = rundir.shard_of(ids)
    order = np.argsort(ks, kind="stable")
    wanted = None if shards is None else set(shards)
    for group in np.split(order, np.flatnonzero(np.diff(ks[order])) + 1) if len(order) else []:
        k = int(ks[group[0]])
        if wanted is None or k in wanted:
            yield k, [items[i] for i in group.tolist()]


@dataclass
class _Open:
    """A claimed shard while its videos run: results wait in ``pending`` for the next chunk."""

    writer: ShardWriter
    attempts: dict[str, int]
    left: int  # videos handed out whose results have not come back
    fed: bool = False  # every video of the shard handed out
    pending: list[VideoResult] = field(default_factory=list)
    first: float = 0.0  # when the oldest pending result arrived


def run_stage(rundir: RunDir, items: Sequence[Any], stage: Stage, *,
              runner: Runner | None = None, shard: Shard | None = None,
              skip_done: bool = True, progress: bool = True, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, cid: str | None = None,
              batching: BatchConfig | None = None, shards: Iterable[int] | None = None
              ) -> StageSummary:
    """Run ``stage`` on every item (of ``shards`` and ``--shard K/N``) without an ``ok`` record
    (every item when ``skip_done`` is off: a stage whose own cache makes a repeat cheap).
    A failed video stays failed unless ``retry_failed`` and it failed under ``max_attempts``
    times; one failed because a service was down is retried anyway."""
    if cid is None:
        cid = prepare_stages(rundir, [stage])[stage.name]
    runner = runner or LocalRunner()
    summary = StageSummary(stage.name)
    args = _PlanArgs(cid, skip_done, retry_failed, max_attempts, batching or BatchConfig())
    plan = []  # shards with work, as far as their records tell before claiming
    expected = 0
    for k, its in _by_shard(rundir, items, shards):
        if shard is not None and not shard.owns(k):
            continue
        w = rundir.writer(stage.name, k, stage.writes)
        counted = StageSummary(stage.name)  # kept only when the shard has nothing to do
        todo, _ = _todo(w.records(_SELECT_COLS), its, args, counted)
        if todo or w.chunk_ids():
            plan.append((k, its))
            expected += len(todo)
        else:
            summary.add(counted)
    t0 = time.perf_counter()
    processes = getattr(runner, "processes", 1)
    with progress_bar(f"[bold]{stage.name}", TextColumn("{task.fields[last]}"),
                      disable=not progress) as bar:
        task = bar.add_task(stage.name, total=expected, last="")

        def shown(video_id: str, ok: bool, message: str, warned: bool) -> None:
            if not ok or warned:  # the one line a failed or warned video gets
                mark = "[yellow]![/yellow]" if ok else "[red]✗[/red]"
                bar.console.print(f"{mark} {stage.name} {video_id}: {message}", markup=True,
                                  highlight=False)
            bar.update(task, advance=1, last=video_id)

        if processes > 1 and len(plan) > 1:
            totals, down = _run_in_processes(rundir, plan, stage, runner, args, summary,
                                             bar.console, shown, min(processes, len(plan)))
        else:
            totals, down = run_plan(rundir, plan, stage, runner, args, summary, shown)
    summary.seconds = time.perf_counter() - t0
    if summary.done or summary.failed:  # added to the stage's totals, for `status`
        stats = rundir.stats.read(stage.name) or {}
        for key, v in {"wall_seconds": summary.seconds, "videos": summary.done,
                       "failed": len(summary.failed), **totals}.items():
            stats[key] = float(stats.get(key, 0.0)) + float(v)
        rundir.stats.write(stage.name, stats)
    if down:  # finished videos are committed; the ones in flight are simply not done
        raise ServiceUnavailable(down[0])
    return summary


@dataclass(frozen=True)
class _PlanArgs:
    """What decides, per shard, which videos run and how their results are committed."""

    cid: str
    skip_done: bool
    retry_failed: bool
    max_attempts: int
    batching: BatchConfig


def run_plan(rundir: RunDir, plan: list[tuple[int, list[Any]]], stage: Stage, runner: Runner,
             args: _PlanArgs, summary: StageSummary, shown: Any
             ) -> tuple[dict[str, float], list[str]]:
    """The planned shards in this process: each claimed, its videos fed to ``runner``, its
    results committed in chunks. Returns the stage's metrics summed and the message of a
    fatal result (a service every video needs is gone: no more work is fed)."""
    size, seconds = args.batching.batch_size, args.batching.batch_seconds
    opened: dict[int, _Open] = {}
    totals: Counter[str] = Counter()  # the stage's metrics, summed (throughput in `status`)
    down: list[str] = []  # a fatal result (the LLM server is gone): stop feeding work
    owner_of: dict[str, int] = {}  # each video handed out: its shard

    def claimed() -> Iterator[VideoInput]:
        for k, its in plan:
            if down:
                return
            w = rundir.writer(stage.name, k, stage.writes)
            if not w.claim():
                summary.claimed_elsewhere += len(its)
                continue
            todo, attempts = _todo(w.records(_SELECT_COLS), its, args, summary)
            sh = opened[k] = _Open(w, attempts, len(todo))
            inputs = _shard_inputs(rundir, stage, k)
            if inputs is None:  # an input file was corrupt: its own stage redoes it first
                sh.left = 0
                todo = []
            for it in todo:
                if down:
                    return
                owner_of[it.video_id] = k
                yield VideoInput(it, inputs(it.video_id))
            sh.fed = True
            if not sh.left:
                _close(k)

    def flush(sh: _Open) -> None:
        if sh.pending:
            batch, sh.pending = sh.pending, []
            commit_chunk(sh.writer, stage, batch, config_id=args.cid, attempts=sh.attempts)

    def _close(k: int) -> None:
        sh = opened.pop(k)
        try:
            flush(sh)
            sh.writer.finish()
        finally:
            sh.writer.release()

    def commit(res: VideoResult) -> None:
        k = owner_of.pop(res.video_id, -1)
        sh = opened.get(k)
        if res.fatal or sh is None:  # not the video's fault: no record, redone later
            if res.fatal:
                down.append(res.message)
            return
        sh.left -= 1
        if not sh.pending:
            sh.first = time.monotonic()
        sh.pending.append(res)
        totals.update({key: float(v) for key, v in res.metrics.items()})
        if not res.ok:
            summary.failed.append((res.video_id, res.message))
        else:
            summary.done += 1
            if res.warnings:
                summary.warned.append((res.video_id, res.message))
        shown(res.video_id, res.ok, res.message, bool(res.warnings))
        if sh.fed and not sh.left:
            _close(k)
        elif len(sh.pending) >= size or time.monotonic() - sh.first >= seconds:
            flush(sh)

    try:
        try:
            runner.map(stage, claimed(), commit)
        finally:  # finished work is kept, whatever stopped the runner
            for sh in list(opened.values()):
                flush(sh)
    finally:  # claims of shards a crash or Ctrl-C left unfinished go back
        for sh in list(opened.values()):
            sh.writer.release()
        opened.clear()
    return totals, down


def _run_in_processes(rundir: RunDir, plan: list[tuple[int, list[Any]]], stage: Stage,
                      runner: Runner, args: _PlanArgs, summary: StageSummary, console: Any,
                      shown: Any, n: int) -> tuple[dict[str, float], list[str]]:
    """``run_plan`` over ``n`` processes (``engine.processes``), a task a shard; the stage's
    totals are written once, here, so the processes never write the same file. A stage
    holding an object its caller built runs here instead."""
    if not processes.portable(stage):
        console.print(f"{stage.name}: holds a model built by its caller, so it runs in this "
                      "process (--processes needs a stage built from its settings)",
                      highlight=False)
        return run_plan(rundir, plan, stage, runner, args, summary, shown)
    totals: Counter[str] = Counter()
    down: list[str] = []

    def on_result(got: tuple[StageSummary, dict[str, float], list[str], list[str]]) -> bool:
        part, part_totals, part_down, corrupt = got
        summary.add(part)
        totals.update(part_totals)
        rundir.corrupted.extend(map(type(rundir.root), corrupt))
        if part_down and not down:
            down.append(part_down[0])
        return not down  # the service is gone: start no more shards

    processes.run_tasks(
        _shard_task, ((k, its, args) for k, its in plan), n,
        shared_values={"root": str(rundir.root), "stage": stage,
                       "workers": getattr(runner, "workers", None)},
        preload=[__name__, type(stage).__module__], on_event=shown, on_result=on_result)
    return totals, down


def _shard_task(k: int, its: list[Any], args: _PlanArgs
                ) -> tuple[StageSummary, dict[str, float], list[str], list[str]]:
    """One shard in a worker process: its summary, metric totals, a fatal result's message
    and the corrupt files found."""
    got = processes.SHARED
    if "rundir" not in got:
        got.update(rundir=RunDir(got["root"], create=False),
                   runner=LocalRunner(got["workers"]))
    rundir, stage, events = got["rundir"], got["stage"], got["events"]
    summary = StageSummary(stage.name)
    seen = len(rundir.corrupted)
    totals, down = run_plan(rundir, [(k, its)], stage, got["runner"], args, summary,
                            lambda *outcome: events.put(outcome))
    return summary, totals, down, [str(p) for p in rundir.corrupted[seen:]]


def _shard_inputs(rundir: RunDir, stage: Stage, k: int) -> Any:
    """A function giving each video of shard k its rows of the tables the stage reads (the
    tables' shard k files, read once); None when one of them turned out corrupt."""
    columnar = getattr(stage, "columnar", False)
    seen = len(rundir.corrupted)
    tables: dict[str, tuple[Any, dict[str, tuple[int, int]]]] = {}
    for name in stage.reads:
        t = rundir.read_shard(name, k)
        if len(rundir.corrupted) > seen:
            return None
        if t is None:
            continue
        data = {c: _column_values(c, t.column(c)) for c in t.column_names} if columnar \
            else t.to_pandas()
        tables[name] = (data, _video_ranges(t))

    def inputs(video_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in stage.reads:
            got = tables.get(name)
            a, b = got[1].get(video_id, (0, 0)) if got else (0, 0)
            if got is None or a == b:
                if name in SCHEMAS:
                    out[name] = empty_rows(name) if columnar else empty_table(name)
                continue
            if columnar:
                out[name] = Rows(name, b - a, {c: v[a:b] for c, v in got[0].items()})
            else:
                out[name] = got[0].iloc[a:b].reset_index(drop=True)
        return out

    return inputs


def _video_ranges(arrow: Any) -> dict[str, tuple[int, int]]:
    """Each video's ``[first, end)`` rows in a shard file (grouped by video when written)."""
    if "video_id" not in arrow.column_names or not arrow.num_rows:
        return {}
    runs = pc.run_end_encode(arrow.column("video_id").combine_chunks().cast(pa.string()))
    ends = runs.run_ends.to_pylist()
    return dict(zip(runs.values.to_pylist(), itertools.pairwise([0, *ends]), strict=True))


def _column_values(name: str, col: Any) -> Any:
    """A shard file's column as ``Rows`` holds it: numbers as numpy, strings as a list
    (one Python object per distinct value outside free text)."""
    if pat.is_floating(col.type) or pat.is_integer(col.type) or pat.is_boolean(col.type):
        return col.to_numpy()
    if name in FREE_TEXT or col.null_count or not pa.types.is_string(col.type):
        return col.to_pylist()
    enc = col.combine_chunks().dictionary_encode()
    return np.asarray(enc.dictionary.to_pylist(), dtype=object)[
        enc.indices.to_numpy()].tolist()


def commit_chunk(writer: ShardWriter, stage: Stage, results: Sequence[VideoResult], *,
                 config_id: str = "", attempts: dict[str, int] | None = None) -> None:
    """One chunk of a shard's results (``ShardWriter.commit``): every row and record carry
    the stage's ``config_id``; a failed video has no rows (its newest record, the failure,
    supersedes an older result)."""
    tables: dict[str, list[Any]] = {}
    records = []
    for res in sorted(results, key=attrgetter("video_id")):
        if res.ok:
            for name, df in res.tables.items():
                if "config_id" in SCHEMAS.get(name, {}):
                    if isinstance(df, Rows):
                        df.cols["config_id"] = config_id
                    else:
                        df = df.assign(config_id=config_id)
                tables.setdefault(name, []).append(df)
        if res.internal:  # an append-only log, not a result: a torn entry harms nothing
            with disk_full_as(writer.rundir.error_log):
                writer.rundir.error_log.parent.mkdir(parents=True, exist_ok=True)
                with writer.rundir.error_log.open("a") as fh:
                    fh.write(f"[{stage.name}] {res.video_id}\n{res.internal}\n")
        records.append(StatusRecord(res.video_id, stage.name, "ok" if res.ok else "error",
                                    " ".join(res.message.split())[:500], res.seconds,
                                    warnings=len(res.warnings),
                                    cause="" if res.ok else (res.cause or "internal"),
                                    attempts=(attempts or {}).get(res.video_id, 0) + 1,
                                    config_id=config_id,
                                    metrics={k: float(v) for k, v in res.metrics.items()}))
    writer.commit(records, {name: _one_table(name, parts) for name, parts in tables.items()})


def _one_table(name: str, parts: list[Any]) -> Any:
    """A chunk's rows of one table: an Arrow table when every video gave plain columns
    (``Rows``: no pandas on the text-only path), else one frame."""
    if all(isinstance(p, Rows) for p in parts) and name in SCHEMAS:
        return rows_to_arrow(name, parts)
    dfs = [p.to_pandas() if isinstance(p, Rows) else p for p in parts]
    return pd.concat(dfs, ignore_index=True) if len(dfs) > 1 else dfs[0]

