"""``howtocap framecaps``: the framecaps stage over input videos into ``DIR/framecaps/`` (a
shard file each)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from howtocap.encoders.defaults import ENCODER
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
from howtocap.framecaps.config import FrameCapsConfig
from howtocap.framecaps.stage import FrameCapsStage
from howtocap.io.inputs import resolve_videos


def framecaps_run(inputs: Sequence[str | Path], out: str | Path, *,
                  captioners: Sequence[str] = ("default",), scorer: str = ENCODER,
                  cfg: FrameCapsConfig | None = None, device: str | None = None,
                  runner: Runner | None = None, progress: bool = True,
                  shard: Shard | None = None, redo: bool = False, retry_failed: bool = False,
                  max_attempts: int = MAX_ATTEMPTS, batching: BatchConfig | None = None
                  ) -> StageSummary:
    """The ``howtocap framecaps`` command: writes ``DIR/framecaps/``."""
    cfg = cfg or FrameCapsConfig()
    items = resolve_videos(inputs)
    rundir = RunDir(out, shard_size=batching.shard_size if batching is not None else None)
    stage = FrameCapsStage(captioners, scorer, cfg, device=device)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    rundir.record_videos(items)
    rundir.configs.write("framecaps", {"captioners": list(captioners), "scorer": scorer,
                                      **cfg.model_dump()})
    return run_stage(rundir, items, stage, runner=runner, progress=progress, shard=shard,
                     retry_failed=retry_failed, max_attempts=max_attempts, cid=cid,
                     batching=batching)
