"""``howtocap run``: its step options are the union of ``CaptionRunConfig``'s, ``AlignConfig``'s
(a flag both declare, e.g. ``--clip-seconds``, sets both) and ``DownloadConfig``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.align.config import AlignConfig
from howtocap.caption.config import CaptionRunConfig
from howtocap.cli.align import EncoderOpt, VideosOpt, attach_videos, print_align_result
from howtocap.cli.caption import ForceOpt, OptionalInputs, report_rejected, show_captions
from howtocap.cli.common import ConfigOpt, DeviceOpt, OutDir, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.download.config import DownloadConfig
from howtocap.encoders.defaults import ENCODER
from howtocap.engine.options import BatchConfig, RunnerConfig


@user_errors
@settings_options(caption=CaptionRunConfig, align=AlignConfig, download=DownloadConfig,
                  runner=RunnerConfig, batch=BatchConfig,
                  skip=("download.workers",))  # --workers is the runner's
def run_cmd(
    *,
    ctx: typer.Context,
    out_dir: OutDir,
    inputs: OptionalInputs = None,
    caption: CaptionRunConfig,
    align: AlignConfig,
    download: DownloadConfig,
    force: ForceOpt = False,
    runner: RunnerConfig,
    batch: BatchConfig,
    config: ConfigOpt = None,
    encoder: EncoderOpt = None,
    videos: VideosOpt = None,
    device: DeviceOpt = None,
    signals: Annotated[bool, typer.Option(
        "--signals", help="Also score visual signals per shot or window -> DIR/signals/ "
                          "(`howtocap signals` with the run's recorded or default "
                          "settings).")] = False,
) -> None:
    """caption -> align in one command, resumable: DIR/captions/, DIR/aligned/,
    DIR/align_report.html. Takes every flag of `caption` and of `align`; remote inputs
    (URLs, YouTube ids in a manifest) are downloaded first (the flags of `download`)."""
    from howtocap.engine.rundir import RunDir
    from howtocap.pipeline.run import run_pipeline

    if videos:
        attach_videos(RunDir(out_dir, create=False, shard_size=batch.shard_size), videos)
    summaries = run_pipeline(inputs, out_dir, caption=caption, align=align,
                             encoders=encoder or [ENCODER], batching=batch,
                             force=force, device=device, download=download, signals=signals,
                             **runner.stage_args())
    print_align_result(Path(out_dir), runner.shard)
    show_captions(out_dir)
    report_rejected(out_dir)
    report_summary(*summaries)
