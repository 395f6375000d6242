"""``howtocap frames``: pre-fill a run's frame-embedding cache (``pipeline.frames.frames_run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import (
    QuietOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RunnerName,
    RunnerOpt,
    ShardOpt,
    make_runner,
    parse_shard,
    report_summary,
    user_errors,
)


@user_errors
def frames_cmd(
    inputs: Annotated[list[Path], typer.Argument(
        help="Video files, folders of videos, or manifest CSVs.")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory; the cache "
                                          "goes to OUT/cache/frames.")],
    encoder: Annotated[list[str] | None, typer.Option(
        "--encoder", help="Encoder name (repeatable; each video is decoded once for all). "
                          "Default: default.")] = None,
    fps: Annotated[float, typer.Option(help="Frames embedded per second.")] = 1.0,
    batch_size: Annotated[int, typer.Option(min=1, help="Frames per encoder batch.")] = 32,
    workers: Annotated[int, typer.Option(min=1, help="Videos in parallel.")] = 1,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda "
                                                    "if available).")] = None,
    redo: RedoOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Decode each video once and cache its per-second frame embeddings (float16)."""
    from howtocap.frames.run import frames_run

    summary = frames_run(list(inputs), out_dir, encoders=encoder or ["default"], fps=fps,
                         batch_size=batch_size, device=device,
                         runner=make_runner(runner, workers=workers, ray_address=ray_address,
                                            ray_gpus_per_stage=ray_gpus_per_stage),
                         progress=not quiet, shard=parse_shard(shard), redo=redo)
    report_summary(summary)
