"""``howtocap download``: fetch remote inputs (URLs, ``s3://``, ``gs://``, YouTube ids) into a
run's media cache (``download.run.download_run``); ``run`` takes the same options."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

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
    validated,
)


class Formats(str, Enum):
    mp4 = "mp4"
    webm = "webm"
    any = "any"


class Switch(str, Enum):  # `--keep-media false` (a value, as the docs write it)
    true = "true"
    false = "false"


FormatOpt = Annotated[Formats, typer.Option(
    "--format", help="Container of downloaded videos (yt-dlp merges video and audio into it); "
                     "any: whatever the site has.")]
MaxHeightOpt = Annotated[int, typer.Option(
    "--max-height", min=1, help="Largest video height fetched from YouTube and other sites "
                                "(the smallest there is when none is that small).")]
AudioOpt = Annotated[bool, typer.Option(
    "--audio/--no-audio", help="Keep the audio track (ASR needs it when a video has no "
                               "captions).")]
MaxSizeOpt = Annotated[str, typer.Option(
    "--max-size", help="Largest file fetched (e.g. 500M, 2G); a larger one fails as 'too "
                       "large', aborted mid-stream.")]
SubLangsOpt = Annotated[str, typer.Option(
    "--sub-langs", help="YouTube automatic-caption languages fetched as WebVTT (comma "
                        "separated; '' for none): the video's sidecar subtitles.")]
ConnectTimeoutOpt = Annotated[float, typer.Option(
    "--connect-timeout", min=0.001, help="Seconds to connect to a server.")]
ReadTimeoutOpt = Annotated[float, typer.Option(
    "--read-timeout", min=0.001, help="Seconds without a byte before a download attempt fails "
                                      "('timeout').")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", min=0, help="Retries of transient download failures (timeouts, HTTP 5xx and "
                             "429, dropped connections), with doubling backoff.")]
StorageOpt = Annotated[str | None, typer.Option(
    "--storage-options", help='fsspec options as JSON, per protocol: \'{"s3": {"endpoint_url": '
                              '"http://127.0.0.1:9000", "anon": true}}\' (else the usual '
                              'AWS_* / GOOGLE_* environment). Never written to the run.')]
KeepMediaOpt = Annotated[Switch, typer.Option(
    "--keep-media", help="false: delete each downloaded video once align has used its frames "
                         "(clip export then downloads it again).")]
DlWorkersOpt = Annotated[int, typer.Option(
    "--workers", min=1, help="Downloads in parallel (threads: they wait on the network).")]


def download_config(*, format: str, max_height: int, audio: bool, max_size: str,
                    sub_langs: str, connect_timeout: float, read_timeout: float, retries: int,
                    storage_options: str | None, keep_media: str,
                    workers: int | None = None) -> Any:
    """The download step's settings from its options (a bad value is one line)."""
    from howtocap.download.config import DownloadConfig, parse_size, parse_storage_options

    extra = {"workers": workers} if workers is not None else {}
    return validated(
        DownloadConfig, format=getattr(format, "value", format), max_height=max_height,
        audio=audio, max_size=parse_size(max_size),
        sub_langs=[s.strip() for s in sub_langs.split(",") if s.strip()],
        connect_timeout=connect_timeout, read_timeout=read_timeout, retries=retries,
        storage_options=parse_storage_options(storage_options),
        keep_media=getattr(keep_media, "value", keep_media) == "true", **extra)


@user_errors
def download_cmd(
    inputs: Annotated[list[str], typer.Argument(
        help="Manifest CSVs (video_path / subtitle_path may be http(s)://, s3://, gs:// URLs or "
             "YouTube ids/URLs), URLs, or local files (passed through).")],
    out_dir: OutDir,
    workers: DlWorkersOpt = 8,
    format: FormatOpt = Formats.mp4,
    max_height: MaxHeightOpt = 360,
    audio: AudioOpt = True,
    max_size: MaxSizeOpt = "2G",
    sub_langs: SubLangsOpt = "en",
    connect_timeout: ConnectTimeoutOpt = 10.0,
    read_timeout: ReadTimeoutOpt = 30.0,
    retries: RetriesOpt = 3,
    storage_options: StorageOpt = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fetch remote videos (and YouTube's English automatic captions) into OUT/cache/media:
    OUT/downloads.parquet says where each one is; `howtocap run` does this first."""
    from howtocap.download.run import download_run

    cfg = download_config(format=format, max_height=max_height, audio=audio,
                          max_size=max_size, sub_langs=sub_langs,
                          connect_timeout=connect_timeout, read_timeout=read_timeout,
                          retries=retries, storage_options=storage_options,
                          keep_media="true", workers=workers)
    _, summary = download_run(
        list(inputs), out_dir, cfg,
        runner=make_runner(runner, workers=workers, ray_address=ray_address,
                           ray_gpus_per_stage=ray_gpus_per_stage),
        progress=not quiet, shard=parse_shard(shard), redo=redo, retry_failed=retry_failed,
        max_attempts=max_attempts)
    report_summary(summary)
