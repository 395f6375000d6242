"""``howtocap align DIR``: its step options are ``AlignConfig``'s (``run`` takes them too)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from howtocap.align.config import AlignConfig
from howtocap.cli.common import ConfigOpt, DeviceOpt, err, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.encoders.defaults import ENCODER
from howtocap.engine.options import BatchConfig, RunnerConfig

if TYPE_CHECKING:
    from howtocap.engine.rundir import RunDir

EncoderOpt = Annotated[list[str] | None, typer.Option(
    "--encoder", help="Image–text encoder (repeatable: similarities are averaged, e.g. "
                      "--encoder default --encoder round1.pt). Default: default.")]
VideosOpt = Annotated[Path | None, typer.Option(
    "--videos", help="Video files for a run captioned from --subtitles alone: a folder "
                     "(file name = video id) or a manifest CSV video_id,video_path; "
                     "recorded in DIR/videos.parquet for this and later commands.")]


@user_errors
@settings_options(align=AlignConfig, runner=RunnerConfig, batch=BatchConfig,
                  skip=("batch.shard_size",))  # align makes no run directory
def align_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory (made by `howtocap caption`).")],
    *,
    encoder: EncoderOpt = None,
    align: AlignConfig,
    videos: VideosOpt = None,
    runner: RunnerConfig,
    batch: BatchConfig,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Move each caption to its best-matching clip (±offset) and keep the best pairs ->
    DIR/aligned/, DIR/align_report.html."""
    from howtocap.align.run import align_run
    from howtocap.engine.rundir import RunDir
    from howtocap.errors import InputError

    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "not a run directory")
    args = runner.stage_args()
    rundir = RunDir(root, create=False)
    if videos:
        attach_videos(rundir, videos)
    summary = align_run(rundir, encoder or [ENCODER], align, device=device,
                        batching=batch, **args)
    print_align_result(root, runner.shard)
    report_summary(summary)


def print_align_result(root: Path, shard: str | None) -> None:
    """One line: pairs aligned and kept by the filter, or what a shard still waits for."""
    from howtocap.engine.rundir import RunDir

    if shard:
        err.print(f"shard {shard} scored; run `howtocap align {root}` without --shard "
                  f"once every shard is done to filter and write {root / 'aligned'}/",
                  highlight=False)
        return
    info = RunDir(root, create=False).configs.read("align") or {}
    rule = info.get("filter") or "no filter"
    outside = int(info.get("outside_video", 0))
    chatter = int(info.get("chatter_dropped", 0))
    offset = info.get("offset_seconds", AlignConfig().offset_seconds)
    dropped = (f"; {chatter} dropped as channel chatter" if chatter else "") + (
        f"; {outside} dropped: no window within ±{offset:g} s "
        "inside the video" if outside else "")
    err.print(f"aligned {info.get('pairs', 0)} pairs, kept {info.get('kept', 0)} "
              f"({rule}){dropped} -> {root / 'aligned'}/, "
              f"{root / 'align_report.html'}", highlight=False)


def attach_videos(rundir: RunDir, source: Path) -> None:
    """``--videos``: record the files of videos the run knows only by id (text-only caption);
    videos still without a file then fail alignment one line each, the others align."""
    from howtocap.errors import InputError
    from howtocap.io.inputs import resolve_inputs

    items = resolve_inputs([source])
    if not items:
        raise InputError(source, "holds no video files")
    known = rundir.shard_of([it.video_id for it in items]) >= 0
    attached = [it for it, k in zip(items, known, strict=True) if k and it.video_path]
    unknown = int((~known).sum())
    if not attached:
        raise InputError(source, f"none of its {len(items)} videos is in this run (video ids "
                                 "are file names without extension, or a manifest's video_id)")
    rundir.record_videos(attached)
    err.print(f"--videos: recorded {len(attached)} video file(s) in {rundir.table_path('videos')}"
              + (f"; {unknown} not in this run, ignored" if unknown else ""),
              highlight=False)
