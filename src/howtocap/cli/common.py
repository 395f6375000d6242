"""Shared by every command module: one-line user errors, warnings as notes, the consoles, the
options several commands take, ``--config`` YAML files."""

from __future__ import annotations

import functools
import inspect
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from rich.console import Console

from howtocap.engine.options import RunnerConfig
from howtocap.errors import HowtocapError, InputError, ServiceUnavailable
from howtocap.io.where import PRESETS
from howtocap.progress import console

err = console  # errors and progress bars share one stderr console
# Tables stay readable when piped (make, CI logs): COLUMNS, else the terminal, else 120.
out = Console(width=shutil.get_terminal_size((120, 24)).columns)
F = TypeVar("F", bound=Callable[..., Any])


Inputs = Annotated[list[Path], typer.Argument(help="Video files, folders of videos, or manifest "
                                              "CSVs (video_id,video_path[,subtitle_path]).")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Run directory (created).")]
QuietOpt = Annotated[bool, typer.Option(help=RunnerConfig.model_fields["quiet"].description)]
WhereOpt = Annotated[str | None, typer.Option(
    help="Keep the rows passing a condition on their columns and their window's signals "
         "(`howtocap signals`), in pandas query syntax, e.g. \"motion > 0.02 and text_area < "
         f"0.1\", or a preset: {', '.join(f'{k} ({v})' for k, v in PRESETS.items())}.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda if "
                                                    "available).")]
ConfigOpt = Annotated[Path | None, typer.Option(help="YAML file with any of these options.")]
RunDirArg = Annotated[Path, typer.Argument(help="Run directory (its videos.parquet says which "
                                           "videos; made by `howtocap caption`, or by "
                                           "--videos).")]
AddVideosOpt = Annotated[Path | None, typer.Option(
    "--videos", help="Videos to add to the run first: a folder (file name = video id) or "
                     "a manifest CSV video_id,video_path (the run directory is made when "
                     "missing).")]


def run_step_on_run(run_dir: Path, videos: Path | None, step_run: Callable[..., Any],
                    settings: Any, runner: RunnerConfig, table: str, rows: str) -> None:
    """A per-video step command on a run directory (``shots``, ``signals``): ``videos`` recorded
    first, then a line counting its ``table`` (not for a ``--shard``: others may not be done)."""
    from howtocap.engine.rundir import RunDir
    from howtocap.io.inputs import resolve_videos

    root = Path(run_dir)
    if videos is None and not root.is_dir():
        raise InputError(root, "not a run directory (give --videos to make one)")
    rundir = RunDir(root)
    if videos is not None:
        rundir.record_videos(resolve_videos([videos]))
    summary = step_run(rundir, settings, **runner.stage_args())
    if not runner.shard:
        found = rundir.table(table)
        err.print(f"{found['video_id'].nunique()} videos, {len(found)} {rows} -> "
                  f"{rundir.root / table}", highlight=False)
    report_summary(summary)


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
        except HowtocapError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            # a down service is no user mistake: 75 = EX_TEMPFAIL, re-run
            raise typer.Exit(75 if isinstance(exc, ServiceUnavailable) else 2) from None
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


def defaults(*fns: Callable[..., Any]) -> dict[str, Any]:
    """The keyword defaults of the library functions a command calls: its options take them
    from there, so each default is written once."""
    return {name: p.default for fn in reversed(fns)
            for name, p in inspect.signature(fn).parameters.items()}


def report_summary(*summaries: Any) -> None:
    """One line per stage; exit 1 when any video failed (the rest finished)."""
    failed = False
    for s in summaries:
        warned, before = getattr(s, "warned", []), getattr(s, "failed_before", 0)
        colour = "green" if s.ok and not before else "yellow"
        note = f" ({len(warned)} with warnings)" if warned else ""
        kept = f", {before} failed before (not retried: --retry-failed; `howtocap status`)" \
            if before else ""
        err.print(f"[{colour}]{s.stage}[/{colour}]: {s.done} done{note}, {s.skipped} already "
                  f"done, {len(s.failed)} failed{kept} ({s.seconds:.1f} s)", highlight=False)
        failed |= not s.ok or bool(before)
    if failed:
        raise typer.Exit(1)
