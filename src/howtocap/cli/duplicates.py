"""``howtocap duplicates DIR``: near-duplicate videos and repeated clips of a run
(``howtocap.duplicates.run.duplicates_run``) into ``DIR/duplicates.parquet``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import QuietOpt, err, user_errors, validated
from howtocap.duplicates.config import DuplicatesConfig

_DEFAULT = DuplicatesConfig()  # the options' defaults are the step's


def duplicates_settings(threshold: float, min_seconds: int, video_cover: float, gap: int,
                        neighbours: int) -> DuplicatesConfig:
    """The options as the step's typed settings (a bad value is one line)."""
    return validated(DuplicatesConfig, threshold=threshold, min_seconds=min_seconds,
                     video_cover=video_cover, gap=gap, neighbours=neighbours)


@user_errors
def duplicates_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (after `run` or `frames`).")],
    threshold: Annotated[float, typer.Option(
        help="Cosine of two seconds' frame embeddings at which they show the same footage "
             "(tuned for the default encoder; docs/duplicates.md).")] = _DEFAULT.threshold,
    min_seconds: Annotated[int, typer.Option(
        help="Matched seconds in temporal order that make a repeated clip.")
    ] = _DEFAULT.min_seconds,
    video_cover: Annotated[float, typer.Option(
        help="Share of the shorter video matched that makes the pair near-duplicate videos "
             "(below: repeated clips).")] = _DEFAULT.video_cover,
    gap: Annotated[int, typer.Option(help="Unmatched seconds a matched run may bridge.")
                   ] = _DEFAULT.gap,
    neighbours: Annotated[int, typer.Option(
        help="k of the FAISS k-NN over keyframes that proposes pairs to check.")
    ] = _DEFAULT.neighbours,
    encoder: Annotated[str, typer.Option(
        help="Encoder whose cached frame embeddings are compared (missing ones are computed "
             "into the cache).")] = "default",
    fps: Annotated[float, typer.Option(help="Frame rate of the cached embeddings.")] = 1.0,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (for embeddings not "
                                                    "cached yet).")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Find near-duplicate videos (re-uploads, re-encodes, crops, resizes, trimmed copies) and
    repeated clips; writes DIR/duplicates.parquet (export/train --drop-duplicates use it)."""
    from howtocap.duplicates.run import duplicates_run

    cfg = duplicates_settings(threshold, min_seconds, video_cover, gap, neighbours)
    res = duplicates_run(run_dir, cfg, encoder=encoder, fps=fps, device=device,
                         progress=not quiet)
    err.print(f"{res.n_videos} videos: {res.duplicate_videos} near-duplicate video(s) in "
              f"{res.groups} group(s), {res.clips} repeated clip(s) "
              f"({res.candidate_pairs} candidate pairs checked"
              f"{f'; skipped {len(res.skipped)} video(s)' if res.skipped else ''}) -> "
              f"{res.path}", highlight=False)
