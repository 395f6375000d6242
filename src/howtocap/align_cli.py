"""``howtocap align DIR``: each flag maps one-to-one onto ``AlignConfig`` / ``align_run``.

The main CLI calls ``register(app)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from howtocap.cliutil import (
    SHARD_HELP,
    MaxAttemptsOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    WorkersOpt,
    err,
    load_yaml_config,
    parse_shard,
    report_summary,
    user_errors,
)

if TYPE_CHECKING:
    from howtocap.engine.core import StageSummary
    from howtocap.engine.rundir import RunDir


def align_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="Run directory (made by `howtocap caption`).")],
    encoder: Annotated[list[str] | None, typer.Option(
        "--encoder", help="Image–text encoder (repeatable: similarities are averaged, e.g. "
                          "--encoder default --encoder round1.pt). Default: default.")] = None,
    offset_seconds: Annotated[float, typer.Option(help="Try shifts -T … T seconds.")] = 10.0,
    offset_step: Annotated[float, typer.Option(help="Spacing of the shifts (s).")] = 1.0,
    clip_seconds: Annotated[float, typer.Option(help="Length of a caption's clip (s).")] = 8.0,
    fps: Annotated[float, typer.Option(help="Frames embedded per second.")] = 1.0,
    threshold: Annotated[float | None, typer.Option(help="Keep pairs with score >= X.")] = None,
    quantile: Annotated[float | None, typer.Option(help="Keep the best fraction Q.")] = None,
    keep_top: Annotated[int | None, typer.Option(help="Keep the N best pairs overall.")] = None,
    null_z: Annotated[float | None, typer.Option(
        help="The default filter's bar: keep a caption whose score stands at least Z standard "
             "deviations above other videos' captions on its clip and its own scores on other "
             "videos' clips (the mean of the two); it also drops channel chatter by its text "
             "(see --keep-chatter). Default 0.75.")] = None,
    keep_chatter: Annotated[bool, typer.Option(
        help="The default filter without its text test: keep captions such as 'Subscribe to "
             "the channel.' when their null z passes (--threshold/--quantile/--keep-top/"
             "--keep-all never apply the text test).")] = False,
    keep_all: Annotated[bool, typer.Option(
        help="No filter: keep every caption (chatter too).")] = False,
    reference_captions: Annotated[int, typer.Option(
        min=0, help="Other captions of the run the default filter compares with (drawn once "
                    "per run directory; 0: none).")] = 256,
    reference_videos: Annotated[int, typer.Option(
        min=0, help="Videos of the run whose clips the default filter compares each caption "
                    "with (drawn once per run directory; 0: none).")] = 16,
    sample_videos: Annotated[int, typer.Option(
        help="Above this many videos, estimate the quantile/keep-top threshold from a random "
             "sample of this many (0: exact).")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of that sample.")] = 0,
    renormalize: Annotated[bool, typer.Option(
        help="Cosine to the clip mean instead of the plain dot product.")] = False,
    videos: Annotated[Path | None, typer.Option(
        "--videos", help="Video files for a run captioned from --subtitles alone: a folder "
                         "(file name = video id) or a manifest CSV video_id,video_path; "
                         "recorded in DIR/videos.parquet for this and later commands.")] = None,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda if "
                                                    "available).")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any of these options.")]
    = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Move each caption to its best-matching clip (±offset) and keep the best pairs ->
    DIR/aligned.parquet, DIR/align_report.html."""
    v = load_yaml_config(ctx, config, dict(locals()))
    report_summary(align_from_options(v))


def align_settings(v: dict[str, Any]) -> Any:
    """The ``AlignConfig`` of the command's option values (one line on a bad value)."""
    from howtocap.align.config import align_config

    return align_config(**{k: v[k] for k in (
        "offset_seconds", "offset_step", "clip_seconds", "fps", "threshold", "quantile",
        "keep_top", "sample_videos", "seed", "renormalize")},
        **{k: v.get(k) for k in ("null_z", "keep_all", "reference_captions",
                                 "reference_videos")},
        drop_chatter=not v.get("keep_chatter", False))


def align_from_options(v: dict[str, Any]) -> StageSummary:
    """Run ``align`` from the command's option values."""
    from howtocap.align.run import align_run
    from howtocap.engine.rundir import RunDir
    from howtocap.engine.runners import make_runner
    from howtocap.errors import InputError

    root = Path(v["run_dir"])
    if not root.is_dir():
        raise InputError(root, "not a run directory")
    cfg = align_settings(v)
    runner = make_runner(RunnerName(v["runner"]).value, workers=v["workers"],
                         ray_address=v["ray_address"], ray_gpus=v["ray_gpus_per_stage"])
    rundir = RunDir(root, create=False)
    if v.get("videos"):
        attach_videos(rundir, v["videos"])
    summary = align_run(rundir, v["encoder"] or ["default"], cfg, runner=runner,
                        device=v["device"], progress=not v["quiet"],
                        shard=parse_shard(v["shard"]), redo=v["redo"],
                        retry_failed=v["retry_failed"], max_attempts=v["max_attempts"])
    print_align_result(root, v["shard"])
    return summary


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


def register(app: typer.Typer) -> None:
    """Add ``align`` to a Typer app."""
    app.command("align")(user_errors(align_cmd))
