"""``howtocap signals DIR``: the signals stage over the run's videos into ``DIR/signals/`` (a
shard file each), resumable and fingerprinted like every stage."""

from __future__ import annotations

from collections.abc import Sequence

from howtocap.engine.core import (
    MAX_ATTEMPTS,
    Shard,
    StageSummary,
    prepare_stages,
    run_stage,
)
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.io.inputs import VideoItem
from howtocap.shots.run import run_videos
from howtocap.signals.config import SignalsConfig
from howtocap.signals.stage import SignalsStage

CONFIG = "signals"  # DIR/config/signals.json: the settings the table was made with


def recorded_config(rundir: RunDir) -> SignalsConfig:
    """The settings this run's signals were made with (the defaults when it has none), so
    ``run --signals`` extends a run rather than refusing it."""
    old = rundir.configs.read(CONFIG)
    return SignalsConfig(**old) if old else SignalsConfig()


def signals_run(rundir: RunDir, cfg: SignalsConfig | None = None, *,
                items: Sequence[VideoItem] | None = None, runner: Runner | None = None,
                progress: bool = True, shard: Shard | None = None, redo: bool = False,
                retry_failed: bool = False, max_attempts: int = MAX_ATTEMPTS,
                batching: BatchConfig | None = None, stage: SignalsStage | None = None
                ) -> StageSummary:
    """Score every video of the run (``items``: these instead) into ``DIR/signals/``; a
    video that does not decode fails alone. ``cfg`` None: the recorded settings."""
    stage = stage or SignalsStage(cfg or recorded_config(rundir))
    stage.cache_dir = rundir.cache_dir
    stage.shots_settings = rundir.configs.read("shots")  # None: fixed windows
    if stage.cfg.aesthetic:  # a bad head file: one line now, not one per video
        from howtocap.signals.aesthetic import load_head

        load_head(stage.cfg.aesthetic)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    rundir.configs.write(CONFIG, stage.cfg.model_dump())
    return run_stage(rundir, list(items) if items is not None else run_videos(rundir), stage,
                     runner=runner, progress=progress, shard=shard, retry_failed=retry_failed,
                     max_attempts=max_attempts, cid=cid, batching=batching)
