"""``howtocap frames`` and ``howtocap framecaps``: per-video stages over input videos."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from howtocap.engine.core import MAX_ATTEMPTS, Shard, StageSummary, prepare_stages, run_stage
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError
from howtocap.framecaps import FrameCapsConfig
from howtocap.io.inputs import VideoItem, resolve_inputs
from howtocap.stages.framecaps import FrameCapsStage
from howtocap.stages.frames import FramesStage


def _videos(inputs: Sequence[str | Path]) -> list[VideoItem]:
    items = resolve_inputs(list(inputs))
    if not items:
        raise HowtocapError(f"no videos found in {', '.join(map(str, inputs))}")
    return items


def frames_run(inputs: Sequence[str | Path], out: str | Path, *, encoders: Sequence[str],
               fps: float = 1.0, batch_size: int = 32, device: str | None = None,
               runner: Runner | None = None, progress: bool = True,
               shard: Shard | None = None, redo: bool = False) -> StageSummary:
    """Fill ``out/cache/frames`` for every video and encoder, decoding each video once.

    Why a command of its own: at scale one decodes every video once (on a GPU box, several
    encoders at a time) before ``align``, ``index`` or ``train`` read the cache. The cache is
    its own resume mechanism (a hit costs one hash), so finished videos are not skipped.
    Other encoders or fps than the run's are refused unless ``redo`` (which clears align
    and framecaps, computed from frames)."""
    if fps <= 0:
        raise HowtocapError(f"--fps must be positive, got {fps}")
    items = _videos(inputs)
    rundir = RunDir(out)
    stage = FramesStage(list(encoders) or ["default"], rundir.cache_dir, fps=fps,
                        batch_size=batch_size, device=device)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    return run_stage(rundir, items, stage, runner=runner, progress=progress, shard=shard,
                     skip_done=False, cid=cid)


def framecaps_run(inputs: Sequence[str | Path], out: str | Path, *,
                  captioners: Sequence[str] = ("default",), scorer: str = "default",
                  cfg: FrameCapsConfig | None = None, device: str | None = None,
                  runner: Runner | None = None, progress: bool = True,
                  shard: Shard | None = None, redo: bool = False, retry_failed: bool = False,
                  max_attempts: int = MAX_ATTEMPTS) -> StageSummary:
    """The ``howtocap framecaps`` command: writes ``DIR/framecaps.parquet``."""
    cfg = cfg or FrameCapsConfig()
    items = _videos(inputs)
    rundir = RunDir(out)
    stage = FrameCapsStage(captioners, scorer, cfg, device=device)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    rundir.record_videos(items)
    rundir.write_config("framecaps", {"captioners": list(captioners), "scorer": scorer,
                                      **cfg.model_dump()})
    opts = {"runner": runner, "progress": progress, "shard": shard,
            "retry_failed": retry_failed, "max_attempts": max_attempts, "cid": cid}
    summary = run_stage(rundir, items, stage, **opts)
    rundir.merge("framecaps")
    if rundir.corrupted:  # a corrupt part was dropped at the merge: redo those videos
        rundir.corrupted.clear()
        summary.absorb(run_stage(rundir, items, stage, **opts))
        rundir.merge("framecaps")
    rundir.status_table()
    return summary
