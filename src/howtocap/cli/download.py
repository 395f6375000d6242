"""``howtocap download``: fetch remote inputs (URLs, ``s3://``, ``gs://``, YouTube ids) into a
run's media cache (``download.run.download_run``); its step options are the fields of
``DownloadConfig`` (``cli.options``), which ``run`` takes too (and ``--keep-media``)."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import (
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
    make_runner,
    parse_shard,
    report_summary,
    user_errors,
)
from howtocap.cli.options import settings_options
from howtocap.download.config import DownloadConfig
from howtocap.engine.stage import MAX_ATTEMPTS


@user_errors
@settings_options(download=DownloadConfig, skip=("keep_media",))
def download_cmd(
    inputs: Annotated[list[str], typer.Argument(
        help="Manifest CSVs (video_path / subtitle_path may be http(s)://, s3://, gs:// URLs or "
             "YouTube ids/URLs), URLs, or local files (passed through).")],
    out_dir: OutDir,
    *,
    download: DownloadConfig,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = MAX_ATTEMPTS,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fetch remote videos (and YouTube's English automatic captions) into OUT/cache/media:
    OUT/downloads/ says where each one is; `howtocap run` does this first."""
    from howtocap.download.run import download_run

    _, summary = download_run(
        list(inputs), out_dir, download,
        runner=make_runner(runner, workers=download.workers, ray_address=ray_address,
                           ray_gpus_per_stage=ray_gpus_per_stage),
        progress=not quiet, shard=parse_shard(shard), redo=redo, retry_failed=retry_failed,
        max_attempts=max_attempts)
    report_summary(summary)
