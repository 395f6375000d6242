"""``howtocap export DIR``: a run's captions as HowToCaption JSON, a CSV, or WebDataset shards."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import QuietOpt, WhereOpt, err, user_errors
from howtocap.cli.options import settings_options
from howtocap.clips.config import ClipsConfig
from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError
from howtocap.io import CONTENT, FRAMES_PER_CLIP, IMAGE_SIZE, WHAT, ExportWhat


class ExportFmt(str, Enum):
    howtocaption = "howtocaption"
    csv = "csv"
    webdataset = "webdataset"
    clips = "clips"


@user_errors
@settings_options(clips=ClipsConfig)
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    *,
    format: Annotated[ExportFmt, typer.Option("--format", "-f")] = ExportFmt.howtocaption,
    what: Annotated[ExportWhat, typer.Option(
        help="auto: kept aligned pairs if aligned, else captions (webdataset: else frame "
             "captions, as `train` does).")] = WHAT,
    out_file: Annotated[Path | None, typer.Option(
        "--out", "-o", help="File, or for webdataset and clips a folder [default: "
                            "DIR/webdataset, DIR/clips].")]
    = None,
    unfiltered: Annotated[bool, typer.Option(help="All aligned pairs with their scores, as "
                                                   "HowToCaption's unfiltered release.")] = False,
    content: Annotated[str, typer.Option(
        help="webdataset: frames (JPEGs, for the dual encoder) or embeddings (per-second "
             "frame embeddings of --encoder from the run's cache, for mee).")] = CONTENT,
    frames_per_clip: Annotated[int, typer.Option(help="webdataset: frames stored per clip "
                                                      "(segment centres).")] = FRAMES_PER_CLIP,
    image_size: Annotated[int, typer.Option(help="webdataset: frame size (shorter side, "
                                                 "centre crop).")] = IMAGE_SIZE,
    clips: ClipsConfig,
    encoder: Annotated[str, typer.Option(help="webdataset --content embeddings: the encoder "
                                              "whose cached frame embeddings are stored.")]
    = ENCODER,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (embeddings not cached "
                                                    "yet are computed).")] = None,
    drop_duplicates: Annotated[bool, typer.Option(
        "--drop-duplicates", help="Leave out near-duplicate videos (all but each group's kept "
                                  "id) and repeated clips found by `howtocap duplicates DIR`.")
    ] = False,
    where: WhereOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write captions as HowToCaption JSON {video_id: {start, end, text}}, a CSV of pairs,
    WebDataset tar shards of clips (frames or embeddings + captions) to train at scale, or the
    clips themselves (MP4 + JSON + caption + middle frame, video2dataset's layout)."""
    if unfiltered and format in (ExportFmt.clips, ExportFmt.webdataset):
        raise HowtocapError(f"--unfiltered applies to howtocaption and csv, not {format.value}")
    if format == ExportFmt.clips:
        from howtocap.clips.export import export_clips

        clips.check()
        res = export_clips(run_dir, out_file, what=what, config=clips,
                           progress=not quiet, drop_duplicates=drop_duplicates, where=where)
        err.print(f"wrote {res.n_clips} clips ({res.n_captions} {res.kind} captions) in "
                  f"{len(res.shards)} shard(s) to {res.out}"
                  f"{f' ({res.reused} finished earlier)' if res.reused else ''}"
                  f"{f'; skipped {len(res.skipped)} video(s)' if res.skipped else ''}",
                  highlight=False)
        return
    if format == ExportFmt.webdataset:
        from howtocap.encoders.clip_rows import ClipRows
        from howtocap.io.webdataset import export_webdataset

        res = export_webdataset(run_dir, out_file, what=what, content=content,
                                frames_per_clip=frames_per_clip, image_size=image_size,
                                shard_size=clips.shard_size, progress=not quiet,
                                embed=ClipRows(encoder, device=device)
                                if content == "embeddings" else None,
                                drop_duplicates=drop_duplicates, where=where)
        err.print(f"wrote {res.n_samples} clips ({res.n_captions} {res.kind} captions) in "
                  f"{len(res.shards)} shard(s) to {res.out}"
                  f"{f'; skipped {len(res.skipped)} video(s)' if res.skipped else ''}",
                  highlight=False)
        return
    from howtocap.io.export import export_run

    path, n = export_run(run_dir, fmt=format.value, what=what, out=out_file,
                         unfiltered=unfiltered, drop_duplicates=drop_duplicates, where=where)
    err.print(f"wrote {n} captions to {path}")

