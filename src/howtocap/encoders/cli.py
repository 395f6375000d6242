"""``howtocap encoders`` and ``howtocap frames``: list/check encoders, pre-fill the frame cache.

Why ``frames``: at scale one wants to decode every video once (e.g. on a GPU box, several
encoders at a time) before ``align``, ``index`` or ``train`` read the cache. The cache is its
own resume mechanism (a hit costs one 3 MiB hash), so no status records are kept.
The main CLI calls ``register(app)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cliutil import SHARD_HELP, out, report_summary, user_errors
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.pipeline.runner import Shard, StageSummary, run_stage
from howtocap.progress import console


def precompute_frames(inputs: list[str | Path], out_dir: Path, *, encoders: list[str],
                      fps: float = 1.0, batch_size: int = 32, workers: int = 1,
                      device: str | None = None, progress: bool = True,
                      shard: Shard | None = None) -> StageSummary:
    """Fill ``out_dir/cache/frames`` for every video and encoder, decoding each video once."""
    from howtocap.encoders import create
    from howtocap.encoders.cache import frame_embeddings_multi
    from howtocap.io.inputs import resolve_inputs
    from howtocap.rundir import RunDir

    if fps <= 0:
        raise HowtocapError(f"--fps must be positive, got {fps}")
    items = resolve_inputs(list(inputs))
    models = [create(name, device=device) for name in (encoders or ["default"])]
    rundir = RunDir(out_dir)

    def work(item: VideoItem) -> dict:
        res = frame_embeddings_multi(item.video_path, models, fps=fps,
                                     cache_dir=rundir.cache_dir, batch_size=batch_size)
        if res[0].partial:
            console.print(f"[yellow]![/yellow] frames {item.video_id}: video decoded only "
                          "partly; kept the good part", highlight=False)
        return {}

    return run_stage(rundir, items, "frames", work, workers=workers, progress=progress,
                     skip_done=False, shard=shard)


def register(app: typer.Typer) -> None:
    @app.command("encoders")
    @user_errors
    def encoders_cmd(
        check: Annotated[list[str] | None, typer.Option(
            "--check", help="Load this encoder and print its name, dimension, image size and "
                            "device (repeatable).")] = None,
        device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 …")] = None,
    ) -> None:
        """List the encoder names --encoder accepts; --check NAME loads one to verify it."""
        from howtocap.encoders import available, create

        if not check:
            out.print("\n".join(available()), highlight=False)
            return
        for name in check:
            enc = create(name, device=device)
            out.print(f"{enc.name}\tdim={enc.dim}\timage_size={enc.image_size}\t"
                      f"device={enc.device}", highlight=False)

    @app.command("frames")
    @user_errors
    def frames_cmd(
        inputs: Annotated[list[Path], typer.Argument(
            help="Video files, folders of videos, or manifest CSVs.")],
        out_dir: Annotated[Path, typer.Option("--out", "-o", help="Run directory; the cache "
                                              "goes to OUT/cache/frames.")],
        encoder: Annotated[list[str] | None, typer.Option(
            "--encoder", help="Encoder name (repeatable; each video is decoded once for all). "
                              "Default: default.")] = None,
        fps: Annotated[float, typer.Option(help="Frames embedded per second.")] = 1.0,
        batch_size: Annotated[int, typer.Option(min=1, help="Frames per encoder batch.")] = 32,
        workers: Annotated[int, typer.Option(min=1, help="Videos in parallel.")] = 1,
        shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
        device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda "
                                                        "if available).")] = None,
        quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    ) -> None:
        """Decode each video once and cache its per-second frame embeddings (float16)."""
        summary = precompute_frames(list(inputs), out_dir, encoders=encoder or ["default"],
                                    fps=fps, batch_size=batch_size, workers=workers,
                                    device=device, progress=not quiet,
                                    shard=Shard.parse(shard))
        report_summary(summary)

