"""``howtocap shots DIR``: the shots stage over the run's videos into ``DIR/shots/`` (a
shard file each; read with ``shots.bounds.shots_by_video``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

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
from howtocap.errors import InputError
from howtocap.io.inputs import VideoItem
from howtocap.shots.config import ShotsConfig
from howtocap.shots.stage import ShotsStage

CONFIG = "shots"  # DIR/config/shots.json: the settings the table was made with


def run_videos(rundir: RunDir) -> list[VideoItem]:
    """The run's videos with a file (``videos.parquet``); those known by id alone are left
    to ``howtocap align --videos``."""
    videos = rundir.table("videos")
    items = [VideoItem(str(r.video_id), Path(str(r.video_path)))
             for r in videos.itertuples() if r.video_path]
    if not items:
        raise InputError(rundir.root, "no videos with a file in videos.parquet (run "
                                      "`howtocap caption` or give --videos)")
    return items


def recorded_config(rundir: RunDir) -> ShotsConfig:
    """The settings this run's shots were made with (the defaults when it has none), so a
    step that needs shots (``align --within-shot``) extends them rather than refusing."""
    old = rundir.configs.read(CONFIG)
    return ShotsConfig(**old) if old else ShotsConfig()


def shots_run(rundir: RunDir, cfg: ShotsConfig | None = None, *,
              items: Sequence[VideoItem] | None = None,
              windows: Callable[[], Iterable[Sequence[VideoItem]]] | None = None,
              runner: Runner | None = None, progress: bool = True, shard: Shard | None = None,
              redo: bool = False, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, batching: BatchConfig | None = None
              ) -> StageSummary:
    """Detect the shots of every video of the run (``items``: these instead; ``windows``: a
    pass over them a window at a time, never listing them all) into ``DIR/shots/``. ``cfg``
    None: the recorded settings."""
    cfg = cfg or recorded_config(rundir)
    # one window of every video unless the caller's ``windows`` pass is given
    whole = None if windows else [list(items) if items is not None else run_videos(rundir)]
    stage = ShotsStage(cfg)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    rundir.configs.write(CONFIG, cfg.model_dump())
    opts = {"runner": runner, "progress": progress, "shard": shard,
            "retry_failed": retry_failed, "max_attempts": max_attempts, "cid": cid,
            "batching": batching}

    out, ran = StageSummary(stage.name), False
    for part in whole or windows():  # type: ignore[misc]
        out.add(run_stage(rundir, part, stage, **opts))
        ran = True
    return out if ran else run_stage(rundir, [], stage, **opts)
