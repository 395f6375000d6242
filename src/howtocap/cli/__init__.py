"""The ``howtocap`` command: a thin Typer layer over library functions.

One module per command (or per tight group), each command a module-level function whose typed
options map onto a library call; this table is the whole command line. User mistakes
(HowtocapError) print one red line and exit 2; a batch where some videos failed exits 1 after
finishing the rest. Importing the commands loads no model code: ``howtocap --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from howtocap.cli import (
    align,
    caption,
    dvc,
    encoders,
    evaluate,
    export,
    framecaps,
    frames,
    run,
    samples,
    search,
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
    "encoders": encoders.encoders_cmd,
    "frames": frames.frames_cmd,
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

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Narrated videos -> timestamped, video-aligned captions; retrieval "
                       "training, evaluation, search.")
for _name, _fn in COMMANDS.items():
    app.command(_name)(_fn)
for _name, (_help, _commands) in GROUPS.items():
    _group = typer.Typer(help=_help, no_args_is_help=True)
    for _sub, _fn in _commands.items():
        _group.command(_sub)(_fn)
    app.add_typer(_group, name=_name)


def main() -> None:  # pragma: no cover - console entry point
    app()
