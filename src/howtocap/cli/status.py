"""``howtocap status DIR``: a table of ``pipeline.run.run_status`` (``--json`` for scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from howtocap.cli.common import out, user_errors

RATES = {"audio_hours_per_hour": "audio h/h", "llm_tokens_per_s": "tokens/s",
         "captions_per_s": "captions/s", "frames_per_s": "frames/s"}


def print_status(info: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{info['run_dir']} ({info['videos']} videos)")
    for col in ("stage", "done", "failed", "pending", "wall", "videos/s", "throughput"):
        table.add_column(col, justify="left" if col in ("stage", "throughput") else "right")
    for s in info["stages"]:
        t = s["throughput"]
        rates = ", ".join(f"{t[k]:.3g} {unit}" for k, unit in RATES.items() if t[k] is not None)
        per_s = "" if t["videos_per_s"] is None else f"{t['videos_per_s']:.3g} "
        table.add_row(s["stage"], str(s["done"]) + (f" ({s['warned']} warned)" if s["warned"]
                                                    else ""),
                      str(s["failed"]), str(s["pending"]), f"{s['wall_seconds']:.1f} s",
                      per_s, rates)
    out.print(table)
    for s in info["stages"]:
        for cause, f in s["failures"].items():
            out.print(f"{s['stage']}: {f['count']} failed ({cause}), e.g. "
                      f"{', '.join(f['examples'])}", highlight=False)
    if any(s["failed"] for s in info["stages"]):
        out.print("failed videos stay failed on a re-run; add --retry-failed to retry them "
                  "(the reasons are in DIR/status/)", highlight=False)


@user_errors
def status_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per stage: done / failed / pending, failures by cause (bad input, model output,
    service, internal) with example videos, wall time and throughput."""
    from howtocap.pipeline.run import run_status

    info = run_status(run_dir)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        print_status(info)
