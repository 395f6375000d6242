"""``howtocap align DIR``: each flag maps one-to-one onto ``AlignConfig`` / ``align_run``.

Its options are named types here because ``run`` takes every one of them too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from howtocap.cli.common import (
    BatchSecondsOpt,
    BatchSizeOpt,
    ConfigOpt,
    MaxAttemptsOpt,
    QuietOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    ShardOpt,
    WorkersOpt,
    err,
    make_runner,
    parse_shard,
    report_summary,
    user_errors,
    yaml_config,
)

if TYPE_CHECKING:
    from howtocap.align.config import AlignConfig
    from howtocap.engine.rundir import RunDir

EncoderOpt = Annotated[list[str] | None, typer.Option(
    "--encoder", help="Image–text encoder (repeatable: similarities are averaged, e.g. "
                      "--encoder default --encoder round1.pt). Default: default.")]
OffsetSecondsOpt = Annotated[float, typer.Option(help="Try shifts -T … T seconds.")]
OffsetStepOpt = Annotated[float, typer.Option(help="Spacing of the shifts (s).")]
ClipSecondsOpt = Annotated[float, typer.Option(help="Length of a caption's clip (s).")]
FpsOpt = Annotated[float, typer.Option(help="Frames embedded per second.")]
ThresholdOpt = Annotated[float | None, typer.Option(help="Keep pairs with score >= X.")]
QuantileOpt = Annotated[float | None, typer.Option(help="Keep the best fraction Q.")]
KeepTopOpt = Annotated[int | None, typer.Option(help="Keep the N best pairs overall.")]
NullZOpt = Annotated[float | None, typer.Option(
    help="The default filter's bar: keep a caption whose score stands at least Z standard "
         "deviations above other videos' captions on its clip and its own scores on other "
         "videos' clips (the mean of the two); it also drops channel chatter by its text "
         "(see --keep-chatter). Default 0.75.")]
KeepChatterOpt = Annotated[bool, typer.Option(
    help="The default filter without its text test: keep captions such as 'Subscribe to "
         "the channel.' when their null z passes (--threshold/--quantile/--keep-top/"
         "--keep-all never apply the text test).")]
KeepAllOpt = Annotated[bool, typer.Option(help="No filter: keep every caption (chatter too).")]
ReferenceCaptionsOpt = Annotated[int, typer.Option(
    min=0, help="Other captions of the run the default filter compares with (drawn once "
                "per run directory; 0: none).")]
ReferenceVideosOpt = Annotated[int, typer.Option(
    min=0, help="Videos of the run whose clips the default filter compares each caption "
                "with (drawn once per run directory; 0: none).")]
SampleVideosOpt = Annotated[int, typer.Option(
    help="Above this many videos, estimate the quantile/keep-top threshold from a random "
         "sample of this many (0: exact).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of that sample.")]
RenormalizeOpt = Annotated[bool, typer.Option(
    help="Cosine to the clip mean instead of the plain dot product.")]
WithinShotOpt = Annotated[bool, typer.Option(
    "--within-shot", help="Keep each caption's window inside one shot (PySceneDetect's cuts, "
                          "DIR/shots.parquet: detected first when the run has none; `howtocap "
                          "shots` sets the detector). A window is cut back to the shot that "
                          "holds its middle before it is scored.")]
VideosOpt = Annotated[Path | None, typer.Option(
    "--videos", help="Video files for a run captioned from --subtitles alone: a folder "
                     "(file name = video id) or a manifest CSV video_id,video_path; "
                     "recorded in DIR/videos.parquet for this and later commands.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda if "
                                                    "available).")]


@user_errors
@yaml_config
def align_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory (made by `howtocap caption`).")],
    encoder: EncoderOpt = None,
    offset_seconds: OffsetSecondsOpt = 10.0,
    offset_step: OffsetStepOpt = 1.0,
    clip_seconds: ClipSecondsOpt = 8.0,
    fps: FpsOpt = 1.0,
    threshold: ThresholdOpt = None,
    quantile: QuantileOpt = None,
    keep_top: KeepTopOpt = None,
    null_z: NullZOpt = None,
    keep_chatter: KeepChatterOpt = False,
    keep_all: KeepAllOpt = False,
    reference_captions: ReferenceCaptionsOpt = 256,
    reference_videos: ReferenceVideosOpt = 16,
    sample_videos: SampleVideosOpt = 1000,
    seed: SeedOpt = 0,
    renormalize: RenormalizeOpt = False,
    within_shot: WithinShotOpt = False,
    videos: VideosOpt = None,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    batch_size: BatchSizeOpt = None,
    batch_seconds: BatchSecondsOpt = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Move each caption to its best-matching clip (±offset) and keep the best pairs ->
    DIR/aligned.parquet, DIR/align_report.html."""
    from howtocap.align.run import align_run
    from howtocap.engine.rundir import RunDir
    from howtocap.errors import InputError

    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "not a run directory")
    cfg = align_settings(
        offset_seconds=offset_seconds, offset_step=offset_step, clip_seconds=clip_seconds,
        fps=fps, threshold=threshold, quantile=quantile, keep_top=keep_top, null_z=null_z,
        keep_chatter=keep_chatter, keep_all=keep_all, reference_captions=reference_captions,
        reference_videos=reference_videos, sample_videos=sample_videos, seed=seed,
        renormalize=renormalize, within_shot=within_shot)
    run_on = make_runner(runner, workers=workers, ray_address=ray_address,
                         ray_gpus_per_stage=ray_gpus_per_stage)
    rundir = RunDir(root, create=False)
    if videos:
        attach_videos(rundir, videos)
    summary = align_run(rundir, encoder or ["default"], cfg, runner=run_on, device=device,
                        progress=not quiet, shard=parse_shard(shard, (batch_size, batch_seconds)),
                        redo=redo,
                        retry_failed=retry_failed, max_attempts=max_attempts)
    print_align_result(root, shard)
    report_summary(summary)


def align_settings(
    *, offset_seconds: float, offset_step: float, clip_seconds: float, fps: float,
    threshold: float | None, quantile: float | None, keep_top: int | None,
    sample_videos: int, seed: int | None, renormalize: bool, null_z: float | None = None,
    keep_all: bool | None = None, reference_captions: int | None = None,
    reference_videos: int | None = None, keep_chatter: bool = False, within_shot: bool = False,
) -> AlignConfig:
    """The ``AlignConfig`` of the command's options (``None``: the config's default; one line
    on a bad value)."""
    from howtocap.align.config import align_config

    return align_config(
        offset_seconds=offset_seconds, offset_step=offset_step, clip_seconds=clip_seconds,
        fps=fps, threshold=threshold, quantile=quantile, keep_top=keep_top,
        sample_videos=sample_videos, seed=seed, renormalize=renormalize, null_z=null_z,
        keep_all=keep_all, reference_captions=reference_captions,
        reference_videos=reference_videos, drop_chatter=not keep_chatter,
        within_shot=within_shot)


def print_align_result(root: Path, shard: str | None) -> None:
    """One line: pairs aligned and kept by the filter, or what a shard still waits for."""
    from howtocap.engine.rundir import RunDir

    if shard:
        err.print(f"shard {shard} scored; run `howtocap align {root}` without --shard "
                  "once every shard is done to filter and write aligned.parquet", highlight=False)
        return
    rundir = RunDir(root, create=False)
    info = rundir.read_config("align") or {}
    rule = info.get("filter") or "no filter"
    outside = int(info.get("outside_video", 0))
    chatter = int(info.get("chatter_dropped", 0))
    dropped = (f"; {chatter} dropped as channel chatter" if chatter else "") + (
        f"; {outside} dropped: no window within ±{info.get('offset_seconds', 10):g} s "
        "inside the video" if outside else "")
    err.print(f"aligned {info.get('pairs', 0)} pairs, kept {info.get('kept', 0)} "
              f"({rule}){dropped} -> {rundir.table_path('aligned')}, "
              f"{root / 'align_report.html'}", highlight=False)


def attach_videos(rundir: RunDir, source: Path) -> None:
    """``--videos``: record the files of videos the run knows only by id (text-only caption);
    videos still without a file then fail alignment one line each, the others align."""
    from howtocap.errors import InputError
    from howtocap.io.inputs import resolve_inputs

    items = resolve_inputs([source])
    if not items:
        raise InputError(source, "holds no video files")
    attached, unknown = rundir.attach_videos(items)
    if not attached:
        raise InputError(source, f"none of its {len(items)} videos is in this run (video ids "
                                 "are file names without extension, or a manifest's video_id)")
    err.print(f"--videos: recorded {len(attached)} video file(s) in {rundir.table_path('videos')}"
              + (f"; {len(unknown)} not in this run, ignored" if unknown else ""),
              highlight=False)
