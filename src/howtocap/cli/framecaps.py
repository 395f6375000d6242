"""``howtocap framecaps``: label videos with image captions (Ventura et al.)."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import (
    BatchSecondsOpt,
    BatchSizeOpt,
    Inputs,
    MaxAttemptsOpt,
    OutDir,
    QuietOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    ShardOpt,
    ShardSizeOpt,
    WorkersOpt,
    batching,
    make_runner,
    parse_shard,
    report_summary,
    user_errors,
)
from howtocap.engine.stage import MAX_ATTEMPTS


@user_errors
def framecaps_cmd(
    inputs: Inputs,
    out_dir: OutDir,
    captioner: Annotated[list[str] | None, typer.Option(
        "--captioner", help="Image captioner (repeatable): default (ImageNet class names, "
                            "embedded) or hf:<id|folder> (BLIP, GIT, …).")] = None,
    scorer: Annotated[str, typer.Option(help="Image–text encoder for CLIPScore.")] = "default",
    frames: Annotated[int, typer.Option(min=1, help="Frames captioned per video (M).")] = 10,
    top_k: Annotated[int, typer.Option(min=1, help="Captions kept per captioner (K).")] = 2,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (default: cuda if "
                                                    "available).")] = None,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    batch_size: BatchSizeOpt = None,
    batch_seconds: BatchSecondsOpt = None,
    shard_size: ShardSizeOpt = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = MAX_ATTEMPTS,
    quiet: QuietOpt = False,
) -> None:
    """Label videos with image captions (Ventura et al.): caption M frames per captioner, keep
    the K best by CLIPScore -> DIR/framecaps/ (train on it with `howtocap train`)."""
    from howtocap.framecaps.config import FrameCapsConfig
    from howtocap.framecaps.run import framecaps_run

    summary = framecaps_run(inputs, out_dir, captioners=captioner or ["default"], scorer=scorer,
                            cfg=FrameCapsConfig(frames=frames, top_k=top_k), device=device,
                            progress=not quiet,
                            shard=parse_shard(shard),
                            batching=batching(batch_size, batch_seconds, shard_size),
                            runner=make_runner(runner, workers=workers, ray_address=ray_address,
                                               ray_gpus_per_stage=ray_gpus_per_stage),
                            redo=redo, retry_failed=retry_failed, max_attempts=max_attempts)
    report_summary(summary)
