"""``howtocap eval``: zero-shot (or trained-checkpoint) text-video retrieval on a benchmark
(ranks and ties: :mod:`howtocap.metrics`). Clips whose video is missing or unreadable are
dropped with their captions and listed in the output, so the numbers say exactly which subset
they were measured on."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from howtocap.atomic import atomic_write_text
from howtocap.encoders import create
from howtocap.encoders.base import Encoder
from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError
from howtocap.evaluate import N_FRAMES, TIES
from howtocap.evaluate.benchmarks import EvalSample, read_benchmark
from howtocap.evaluate.embed import video_embeddings
from howtocap.metrics import RECALL_AT, multi_caption_metrics


def _group(samples: list[EvalSample]) -> tuple[list[EvalSample], np.ndarray]:
    """Unique clips (first sample of each) and, per sample, the index of its clip."""
    first: dict[tuple, EvalSample] = {}
    for s in samples:
        first.setdefault(s.clip_key, s)
    row = {key: i for i, key in enumerate(first)}
    return list(first.values()), np.array([row[s.clip_key] for s in samples], np.int64)


def print_table(result: dict[str, Any], out: Console | None = None) -> None:
    """The t2v/v2t metrics as a rich table."""
    out = out or Console()
    title = (f"{result['benchmark']}: {result['n_captions']} captions, {result['n_clips']} clips"
             f" ({result['encoder']}, {result['n_frames']} frames, ties {result['ties']})")
    table = Table(title=title)
    table.add_column("direction")
    for c in [*(f"R@{k}" for k in RECALL_AT), "MedR", "MeanR", "n"]:
        table.add_column(c, justify="right")
    for direction in ("t2v", "v2t"):
        m = result[direction]
        table.add_row(direction, *(f"{m[f'R@{k}']:.1f}" for k in RECALL_AT), f"{m['MedR']:g}",
                      f"{m['MeanR']:.1f}", str(m["n"]))
    out.print(table)
    sk = result["skipped"]
    if sk["clips"]:
        out.print(f"[yellow]skipped {sk['clips']} clip(s) of {sk['videos']} video(s) that could "
                  f"not be read[/yellow] (listed in the JSON output)", highlight=False)


def evaluate(kind: str, annotation_path: Path | str, video_root: Path | str | None,
             encoder_name: str | Encoder = ENCODER, *, n_frames: int = N_FRAMES,
             out: Path | str | None = None, device: str | None = None,
             limit: int | None = None, ties: str = TIES,
             cache_dir: Path | str | None = None, progress: bool = True,
             show: bool = True, **reader_kw: Any) -> dict[str, Any]:
    """Retrieval on benchmark ``kind``; returns (and may write) the result. ``encoder_name``:
    a name :func:`howtocap.encoders.create` accepts, or an ``Encoder``; ``reader_kw`` go to the
    reader (``subset=`` for YouCook2, ``captions_path=`` for MSVD)."""
    t0 = time.perf_counter()
    if video_root is None and kind != "csv":
        raise HowtocapError(f"{kind} needs the folder holding its videos (--videos DIR)")
    samples = read_benchmark(kind, annotation_path, video_root, **reader_kw)
    if limit is not None:  # the captions of the first ``limit`` clips: a quick look
        if limit < 1:
            raise HowtocapError("limit must be a positive number of clips")
        keep = {c.clip_key for c in _group(samples)[0][:limit]}
        samples = [s for s in samples if s.clip_key in keep]
    if not any(s.video_path is not None for s in samples):
        raise HowtocapError(f"none of the videos listed in {annotation_path} were found under "
                            f"{video_root} (looked for <video id>.<ext> at any depth)")
    encoder = encoder_name if isinstance(encoder_name, Encoder) \
        else create(encoder_name, device=device)
    clips, _ = _group(samples)
    emb = video_embeddings(clips, encoder, n_frames=n_frames,
                           cache_dir=Path(cache_dir) if cache_dir else None, progress=progress)
    ok_keys = {c.clip_key for c, ok in zip(clips, emb.ok, strict=True) if ok}
    if not ok_keys:
        first = next(iter(emb.errors.items()), ("?", "?"))
        raise HowtocapError(f"no clip could be read (e.g. {first[0]}: {first[1]})")
    kept = [s for s in samples if s.clip_key in ok_keys]
    kept_clips, caption_item = _group(kept)  # the readable clips, in the same order
    clip_emb = emb.emb[emb.ok]
    dev = torch.device(encoder.device) if encoder.device is not None else torch.device("cpu")
    t = torch.as_tensor(np.asarray(encoder.encode_texts([s.caption for s in kept]), np.float32),
                        device=dev)  # cosine similarity: both sides are L2-normalised
    v = torch.as_tensor(np.asarray(clip_emb, np.float32), device=dev)
    metrics = multi_caption_metrics(t @ v.T, caption_item, ties=ties)

    skipped_clips = [c for c, ok in zip(clips, emb.ok, strict=True) if not ok]
    result: dict[str, Any] = {
        "benchmark": kind, "annotations": str(annotation_path),
        "videos": str(video_root) if video_root is not None else None,
        "encoder": getattr(encoder, "name", str(encoder_name)),
        "n_frames": n_frames, "ties": ties, "limit": limit,
        "n_clips": len(kept_clips), "n_captions": len(kept),
        "t2v": metrics["t2v"], "v2t": metrics["v2t"],
        "skipped": {
            "clips": len(skipped_clips), "captions": len(samples) - len(kept),
            "videos": len({c.video_id for c in skipped_clips}),
            "errors": [{"video_id": v, "error": e} for v, e in sorted(emb.errors.items())],
        },
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if out is not None:
        atomic_write_text(Path(out), json.dumps(result, indent=2) + "\n")
    if show:
        print_table(result)
    return result
