"""``howtocap signals DIR``: its step options are ``SignalsConfig``'s, the rest the stage's."""

from __future__ import annotations

from howtocap.cli.common import AddVideosOpt, RunDirArg, run_step_on_run, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import RunnerConfig
from howtocap.signals.config import SignalsConfig


@user_errors
@settings_options(signals=SignalsConfig, runner=RunnerConfig)
def signals_cmd(
    run_dir: RunDirArg,
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

    run_step_on_run(run_dir, videos, signals_run, signals, runner, "signals", "windows")
