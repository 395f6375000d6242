"""``howtocap framecaps``: label videos with image captions (Ventura et al.)."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import Inputs, OutDir, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import BatchConfig, RunnerConfig


@user_errors
@settings_options(runner=RunnerConfig, batch=BatchConfig)
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
    *,
    runner: RunnerConfig,
    batch: BatchConfig,
) -> None:
    """Label videos with image captions (Ventura et al.): caption M frames per captioner, keep
    the K best by CLIPScore -> DIR/framecaps/ (train on it with `howtocap train`)."""
    from howtocap.framecaps.config import FrameCapsConfig
    from howtocap.framecaps.run import framecaps_run

    summary = framecaps_run(inputs, out_dir, captioners=captioner or ["default"], scorer=scorer,
                            cfg=FrameCapsConfig(frames=frames, top_k=top_k), device=device,
                            batching=batch.batching(), **runner.stage_args())
    report_summary(summary)
