"""``howtocap framecaps``: label videos with image captions (Ventura et al.)."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import DeviceOpt, Inputs, OutDir, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.encoders.defaults import ENCODER
from howtocap.engine.options import BatchConfig, RunnerConfig
from howtocap.framecaps.config import FrameCapsConfig


@user_errors
@settings_options(framecaps=FrameCapsConfig, runner=RunnerConfig, batch=BatchConfig)
def framecaps_cmd(
    inputs: Inputs,
    out_dir: OutDir,
    *,
    captioner: Annotated[list[str] | None, typer.Option(
        "--captioner", help="Image captioner (repeatable): default (ImageNet class names, "
                            "embedded) or hf:<id|folder> (BLIP, GIT, …).")] = None,
    scorer: Annotated[str, typer.Option(help="Image–text encoder for CLIPScore.")] = ENCODER,
    framecaps: FrameCapsConfig,
    device: DeviceOpt = None,
    runner: RunnerConfig,
    batch: BatchConfig,
) -> None:
    """Label videos with image captions (Ventura et al.): caption M frames per captioner, keep
    the K best by CLIPScore -> DIR/framecaps/ (train on it with `howtocap train`)."""
    from howtocap.framecaps.run import framecaps_run

    summary = framecaps_run(inputs, out_dir, captioners=captioner or ["default"], scorer=scorer,
                            cfg=framecaps, device=device,
                            batching=batch, **runner.stage_args())
    report_summary(summary)
