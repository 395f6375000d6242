"""``howtocap train`` (flags map one-to-one onto ``howtocap.train.api.train``).

Several GPUs: ``torchrun --nproc_per_node N -m howtocap.cli train ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from howtocap.cli.common import DeviceOpt, WhereOpt, err, user_errors
from howtocap.train.config import DEFAULT_LR, Model, Optimizer, RecipeName, TrainConfig

D = {name: field.default for name, field in TrainConfig.model_fields.items()}  # the defaults


@user_errors
def train_cmd(
    source: Annotated[Path, typer.Argument(
        help="Pairs: a run directory (kept rows of DIR/aligned/), its aligned/ folder, a "
             "CSV with video_id,video_path,caption,start,end, or a folder of WebDataset shards "
             "(`howtocap export --format webdataset`), streamed instead of held in memory.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for checkpoints and logs.")],
    model: Annotated[Model, typer.Option(
        help="dual: fine-tune the encoder (InfoNCE); mee: HowTo100M gated embedding baseline "
             "on frozen features (max-margin).")] = D["model"],
    encoder: Annotated[str, typer.Option(
        help="Encoder to start from: default, hf:<id|folder>, openclip:<arch>/<pretrained>, "
             "or a checkpoint.")] = D["encoder"],
    recipe: Annotated[RecipeName | None, typer.Option(
        help="Preset of a paper's settings (explicit options override it): howtocaption "
             "(AdamW lr 1e-6, batch 128, 4/12 frames, momentum 0.995, queue 2048, soft labels "
             "0.6, crops 0.5-1), second-round (the same with --alpha 0.1), ventura (Adam lr "
             "1e-4, cosine, batch 16, 10 frames, 10 epochs).")] = None,
    epochs: Annotated[int | None, typer.Option(
        help=f"Passes over the clips [default: {D['epochs']}].")] = None,
    batch_size: Annotated[int | None, typer.Option(
        help=f"Clips per step and process [default: {D['batch_size']}].")] = None,
    lr: Annotated[float | None, typer.Option(
        help=f"Peak learning rate [default: {DEFAULT_LR['dual']:g} dual, "
             f"{DEFAULT_LR['mee']:g} mee].")] = None,
    weight_decay: Annotated[float | None, typer.Option(
        help=f"Weight decay (matrices only) [default: {D['weight_decay']:g}].")] = None,
    optimizer: Annotated[Optimizer | None, typer.Option(
        help=f"adamw (decoupled decay) or adam [default: {D['optimizer']}].")] = None,
    frames_per_clip: Annotated[int | None, typer.Option(
        help=f"Frames drawn per clip [default: {D['frames_per_clip']}].")] = None,
    eval_frames: Annotated[int | None, typer.Option(
        help="Frames per clip at the per-epoch evaluation [default: --frames-per-clip].")
    ] = None,
    alpha: Annotated[float | None, typer.Option(
        help="L_align: weight of the pull towards a frozen copy of the start model "
             f"[default: {D['alpha']:g}; 0.1 with --recipe second-round].")] = None,
    momentum: Annotated[float | None, typer.Option(
        help="dual: EMA factor of a momentum model that gives the queue and soft labels "
             f"(0 = none) [default: {D['momentum']:g}].")] = None,
    queue_size: Annotated[int | None, typer.Option(
        help="dual: momentum text/video embeddings kept as extra candidates (needs "
             f"--momentum) [default: {D['queue_size']}].")] = None,
    soft_labels: Annotated[float | None, typer.Option(
        help="dual: weight of the momentum model's softmax in the targets (0 = one-hot) "
             f"[default: {D['soft_labels']:g}].")] = None,
    crop_scale: Annotated[tuple[float, float] | None, typer.Option(
        help="dual: random-resized crops of the frames, area fraction MIN MAX (e.g. 0.5 1.0) "
             "[default: no crop].")] = None,
    temperature: Annotated[float | None, typer.Option(
        help="Fixed InfoNCE temperature [default: learnable, starts at 0.07].")] = None,
    warmup: Annotated[float | None, typer.Option(
        help=f"Warmup, as a fraction of all steps [default: {D['warmup']:g}].")] = None,
    grad_clip: Annotated[float, typer.Option(help="Max gradient norm (0 = off).")] = D["grad_clip"],
    seed: Annotated[int, typer.Option()] = D["seed"],
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the checkpoint in --out from its last finished epoch, "
                        "exactly as an uninterrupted run would.")] = False,
    eval_fraction: Annotated[float, typer.Option(
        help="Share of videos held out for per-epoch retrieval metrics.")] = D["eval_fraction"],
    frames: Annotated[Literal["decode", "pixels"], typer.Option(
        help="decode: seek in the video for every draw; pixels: decode each video once into a "
             "uint8 cache (fast epochs, ~147 KB per video second at 224 px).")
    ] = D["frames"],
    cache_dir: Annotated[Path | None, typer.Option(
        help="Cache folder [default: SOURCE/cache for a run directory, else OUT/cache].")] = None,
    device: DeviceOpt = None,
    num_workers: Annotated[int, typer.Option(help="Data-loading processes.")] = D["num_workers"],
    amp: Annotated[bool, typer.Option(help="Mixed precision (CUDA only).")] = D["amp"],
    mee_dim: Annotated[int, typer.Option(help="Joint space size of the mee model.")] = D["mee_dim"],
    margin: Annotated[float, typer.Option(help="Ranking margin of the mee model.")] = D["margin"],
    clips_per_video: Annotated[int, typer.Option(
        help="mee: clips of one video placed together in a batch (hard negatives); 1: no "
             "intra-video negatives (a batch holds clips of different videos).")
    ] = D["clips_per_video"],
    train_params: Annotated[str | None, typer.Option(
        help="dual: train only parameters whose name matches this regex (e.g. 'residual' for "
             "the default encoder's head) [default: all].")] = None,
    shuffle_buffer: Annotated[int, typer.Option(
        help="WebDataset shards: samples shuffled in memory per loading process.")
    ] = D["shuffle_buffer"],
    drop_duplicates: Annotated[bool, typer.Option(
        "--drop-duplicates", help="Run directory: leave out near-duplicate videos and repeated "
                                  "clips found by `howtocap duplicates SOURCE`.")] = False,
    where: WhereOpt = None,
) -> None:
    """Train a retrieval model on caption–clip pairs; writes OUT/ckpt/last.pt, train_log.csv/png."""
    options = dict(locals())  # the flags are named as train()'s arguments
    from howtocap.train.api import train

    res = train(options.pop("source"), out_dir=options.pop("out"), **options)

    from howtocap.train.distributed import dist_info

    if dist_info()[0] != 0:
        return  # under torchrun only the first process reports
    m = res.final_metrics
    metrics = "  ".join(f"{k} {m[k]:.1f}" for k in ("R@1", "R@5", "R@10") if k in m)
    err.print(f"[green]trained[/green] {res.n_train_clips} clips ({res.n_pairs} pairs, "
              f"{len(res.skipped_videos)} video(s) skipped); held-out {res.n_eval_clips} clips"
              f"{': ' + metrics if metrics else ''}\ncheckpoint: {res.checkpoint}",
              highlight=False)
