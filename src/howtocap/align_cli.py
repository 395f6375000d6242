"""``howtocap align DIR``: each flag maps one-to-one onto ``AlignConfig`` / ``align_run``.

The main CLI calls ``register(app)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from howtocap.cliutil import SHARD_HELP, err, load_yaml_config, report_summary, user_errors
from howtocap.pipeline.runner import Shard

if TYPE_CHECKING:
    from howtocap.pipeline.runner import StageSummary


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
    sample_videos: Annotated[int, typer.Option(
        help="Above this many videos, estimate the quantile/keep-top threshold from a random "
             "sample of this many (0: exact).")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of that sample.")] = 0,
    renormalize: Annotated[bool, typer.Option(
        help="Cosine to the clip mean instead of the plain dot product.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Videos in parallel.")] = 1,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
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


def align_from_options(v: dict[str, Any]) -> StageSummary:
    """Run ``align`` from the command's option values (shared with ``howtocap run``)."""
    from howtocap.align import align_config, align_run
    from howtocap.rundir import RunDir

    root = Path(v["run_dir"])
    if not root.is_dir():
        from howtocap.errors import InputError

        raise InputError(root, "not a run directory")
    cfg = align_config(**{k: v[k] for k in (
        "offset_seconds", "offset_step", "clip_seconds", "fps", "threshold", "quantile",
        "keep_top", "sample_videos", "seed", "renormalize")})
    rundir = RunDir(root, create=False)
    summary = align_run(rundir, v["encoder"] or ["default"], cfg, workers=v["workers"],
                        device=v["device"], progress=not v["quiet"],
                        shard=Shard.parse(v["shard"]))
    if v["shard"]:
        err.print(f"shard {v['shard']} scored; run `howtocap align {root}` without --shard "
                  "once every shard is done to filter and write aligned.parquet", highlight=False)
        return summary
    info = rundir.read_config("align") or {}
    used = info.get("threshold_used")
    rule = ("no filter: --threshold, --quantile or --keep-top drop pairs"
            if used is None or used == float("-inf") else f"threshold {used:.4f}")
    err.print(f"aligned {info.get('pairs', 0)} pairs, kept {info.get('kept', 0)} "
              f"({rule}) -> {rundir.table_path('aligned')}, "
              f"{root / 'align_report.html'}", highlight=False)
    return summary


def register(app: typer.Typer) -> None:
    """Add ``align`` to a Typer app."""
    app.command("align")(user_errors(align_cmd))
