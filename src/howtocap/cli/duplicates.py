"""``howtocap duplicates DIR``: a thin layer over ``duplicates.run.duplicates_run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import QuietOpt, err, user_errors
from howtocap.cli.options import settings_options
from howtocap.duplicates.config import DuplicatesConfig
from howtocap.encoders.defaults import ENCODER, FPS


@user_errors
@settings_options(settings=DuplicatesConfig)
def duplicates_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (after `run` or `frames`).")],
    *,
    settings: DuplicatesConfig,
    encoder: Annotated[str, typer.Option(
        help="Encoder whose cached frame embeddings are compared (missing ones are computed "
             "into the cache).")] = ENCODER,
    fps: Annotated[float, typer.Option(help="Frame rate of the cached embeddings.")] = FPS,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (for embeddings not "
                                                    "cached yet).")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Find near-duplicate videos (re-uploads, re-encodes, crops, resizes, trimmed copies) and
    repeated clips; writes DIR/duplicates.parquet (export/train --drop-duplicates use it)."""
    from howtocap.duplicates.run import duplicates_run

    res = duplicates_run(run_dir, settings, encoder=encoder, fps=fps, device=device,
                         progress=not quiet)
    err.print(f"{res.n_videos} videos: {res.duplicate_videos} near-duplicate video(s) in "
              f"{res.groups} group(s), {res.clips} repeated clip(s) "
              f"({res.candidate_pairs} candidate pairs checked"
              f"{f'; skipped {len(res.skipped)} video(s)' if res.skipped else ''}) -> "
              f"{res.path}", highlight=False)
