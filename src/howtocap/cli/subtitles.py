"""``howtocap subtitles convert``: a thin layer over ``io.subtitles.convert_subtitles``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import QuietOpt, err, user_errors

HELP = "Subtitle collections (HowTo100M-style)."


@user_errors
def convert_cmd(
    src: Annotated[Path, typer.Argument(
        help="caption.json, sentencified JSON, a pickle, a CSV or Parquet table, or a folder of "
             "<id>.csv/.vtt/.srt.")],
    out: Annotated[Path, typer.Argument(help="The .parquet file to write.")],
    ids: Annotated[Path | None, typer.Option(help="Keep only these videos: a text file, one "
                                                  "video id a line.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Keep the first N videos.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Convert once, read fast: a pickle cannot be streamed (each run would load it whole), and
    a JSON dump is otherwise streamed again into each new run directory."""
    from howtocap.io.inputs import read_id_list
    from howtocap.io.subtitles import convert_subtitles

    n_videos, n_rows = convert_subtitles(src, out, ids=read_id_list(ids) if ids else None,
                                         limit=limit, progress=not quiet)
    err.print(f"wrote {n_videos} videos ({n_rows} subtitle lines) to {out}; use it as "
              f"--subtitles {out}", highlight=False)
