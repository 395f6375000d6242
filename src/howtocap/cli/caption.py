"""``howtocap caption``: its step options are ``CaptionRunConfig``'s (``run`` takes them too)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from howtocap.caption.config import CaptionRunConfig
from howtocap.cli.common import ConfigOpt, OutDir, err, out, report_summary, user_errors
from howtocap.cli.options import settings_options
from howtocap.engine.options import BatchConfig, RunnerConfig

OptionalInputs = Annotated[list[Path] | None, typer.Argument(
    help="Video files, folders of videos, or manifest CSVs (video_id,video_path"
         "[,subtitle_path]). None: caption every video of --subtitles from its text alone.",
    show_default=False)]
ForceOpt = Annotated[bool, typer.Option(help="Redo videos already captioned.")]


@user_errors
@settings_options(caption=CaptionRunConfig, runner=RunnerConfig, batch=BatchConfig)
def caption_cmd(
    ctx: typer.Context,
    out_dir: OutDir,
    inputs: OptionalInputs = None,
    *,
    caption: CaptionRunConfig,
    force: ForceOpt = False,
    runner: RunnerConfig,
    batch: BatchConfig,
    config: ConfigOpt = None,
) -> None:
    """Subtitles (or Whisper ASR) -> LLM captions with timestamps -> DIR/captions/."""
    from howtocap.caption.run import caption_run

    summaries = caption_run(inputs, out_dir, caption, force=force, batching=batch,
                            **runner.stage_args())
    show_captions(out_dir)
    report_rejected(out_dir)
    report_summary(*summaries)


def report_rejected(run_dir: Path) -> None:
    """One line: how many captions were rejected as showing nothing, by reason."""
    from howtocap.caption.run import rejected_counts
    from howtocap.engine.rundir import RunDir

    counts = rejected_counts(RunDir(run_dir, create=False))
    if counts:
        by = ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
        err.print(f"rejected {sum(counts.values())} captions that show nothing ({by}): not "
                  "aligned, kept in DIR/captions/'s `rejected` column (--keep-fillers "
                  "keeps them)", highlight=False)


def show_captions(run_dir: Path) -> None:
    """Print a run's captions as a table (not when piped and longer than 200 rows)."""
    from rich.table import Table

    from howtocap.engine.rundir import RunDir

    rd = RunDir(run_dir, create=False)
    aligned = rd.has_table("aligned")
    df = rd.table("aligned" if aligned else "captions")
    if not len(df) or not sys.stdout.isatty() and len(df) > 200:
        return
    table = Table(title=f"{'aligned ' if aligned else ''}captions in {run_dir}")
    for col in ["video", "time", *(["aligned", "score", "kept"] if aligned else []), "caption"]:
        table.add_column(col, no_wrap=col != "caption")
    for row in df.itertuples():
        cells = [row.video_id]
        if aligned:
            cells += [f"{row.orig_start:6.1f}–{row.orig_end:6.1f}",
                      f"{row.start:6.1f}–{row.end:6.1f} ({row.offset:+.0f}s)",
                      f"{row.score:.3f}", "✓" if row.kept else "✗"]
        else:
            cells.append(f"{row.start:6.1f}–{row.end:6.1f}")
        table.add_row(*cells, row.text)
    out.print(table)
