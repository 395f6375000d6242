"""The ``train`` entry point: fine-tune a dual encoder, or train the HowTo100M baseline.

``train(source, out_dir=...)`` reads caption–clip pairs (a run directory's kept aligned
captions, an ``aligned.parquet``, or a CSV), drops pairs whose video is missing or unreadable,
holds out whole videos for per-epoch evaluation and runs the loop in ``train.loop``. The result
is ``<out>/ckpt/last.pt``, which ``howtocap.encoders.create(<path>)`` (and so ``align``,
``eval``, ``search``) loads through ``howtocap.encoders.load_encoder``.

``source`` may also be a folder of WebDataset shards (``howtocap export --format webdataset``):
then clips stream from the shards (frames for ``dual``, frame embeddings for ``mee``) and only
the shard index is held in memory.

``recipe`` presets the papers' settings (``RECIPES``); any option given explicitly (not
``None``) overrides the recipe's value, and options neither gives take ``DEFAULTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from howtocap.encoders.base import Encoder
from howtocap.errors import HowtocapError
from howtocap.io.pairs import build_clips, read_pairs
from howtocap.progress import console
from howtocap.train.data import require_pairs, shard_source, split_by_video
from howtocap.train.loop import TrainConfig, dist_info, run

__all__ = ["TrainResult", "train", "TrainConfig", "RECIPES", "resolve_options"]

DEFAULT_LR = {"dual": 1e-5, "mee": 1e-3}

# Settings that a recipe may set; ``None`` in ``train()`` means "not given".
DEFAULTS: dict[str, Any] = {
    "epochs": 5, "batch_size": 32, "lr": None, "weight_decay": 0.05, "frames_per_clip": 4,
    "eval_frames": None, "alpha": 0.0, "warmup": 0.05, "optimizer": "adamw", "momentum": 0.0,
    "queue_size": 0, "soft_labels": 0.0, "crop_scale": None,
}

_HOWTOCAPTION: dict[str, Any] = {
    # HowToCaption A.4 / its dual_encoder_retrieval.yaml: BLIP's ITC fine-tune
    "optimizer": "adamw", "lr": 1e-6, "weight_decay": 0.05, "batch_size": 128,
    "frames_per_clip": 4, "eval_frames": 12, "momentum": 0.995, "queue_size": 2048,
    "soft_labels": 0.6, "crop_scale": (0.5, 1.0), "alpha": 0.0,
}
RECIPES: dict[str, dict[str, Any]] = {
    "howtocaption": _HOWTOCAPTION,
    # the fine-tune of the second filter-&-align round: the same plus L_align (alpha 0.1)
    "second-round": {**_HOWTOCAPTION, "alpha": 0.1},
    # Ventura et al.: Adam, lr 1e-4 with cosine decay, batch 16, 10 frames, 10 epochs; a
    # random one of a clip's captions per epoch (always done here); no L_align, no momentum
    "ventura": {"optimizer": "adam", "lr": 1e-4, "weight_decay": 0.0, "warmup": 0.0,
                "batch_size": 16, "frames_per_clip": 10, "eval_frames": 10, "epochs": 10,
                "alpha": 0.0, "momentum": 0.0, "queue_size": 0, "soft_labels": 0.0,
                "crop_scale": None},
}


def resolve_options(recipe: str | None, given: dict[str, Any]) -> dict[str, Any]:
    """Explicit options (not ``None``) > the recipe's values > ``DEFAULTS``."""
    if recipe is not None and recipe not in RECIPES:
        raise HowtocapError(f"--recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    out = {**DEFAULTS, **(RECIPES[recipe] if recipe else {})}
    out.update({k: v for k, v in given.items() if v is not None})
    return out


@dataclass
class TrainResult:
    out_dir: Path
    checkpoint: Path
    history: list[dict[str, Any]]
    n_pairs: int
    n_train_clips: int
    n_eval_clips: int
    skipped_videos: dict[str, str] = field(default_factory=dict)
    skipped_pairs: int = 0
    epochs_run: int = 0
    resumed_from: int = 0
    model: torch.nn.Module | None = None  # the trained module (DualModel or JointEmbedding)

    @property
    def final_metrics(self) -> dict[str, float]:
        return {k: v for k, v in (self.history[-1] if self.history else {}).items()
                if k.startswith("R@") or k in ("MedR", "MeanR")}


def rank_zero() -> bool:
    return dist_info()[0] == 0


def _check_options(o: dict[str, Any], model: str, recipe: str | None, *, log: bool) -> None:
    """One line per bad value; the BLIP-style parts need the dual encoder (and a queue needs
    the momentum model whose embeddings it holds)."""
    if not 0 <= o["momentum"] < 1:
        raise HowtocapError(f"--momentum must be in [0, 1) (got {o['momentum']}; 0 = off)")
    if o["queue_size"] < 0:
        raise HowtocapError(f"--queue-size must be >= 0 (got {o['queue_size']})")
    if not 0 <= o["soft_labels"] <= 1:
        raise HowtocapError(f"--soft-labels must be in [0, 1] (got {o['soft_labels']})")
    if o["alpha"] < 0:
        raise HowtocapError(f"--alpha must be >= 0 (got {o['alpha']})")
    if o["optimizer"] not in ("adamw", "adam"):
        raise HowtocapError(f"--optimizer must be adamw or adam, not {o['optimizer']!r}")
    if o["eval_frames"] is not None and o["eval_frames"] < 1:
        raise HowtocapError(f"--eval-frames must be at least 1 (got {o['eval_frames']})")
    cs = o["crop_scale"]
    if cs is not None:
        if len(cs) != 2 or not 0 < cs[0] <= cs[1] <= 1:
            raise HowtocapError(f"--crop-scale needs two area fractions 0 < MIN <= MAX <= 1 "
                                f"(got {' '.join(map(str, cs))})")
        if cs[0] == cs[1] == 1:
            o["crop_scale"] = None  # the whole frame: no crop
    if o["queue_size"] > 0 and o["momentum"] == 0:
        raise HowtocapError("--queue-size needs --momentum: the queue holds the momentum "
                            "model's embeddings (e.g. --momentum 0.995)")
    if model == "mee":
        if recipe is not None:
            raise HowtocapError(f"--recipe {recipe} is a dual-encoder recipe; --model mee "
                                "trains with its own max-margin loss")
        if o["momentum"] or o["queue_size"] or o["soft_labels"]:
            raise HowtocapError("--momentum, --queue-size and --soft-labels apply to --model "
                                "dual only")
        if o["crop_scale"] is not None:
            if log:
                console.print("[yellow]warning[/] --crop-scale ignored: mee trains on cached "
                              "frame embeddings, which cannot be cropped", highlight=False)
            o["crop_scale"] = None


def _encoder(spec: str | Encoder, device: str | torch.device | None) -> tuple[Encoder, str]:
    if isinstance(spec, Encoder):
        return spec, str(getattr(spec, "spec", spec.name))
    from howtocap.encoders import create

    return create(spec, device=device), spec


def train(pairs_source: str | Path, *, out_dir: str | Path, model: str = "dual",
          encoder: str | Encoder = "default", recipe: str | None = None,
          epochs: int | None = None, batch_size: int | None = None,
          lr: float | None = None, weight_decay: float | None = None,
          frames_per_clip: int | None = None, eval_frames: int | None = None,
          alpha: float | None = None, temperature: float | None = None,
          warmup: float | None = None, optimizer: str | None = None,
          momentum: float | None = None, queue_size: int | None = None,
          soft_labels: float | None = None, crop_scale: tuple[float, float] | None = None,
          grad_clip: float = 20.0, seed: int = 0, resume: bool = False,
          eval_fraction: float = 0.1, frames: str = "decode", cache_dir: str | Path | None = None,
          device: str | None = None, num_workers: int = 0, amp: bool = True,
          mee_dim: int = 256, margin: float = 0.1, clips_per_video: int = 2,
          train_params: str | None = None, shuffle_buffer: int = 1000,
          progress: bool = True,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train on caption–clip pairs; write checkpoints, ``train_log.csv`` and a plot to ``out_dir``.

    ``model="dual"`` fine-tunes ``encoder`` with symmetric InfoNCE (learnable temperature unless
    ``temperature`` is given) plus ``alpha`` times the pull towards a frozen copy of the initial
    model; ``model="mee"`` trains gated embedding units on the encoder's frozen features with the
    max-margin ranking loss. ``frames="pixels"`` decodes every video once into a uint8 cache
    instead of seeking per draw. ``lr`` defaults to 1e-5 (dual) or 1e-3 (mee); ``alpha`` to 0.
    ``recipe`` ("howtocaption", "second-round", "ventura") presets the papers' values; explicit
    options override them. ``momentum`` (EMA factor), ``queue_size``, ``soft_labels`` and
    ``crop_scale`` (area range of random-resized crops) are HowToCaption's BLIP-style parts.
    ``train_params`` (a regex over parameter names) trains only the matching parameters of
    the dual model, e.g. ``"residual"`` for the default encoder's linear head.
    From a shard folder, ``shuffle_buffer`` samples per loader worker are shuffled (``--resume``
    restarts the interrupted epoch: checkpoints are per epoch).
    """
    if model not in DEFAULT_LR:
        raise HowtocapError(f"--model must be dual or mee, not {model!r}")
    o = resolve_options(recipe, {
        "epochs": epochs, "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay,
        "frames_per_clip": frames_per_clip, "eval_frames": eval_frames, "alpha": alpha,
        "warmup": warmup, "optimizer": optimizer, "momentum": momentum,
        "queue_size": queue_size, "soft_labels": soft_labels,
        "crop_scale": tuple(crop_scale) if crop_scale is not None else None})
    _check_options(o, model, recipe, log=rank_zero())
    epochs, batch_size, frames_per_clip = o["epochs"], o["batch_size"], o["frames_per_clip"]
    for name, val in (("epochs", epochs), ("batch-size", batch_size),
                      ("frames-per-clip", frames_per_clip), ("shuffle-buffer", shuffle_buffer)):
        if val < 1:
            raise HowtocapError(f"--{name} must be at least 1 (got {val})")
    if not 0 <= eval_fraction < 1:
        raise HowtocapError(f"--eval-fraction must be in [0, 1) (got {eval_fraction})")
    if temperature is not None and temperature <= 0:
        raise HowtocapError(f"--temperature must be positive (got {temperature})")
    rank, world, _ = dist_info()
    from howtocap.io.webdataset import is_shard_dir

    shards = None
    if is_shard_dir(pairs_source):
        if frames == "pixels":
            raise HowtocapError(f"{pairs_source}: --frames pixels does not apply to WebDataset "
                                "shards (their frames are read from the shards)")
        shards = shard_source(pairs_source, eval_fraction, seed, world)
        if not shards.n_train:
            raise HowtocapError(f"{pairs_source}: no training samples in the shards")
        frames, train_clips, eval_clips = "webdataset", [], []
        n_pairs, skipped = shards.n_pairs, dict(shards.shards.meta.get("skipped_videos", {}))
        skipped_pairs = 0
    else:
        pairs = read_pairs(pairs_source)
        ps = build_clips(pairs, log=console if rank == 0 else None)
        require_pairs(ps, pairs_source)
        train_clips, eval_clips = split_by_video(ps.clips, eval_fraction, seed)
        n_pairs, skipped, skipped_pairs = ps.n_pairs, ps.skipped, ps.skipped_pairs
        if cache_dir is None and Path(pairs_source).is_dir():
            cache_dir = Path(pairs_source) / "cache"  # reuse the run's frame embeddings (align)
    enc, spec = _encoder(encoder, device)
    lr = o["lr"]
    cfg = TrainConfig(out_dir=str(out_dir), model=model, encoder=spec, epochs=epochs,
                      batch_size=batch_size, lr=DEFAULT_LR[model] if lr is None else lr,
                      weight_decay=o["weight_decay"], frames_per_clip=frames_per_clip,
                      alpha=o["alpha"], temperature=temperature, warmup=o["warmup"],
                      grad_clip=grad_clip, seed=seed, optimizer=o["optimizer"],
                      momentum=o["momentum"], queue_size=o["queue_size"],
                      soft_labels=o["soft_labels"], crop_scale=o["crop_scale"],
                      eval_frames=o["eval_frames"], recipe=recipe,
                      eval_fraction=eval_fraction, frames=frames,
                      cache_dir=str(cache_dir) if cache_dir else None, num_workers=num_workers,
                      amp=amp, mee_dim=mee_dim, margin=margin, clips_per_video=clips_per_video,
                      train_params=train_params,
                      webdataset=str(shards.root) if shards is not None else None,
                      shuffle_buffer=shuffle_buffer)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    res = run(cfg, enc, train_clips, eval_clips, resume=resume, device=device,
              progress=progress, on_epoch_end=on_epoch_end, shards=shards)
    n_train = shards.n_train if shards is not None else len(train_clips)
    n_eval = shards.n_eval if shards is not None else len(eval_clips)
    return TrainResult(Path(out_dir), res.checkpoint, res.history, n_pairs, n_train, n_eval,
                       skipped, skipped_pairs, res.epochs_run, res.resumed_from, res.model)
