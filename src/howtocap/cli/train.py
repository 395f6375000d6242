"""``howtocap train``: its flags are ``TrainConfig``'s fields (those a ``--recipe`` sets default
to the recipe's). Several GPUs: ``torchrun --nproc_per_node N -m howtocap.cli train ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import DeviceOpt, WhereOpt, err, user_errors
from howtocap.cli.options import settings_options
from howtocap.train.config import Recipe, TrainConfig


@user_errors
@settings_options(settings=TrainConfig, unset=tuple(Recipe.model_fields))
def train_cmd(
    source: Annotated[Path, typer.Argument(
        help="Pairs: a run directory (kept rows of DIR/aligned/), its aligned/ folder, a "
             "CSV with video_id,video_path,caption,start,end, or a folder of WebDataset shards "
             "(`howtocap export --format webdataset`), streamed instead of held in memory.")],
    *,
    settings: TrainConfig,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the checkpoint in --out from its last finished epoch, "
                        "exactly as an uninterrupted run would.")] = False,
    device: DeviceOpt = None,
    drop_duplicates: Annotated[bool, typer.Option(
        "--drop-duplicates", help="Run directory: leave out near-duplicate videos and repeated "
                                  "clips found by `howtocap duplicates SOURCE`.")] = False,
    where: WhereOpt = None,
) -> None:
    """Train a retrieval model on caption–clip pairs; writes OUT/ckpt/last.pt, train_log.csv/png."""
    from howtocap.train.api import train

    # the settings typed (and the recipe's): train() checks them again with the rest
    res = train(source, **settings.model_dump(exclude_unset=True), resume=resume, device=device,
                drop_duplicates=drop_duplicates, where=where)

    from howtocap.train.distributed import dist_info

    if dist_info()[0] != 0:
        return  # under torchrun only the first process reports
    m = res.final_metrics
    metrics = "  ".join(f"{k} {m[k]:.1f}" for k in ("R@1", "R@5", "R@10") if k in m)
    err.print(f"[green]trained[/green] {res.n_train_clips} clips ({res.n_pairs} pairs, "
              f"{len(res.skipped_videos)} video(s) skipped); held-out {res.n_eval_clips} clips"
              f"{': ' + metrics if metrics else ''}\ncheckpoint: {res.checkpoint}",
              highlight=False)
