"""``howtocap shots DIR``: cut detection over a run's videos -> DIR/shots/
(``shots.run.shots_run``); its detector flags are the fields of ``ShotsConfig``
(``cli.options``), the rest are the stage's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import AddVideosOpt, err, open_run, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import RunnerConfig
from howtocap.shots.config import ShotsConfig


@user_errors
@settings_options(shots=ShotsConfig, runner=RunnerConfig)
def shots_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (its videos.parquet says which "
                                                 "videos; made by `howtocap caption`, or by "
                                                 "--videos).")],
    *,
    videos: AddVideosOpt = None,
    shots: ShotsConfig,
    runner: RunnerConfig,
) -> None:
    """Detect shot cuts (hard cuts and dissolves) in every video of a run -> DIR/shots/
    (video_id, start, end: one row per shot), for `align --within-shot`."""
    from howtocap.shots.run import shots_run

    rundir = open_run(run_dir, videos)
    summary = shots_run(rundir, shots, **runner.stage_args())
    if not runner.shard:
        table = rundir.table("shots")
        err.print(f"{table['video_id'].nunique()} videos, {len(table)} shots -> "
                  f"{rundir.root / 'shots'}", highlight=False)
    report_summary(summary)
