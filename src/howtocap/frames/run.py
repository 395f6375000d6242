"""``howtocap frames``: the frames stage over input videos (the frame cache is its output)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from howtocap.encoders.defaults import ENCODER, FPS, FRAME_BATCH
from howtocap.engine.core import Shard, StageSummary, prepare_stages, run_stage
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError
from howtocap.frames.stage import FramesStage
from howtocap.io.inputs import resolve_videos


def frames_run(inputs: Sequence[str | Path], out: str | Path, *, encoders: Sequence[str],
               fps: float = FPS, batch_size: int = FRAME_BATCH, device: str | None = None,
               runner: Runner | None = None, progress: bool = True,
               shard: Shard | None = None, redo: bool = False) -> StageSummary:
    """Fill ``out/cache/frames`` for every video and encoder, decoding each video once (at
    scale, on a GPU box, before ``align``, ``index`` or ``train`` read the cache). The cache is
    its own resume mechanism (a hit costs one hash), so finished videos are not skipped. Other
    encoders or fps than the run's are refused unless ``redo`` (clears align and framecaps)."""
    if fps <= 0:
        raise HowtocapError(f"--fps must be positive, got {fps}")
    items = resolve_videos(inputs)
    rundir = RunDir(out)
    stage = FramesStage(list(encoders) or [ENCODER], rundir.cache_dir, fps=fps,
                        batch_size=batch_size, device=device)
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    return run_stage(rundir, items, stage, runner=runner, progress=progress, shard=shard,
                     skip_done=False, cid=cid)
