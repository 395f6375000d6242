"""``howtocap frames``: pre-fill a run's frame-embedding cache (``pipeline.frames.frames_run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import DeviceOpt, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.encoders.defaults import ENCODER, FPS, FRAME_BATCH
from howtocap.engine.options import RunnerConfig


@user_errors
# every video is run again (a cache hit costs one hash): no --retry-failed, --max-attempts
@settings_options(runner=RunnerConfig, skip=("retry_failed", "max_attempts"))
def frames_cmd(
    inputs: Annotated[list[Path], typer.Argument(
        help="Video files, folders of videos, or manifest CSVs.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory; the cache "
                                          "goes to OUT/cache/frames.")],
    encoder: Annotated[list[str] | None, typer.Option(
        "--encoder", help="Encoder name (repeatable; each video is decoded once for all). "
                          "Default: default.")] = None,
    fps: Annotated[float, typer.Option(help="Frames embedded per second.")] = FPS,
    batch_size: Annotated[int, typer.Option(min=1, help="Frames per encoder batch.")
                          ] = FRAME_BATCH,
    device: DeviceOpt = None,
    *,
    runner: RunnerConfig,
) -> None:
    """Decode each video once and cache its per-second frame embeddings (float16)."""
    from howtocap.frames.run import frames_run

    summary = frames_run(list(inputs), out_dir, encoders=encoder or [ENCODER], fps=fps,
                         batch_size=batch_size, device=device, runner=runner.make_runner(),
                         shard=runner.shard_part(), progress=not runner.quiet, redo=runner.redo)
    report_summary(summary)
