"""``howtocap signals DIR``: visual signals per shot or window -> DIR/signals/
(``signals.run.signals_run``); its step options are the fields of ``SignalsConfig``
(``cli.options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import AddVideosOpt, err, open_run, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import RunnerConfig
from howtocap.signals.config import SignalsConfig


@user_errors
@settings_options(signals=SignalsConfig, runner=RunnerConfig)
def signals_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (its videos.parquet says which "
                                                 "videos; made by `howtocap caption`, or by "
                                                 "--videos).")],
    *,
    signals: SignalsConfig,
    videos: AddVideosOpt = None,
    runner: RunnerConfig,
) -> None:
    """Score what every shot of a run looks like -> DIR/signals/ (video_id, start, end,
    motion, static, text_area, face_area, brightness, sharpness; aesthetic with
    --aesthetic): one row per shot of
    DIR/shots/ (run `howtocap shots` first), else per --window-seconds window. It removes
    nothing."""
    from howtocap.signals.run import signals_run

    rundir = open_run(run_dir, videos)
    summary = signals_run(rundir, signals, **runner.stage_args())
    if not runner.shard:
        table = rundir.table("signals")
        err.print(f"{table['video_id'].nunique()} videos, {len(table)} windows -> "
                  f"{rundir.root / 'signals'}", highlight=False)
    report_summary(summary)
