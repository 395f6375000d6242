"""The ``howtocap`` command: a thin Typer layer over library functions, one module per command
(or tight group); the tables below are the whole command line. A user mistake (HowtocapError)
is one red line and exit 2; a batch where some videos failed exits 1 after finishing the rest.
Importing the commands loads no model code, so ``howtocap --help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperCommand

from howtocap.cli import (
    align,
    caption,
    common,
    download,
    duplicates,
    dvc,
    encoders,
    evaluate,
    export,
    framecaps,
    frames,
    run,
    samples,
    search,
    shots,
    signals,
    stats,
    status,
    subtitles,
    tdr,
    train,
)

COMMANDS: dict[str, Callable[..., Any]] = {
    "caption": caption.caption_cmd,
    "export": export.export_cmd,
    "framecaps": framecaps.framecaps_cmd,
    "align": align.align_cmd,
    "run": run.run_cmd,
    "download": download.download_cmd,
    "encoders": encoders.encoders_cmd,
    "frames": frames.frames_cmd,
    "shots": shots.shots_cmd,
    "signals": signals.signals_cmd,
    "duplicates": duplicates.duplicates_cmd,
    "samples": samples.samples_cmd,
    "index": search.index_cmd,
    "search": search.search_cmd,
    "serve": search.serve_cmd,
    "train": train.train_cmd,
    "eval": evaluate.eval_cmd,
    "dvc-eval": dvc.dvc_eval_cmd,
    "stats": stats.stats_cmd,
    "status": status.status_cmd,
}

# command groups: name -> (help, {sub-command: function})
GROUPS: dict[str, tuple[str, dict[str, Callable[..., Any]]]] = {
    "tdr": (tdr.HELP, {"train": tdr.train_cmd, "eval": tdr.eval_cmd, "export": tdr.export_cmd}),
    "subtitles": (subtitles.HELP, {"convert": subtitles.convert_cmd}),
}


class Command(TyperCommand):
    """A bad flag value is one red line naming the flag, like a bad setting (exit 2), not
    Click's usage box."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as exc:
            common.err.print(f"[red]error:[/red] {escape(exc.format_message())}",
                             highlight=False)
            raise typer.Exit(2) from None


def add_commands(target: typer.Typer, *names: str) -> typer.Typer:
    """Mount the named commands and groups of the tables on ``target`` (all when no name is
    given): the ``howtocap`` app, or a test's app that holds one command."""
    for name in names or (*COMMANDS, *GROUPS):
        if name in COMMANDS:
            target.command(name, cls=Command)(COMMANDS[name])
            continue
        doc, commands = GROUPS[name]
        group = typer.Typer(help=doc, no_args_is_help=True)
        for sub, fn in commands.items():
            group.command(sub, cls=Command)(fn)
        target.add_typer(group, name=name)
    return target


app = add_commands(typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Narrated videos -> timestamped, video-aligned captions; retrieval training, "
         "evaluation, search."))


def main() -> None:  # pragma: no cover - console entry point
    app()
