"""``howtocap download``: its step options are ``DownloadConfig``'s, which ``run`` takes too
(with ``--keep-media``)."""

from __future__ import annotations

from typing import Annotated

import typer

from howtocap.cli.common import OutDir, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.download.config import DownloadConfig
from howtocap.engine.options import RunnerConfig


@user_errors
@settings_options(download=DownloadConfig, runner=RunnerConfig,
                  skip=("keep_media", "runner.workers"))  # --workers: the downloads'
def download_cmd(
    inputs: Annotated[list[str], typer.Argument(
        help="Manifest CSVs (video_path / subtitle_path may be http(s)://, s3://, gs:// URLs or "
             "YouTube ids/URLs), URLs, or local files (passed through).")],
    out_dir: OutDir,
    *,
    download: DownloadConfig,
    runner: RunnerConfig,
) -> None:
    """Fetch remote videos (and YouTube's English automatic captions) into OUT/cache/media:
    OUT/downloads/ says where each one is; `howtocap run` does this first."""
    from howtocap.download.run import download_run

    runner = runner.model_copy(update={"workers": download.workers})
    _, summary = download_run(list(inputs), out_dir, download, **runner.stage_args())
    report_summary(summary)
