"""Shared by every command module: one-line user errors, warnings as notes, the consoles, the
options several commands take, ``--config`` YAML files, ``--shard`` and ``--runner``."""

from __future__ import annotations

import functools
import shutil
import warnings
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from rich.console import Console

from howtocap.engine.runners import RUNNERS
from howtocap.engine.stage import BATCH_SECONDS, BATCH_SIZE, SHARD_SIZE
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.io.where import PRESETS
from howtocap.progress import console

err = console  # errors and progress bars share one stderr console
# Tables stay readable when piped (make, CI logs): COLUMNS, else the terminal, else 120.
out = Console(width=shutil.get_terminal_size((120, 24)).columns)
F = TypeVar("F", bound=Callable[..., Any])


RunnerName = Enum("RunnerName", {r: r for r in RUNNERS}, type=str)  # type: ignore[misc]
RunnerOpt = Annotated[RunnerName, typer.Option(
    "--runner", help="Where stages run: local (threads in this process) or ray (Ray Data; "
                     "needs howtocap\\[ray]).")]
RayAddressOpt = Annotated[str | None, typer.Option(
    "--ray-address", help="--runner ray: none starts a local Ray instance; 'auto' or "
                          "ray://host:port joins a cluster.")]
RayGpusOpt = Annotated[str | None, typer.Option(
    "--ray-gpus-per-stage", help="--runner ray: GPUs per worker by stage kind, e.g. "
                                 "encoder=0.25,asr=0.5,llm=1.")]

WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", min=1, help="Videos in parallel (local: threads; ray: actors). Default: each "
                             "stage's own (1 per model; --concurrency for an LLM server).")]

RedoOpt = Annotated[bool, typer.Option(
    "--redo", help="The run's results were made with other settings: recompute this stage "
                   "and clear the stages computed from it (caption -> align).")]
RetryFailedOpt = Annotated[bool, typer.Option(
    "--retry-failed", help="Retry videos that failed before (else they stay failed; see "
                           "`howtocap status`).")]
MaxAttemptsOpt = Annotated[int, typer.Option(
    "--max-attempts", min=1, help="--retry-failed: leave a video alone once it has failed "
                                  "this many times.")]

SHARD_HELP = ("K/N: process only this machine's share of the run's shards of videos (shard k "
              "when k mod N = K); for align, run once without --shard afterwards to filter.")
Inputs = Annotated[list[Path], typer.Argument(help="Video files, folders of videos, or manifest "
                                              "CSVs (video_id,video_path[,subtitle_path]).")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Run directory (created).")]
ShardOpt = Annotated[str | None, typer.Option(help=SHARD_HELP)]
BatchSizeOpt = Annotated[int | None, typer.Option(
    "--batch-size", min=1, help="Commit finished videos in chunks of at most this many (a "
                                "file per table per chunk, joined when their shard is "
                                "finished; a kill loses the chunk in flight). "
                                f"Default {BATCH_SIZE}.")]
BatchSecondsOpt = Annotated[float | None, typer.Option(
    "--batch-seconds", min=0, help="Commit a chunk once its first result waited this long, "
                                   f"full or not. Default {BATCH_SECONDS:g}.")]
ShardSizeOpt = Annotated[int | None, typer.Option(
    "--shard-size", min=1, help="Videos per shard of a run directory this command makes (the "
                                "unit of work and of --shard K/N; a file per table each). "
                                "An existing run directory keeps its own. "
                                f"Default {SHARD_SIZE}.")]
QuietOpt = Annotated[bool, typer.Option(help="No progress bar.")]
WhereOpt = Annotated[str | None, typer.Option(
    help="Keep the rows passing a condition on their columns and their window's signals "
         "(`howtocap signals`), in pandas query syntax, e.g. \"motion > 0.02 and text_area < "
         f"0.1\", or a preset: {', '.join(f'{k} ({v})' for k, v in PRESETS.items())}.")]
ConfigOpt = Annotated[Path | None, typer.Option(help="YAML file with any of these options.")]
AddVideosOpt = Annotated[Path | None, typer.Option(
    "--videos", help="Videos to add to the run first: a folder (file name = video id) or "
                     "a manifest CSV video_id,video_path (the run directory is made when "
                     "missing).")]


def open_run(run_dir: Path, videos: Path | None) -> Any:
    """The run directory of a per-video step command (``shots``, ``signals``), with
    ``videos`` (``AddVideosOpt``) recorded first; one line when there is neither."""
    from howtocap.engine.rundir import RunDir
    from howtocap.errors import InputError
    from howtocap.io.inputs import resolve_videos

    root = Path(run_dir)
    if videos is None and not root.is_dir():
        raise InputError(root, "not a run directory (give --videos to make one)")
    rundir = RunDir(root)
    if videos is not None:
        rundir.record_videos(resolve_videos([videos]))
    return rundir


def user_errors(fn: F) -> F:
    """User mistakes become one red line and exit code 2 (a down service: 75, re-run to
    resume), never a traceback; a library's ``UserWarning`` (e.g. "no alignment yet,
    indexing captions") is shown as a note."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UserWarning)
                result = fn(*args, **kwargs)
            for w in caught:
                if issubclass(w.category, UserWarning):
                    err.print(f"[yellow]note:[/yellow] {w.message}", highlight=False)
            return result
        except ServiceUnavailable as exc:  # not a user mistake: 75 = EX_TEMPFAIL, re-run
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(75) from None
        except HowtocapError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/yellow]: finished work is saved; run the same "
                      "command again to resume (train: add --resume)")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def load_yaml_config(ctx: click.Context, path: Path | None, values: dict[str, Any]) -> dict:
    """Fill options the user did not type from a YAML file (flags win over the file)."""
    if path is None:
        return values
    import yaml

    try:
        data = yaml.safe_load(path.read_bytes()) or {}  # bytes: YAML finds UTF-8/16 itself
    except (OSError, yaml.YAMLError) as exc:
        raise HowtocapError(f"{path}: cannot read config ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise HowtocapError(f"{path}: config must be a mapping of option names to values")
    merged = dict(values)
    for key, val in data.items():
        if not isinstance(key, str):
            raise HowtocapError(f"{path}: config keys must be option names, got {key!r}")
        name = key.replace("-", "_")
        if name not in values:
            known = sorted(k for k in values if k not in ("config", "ctx"))
            raise HowtocapError(f"{path}: unknown option {key!r}; known: {', '.join(known)}")
        # by name: Typer (0.29 here) vendors its own click, whose ParameterSource is another enum
        # than ``click.core.ParameterSource`` (comparing members let the file win every time)
        source = ctx.get_parameter_source(name)
        if getattr(source, "name", None) != "COMMANDLINE":
            merged[name] = val
    return merged


M = TypeVar("M")


def validated(settings: type[M], /, **values: Any) -> M:
    """A pydantic settings object from CLI values; a bad value is one line naming the option,
    raised before any file is written."""
    from pydantic import ValidationError

    try:
        return settings(**values)
    except ValidationError as exc:
        msgs = [f"--{'.'.join(map(str, e['loc'][-1:])).replace('_', '-') or 'option'}: "
                f"{e['msg']}" for e in exc.errors()]
        raise HowtocapError("; ".join(msgs)) from None


def report_summary(*summaries: Any) -> None:
    """One line per stage; exit 1 when any video failed (the rest finished)."""
    failed = False
    for s in summaries:
        colour = "green" if s.ok else "yellow"
        warned = getattr(s, "warned", [])
        note = f" ({len(warned)} with warnings)" if warned else ""
        before = getattr(s, "failed_before", 0)
        if before:
            colour = "yellow"
        kept = f", {before} failed before (not retried: --retry-failed; `howtocap status`)" \
            if before else ""
        err.print(f"[{colour}]{s.stage}[/{colour}]: {s.done} done{note}, {s.skipped} already "
                  f"done, {len(s.failed)} failed{kept} ({s.seconds:.1f} s)", highlight=False)
        failed |= not s.ok or bool(before)
    if failed:
        raise typer.Exit(1)


def parse_shard(text: str | None) -> Any:
    """``--shard K/N`` as a ``Shard``; the pipeline (and pandas) load only when a command
    runs, not for ``--help``."""
    from howtocap.engine.core import Shard

    return Shard.parse(text)


def batching(size: int | None, seconds: float | None, shard_size: int | None = None) -> Any:
    """``--batch-size`` / ``--batch-seconds`` / ``--shard-size`` as the ``Batching`` the
    command passes to every stage it runs (the defaults where not given)."""
    from howtocap.engine.core import Batching

    return Batching.of(size, seconds, shard_size)


def make_runner(runner: str, *, workers: int | None, ray_address: str | None,
                ray_gpus_per_stage: str | None) -> Any:
    """The ``--runner`` and its options as a runner (Ray loads only when a command asks)."""
    from howtocap.engine.runners import make_runner as runner_named

    return runner_named(RunnerName(runner).value, workers=workers, ray_address=ray_address,
                        ray_gpus=ray_gpus_per_stage)
