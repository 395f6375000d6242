"""``howtocap shots DIR``: cut detection over a run's videos -> DIR/shots/
(``shots.run.shots_run``); each flag maps onto ``ShotsConfig``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import (
    AddVideosOpt,
    MaxAttemptsOpt,
    QuietOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    ShardOpt,
    WorkersOpt,
    err,
    make_runner,
    open_run,
    parse_shard,
    report_summary,
    user_errors,
    validated,
)
from howtocap.shots.config import DETECTORS

Detector = Enum("Detector", {d: d for d in DETECTORS}, type=str)  # type: ignore[misc]


@user_errors
def shots_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (its videos.parquet says which "
                                                 "videos; made by `howtocap caption`, or by "
                                                 "--videos).")],
    videos: AddVideosOpt = None,
    detector: Annotated[Detector, typer.Option(
        help="PySceneDetect detector: content (frame difference above --threshold) or "
             "adaptive (difference against its neighbours' average).")] = Detector.content,  # type: ignore[attr-defined]
    threshold: Annotated[float, typer.Option(
        help="content: HSV difference of two frames that makes a cut (PySceneDetect's "
             "default is 27; 17 finds more dissolves, docs/shots.md).")] = 17.0,
    adaptive_threshold: Annotated[float, typer.Option(
        help="adaptive: how many times its neighbours' average a difference must be.")] = 3.0,
    min_content_val: Annotated[float, typer.Option(
        help="adaptive: the smallest difference that can be a cut.")] = 15.0,
    min_shot_seconds: Annotated[float, typer.Option(
        help="No cut closer than this to the previous one (s).")] = 0.6,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    quiet: QuietOpt = False,
) -> None:
    """Detect shot cuts (PySceneDetect) in every video of a run -> DIR/shots/
    (video_id, start, end: one row per shot), for `align --within-shot`."""
    from howtocap.shots.config import ShotsConfig
    from howtocap.shots.run import shots_run

    cfg = validated(ShotsConfig, detector=Detector(detector).value, threshold=threshold,
                    adaptive_threshold=adaptive_threshold, min_content_val=min_content_val,
                    min_shot_seconds=min_shot_seconds)
    rundir = open_run(run_dir, videos)
    summary = shots_run(rundir, cfg, runner=make_runner(
        runner, workers=workers, ray_address=ray_address, ray_gpus_per_stage=ray_gpus_per_stage),
        progress=not quiet, shard=parse_shard(shard), redo=redo, retry_failed=retry_failed,
        max_attempts=max_attempts)
    if not shard:
        table = rundir.table("shots")
        err.print(f"{table['video_id'].nunique()} videos, {len(table)} shots -> "
                  f"{rundir.root / 'shots'}", highlight=False)
    report_summary(summary)
