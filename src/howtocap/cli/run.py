"""``howtocap run``: caption -> align in one command; its step options are the union of
``CaptionRunConfig``'s and ``AlignConfig``'s (``cli.options``: a flag both declare, such as
``--clip-seconds`` or ``--keep-chatter``, sets both) and ``DownloadConfig``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.align.config import AlignConfig
from howtocap.caption.config import CaptionRunConfig
from howtocap.cli.align import DeviceOpt, EncoderOpt, VideosOpt, attach_videos, print_align_result
from howtocap.cli.caption import ForceOpt, OptionalInputs, report_rejected, show_captions
from howtocap.cli.common import (
    BatchSecondsOpt,
    BatchSizeOpt,
    ConfigOpt,
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
from howtocap.cli.options import settings_options
from howtocap.download.config import DownloadConfig
from howtocap.engine.stage import MAX_ATTEMPTS


@user_errors
@settings_options(caption=CaptionRunConfig, align=AlignConfig, download=DownloadConfig,
                  skip=("workers",))  # --workers is the runner's; downloads: their default
def run_cmd(
    *,
    ctx: typer.Context,
    out_dir: OutDir,
    inputs: OptionalInputs = None,
    caption: CaptionRunConfig,
    align: AlignConfig,
    download: DownloadConfig,
    force: ForceOpt = False,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = MAX_ATTEMPTS,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    batch_size: BatchSizeOpt = None,
    batch_seconds: BatchSecondsOpt = None,
    shard_size: ShardSizeOpt = None,
    config: ConfigOpt = None,
    quiet: QuietOpt = False,
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
        attach_videos(RunDir(out_dir, create=False, shard_size=shard_size), videos)
    summaries = run_pipeline(inputs, out_dir, caption=caption, align=align,
                             encoders=encoder or ["default"],
                             runner=make_runner(runner, workers=workers, ray_address=ray_address,
                                                ray_gpus_per_stage=ray_gpus_per_stage),
                             shard=parse_shard(shard),
                             batching=batching(batch_size, batch_seconds, shard_size),
                             force=force, device=device,
                             progress=not quiet, redo=redo, retry_failed=retry_failed,
                             max_attempts=max_attempts, download=download, signals=signals)
    print_align_result(Path(out_dir), shard)
    show_captions(out_dir, limit=0)
    report_rejected(out_dir)
    report_summary(*summaries)
