"""The ``train`` entry point: fine-tune a dual encoder, or train the HowTo100M baseline, on
caption–clip pairs (a run directory, its ``aligned/`` table, a CSV, or WebDataset shards,
streamed), whole videos held out for per-epoch evaluation. ``<out>/ckpt/last.pt`` loads through
``howtocap.encoders.create(<path>)`` in ``align``, ``eval`` and ``search``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from howtocap.encoders.base import Encoder
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io.export import filter_rows
from howtocap.io.pairs import build_clips, read_pairs, run_root
from howtocap.progress import console
from howtocap.train.config import RECIPES, TrainConfig, make_config
from howtocap.train.data import require_pairs, shard_source, split_by_video
from howtocap.train.distributed import dist_info
from howtocap.train.loop import run

__all__ = ["TrainResult", "train", "TrainConfig", "RECIPES"]


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


def train(pairs_source: str | Path, *, out_dir: str | Path, encoder: str | Encoder | None = None,
          cache_dir: str | Path | None = None, resume: bool = False, device: str | None = None,
          progress: bool = True, drop_duplicates: bool = False, where: str | None = None,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
          **settings: Any) -> TrainResult:
    """Train on caption–clip pairs; write checkpoints, ``train_log.csv`` and a plot to ``out_dir``.
    ``settings`` are ``TrainConfig``'s fields (``None``: the recipe's value, else the default);
    ``resume`` restarts the interrupted epoch; ``drop_duplicates`` and ``where`` filter a run
    directory's pairs (``howtocap duplicates``, ``io.where``)."""
    rank, world, _ = dist_info()
    cfg = make_config(log=rank == 0, out_dir=str(out_dir),
                      encoder=encoder if isinstance(encoder, str) else None, **settings)
    frames, eval_fraction, seed = cfg.frames, cfg.eval_fraction, cfg.seed
    from howtocap.io.webdataset import is_shard_dir

    shards = None
    flag = "--drop-duplicates" if drop_duplicates else "--where" if where is not None else ""
    if flag and (is_shard_dir(pairs_source) or not (
            Path(pairs_source).is_dir() or Path(pairs_source).suffix == ".parquet")):
        raise HowtocapError(f"{pairs_source}: {flag} needs a run directory (or its aligned/ "
                            f"table); for shards, export them with {flag}")
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
        if flag:
            pairs = filter_rows(pairs, RunDir(run_root(pairs_source), create=False),
                                drop_duplicates=drop_duplicates, where=where)
        ps = build_clips(pairs, log=console if rank == 0 else None)
        require_pairs(ps, pairs_source)
        train_clips, eval_clips = split_by_video(ps.clips, eval_fraction, seed)
        n_pairs, skipped, skipped_pairs = ps.n_pairs, ps.skipped, ps.skipped_pairs
        if cache_dir is None and Path(pairs_source).is_dir():
            cache_dir = run_root(pairs_source) / "cache"  # the run's frame embeddings (align)
    if isinstance(encoder, Encoder):
        enc, spec = encoder, str(getattr(encoder, "spec", encoder.name))
    else:
        from howtocap.encoders import create

        enc, spec = create(cfg.encoder, device=device), cfg.encoder
    # what only the source and the encoder tell (set by this module, so not validated again)
    cfg = cfg.model_copy(update={
        "encoder": spec, "frames": frames, "cache_dir": str(cache_dir) if cache_dir else None,
        "webdataset": str(shards.shards.root) if shards is not None else None})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    ckpt, history, epochs_run, resumed_from, model = run(
        cfg, enc, train_clips, eval_clips, resume=resume, device=device, progress=progress,
        on_epoch_end=on_epoch_end, shards=shards)
    n_train = shards.n_train if shards is not None else len(train_clips)
    n_eval = shards.n_eval if shards is not None else len(eval_clips)
    return TrainResult(Path(out_dir), ckpt, history, n_pairs, n_train, n_eval, skipped,
                       skipped_pairs, epochs_run, resumed_from, model)
