"""``howtocap shots DIR``: its detector flags are ``ShotsConfig``'s, the rest the stage's."""

from __future__ import annotations

from howtocap.cli.common import AddVideosOpt, RunDirArg, run_step_on_run, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import RunnerConfig
from howtocap.shots.config import ShotsConfig


@user_errors
@settings_options(shots=ShotsConfig, runner=RunnerConfig)
def shots_cmd(
    run_dir: RunDirArg,
    *,
    videos: AddVideosOpt = None,
    shots: ShotsConfig,
    runner: RunnerConfig,
) -> None:
    """Detect shot cuts (hard cuts and dissolves) in every video of a run -> DIR/shots/
    (video_id, start, end: one row per shot), for `align --within-shot`."""
    from howtocap.shots.run import shots_run

    run_step_on_run(run_dir, videos, shots_run, shots, runner, "shots", "shots")
