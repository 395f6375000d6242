"""``howtocap encoders`` and ``howtocap frames``: list/check encoders, pre-fill the frame cache
(``frames.run.frames_run``). The main CLI calls ``register(app)``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cliutil import (
    SHARD_HELP,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RunnerName,
    RunnerOpt,
    out,
    parse_shard,
    report_summary,
    user_errors,
)


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
        runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
        ray_address: RayAddressOpt = None,
        ray_gpus_per_stage: RayGpusOpt = None,
        shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
        device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 … (default: cuda "
                                                        "if available).")] = None,
        redo: RedoOpt = False,
        quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    ) -> None:
        """Decode each video once and cache its per-second frame embeddings (float16)."""
        from howtocap.engine.runners import make_runner
        from howtocap.frames.run import frames_run

        run_on = make_runner(RunnerName(runner).value, workers=workers,
                             ray_address=ray_address, ray_gpus=ray_gpus_per_stage)
        summary = frames_run(list(inputs), out_dir, encoders=encoder or ["default"], fps=fps,
                             batch_size=batch_size, device=device, runner=run_on,
                             progress=not quiet, shard=parse_shard(shard), redo=redo)
        report_summary(summary)

