"""WebDataset benchmark: training throughput from tar shards vs the Parquet + pixel-cache path.

Both paths train the same tiny dual encoder (a randomly initialised Hugging Face CLIP, 224 px,
4 frames per clip, batch 8, alpha 0.1) on the same clips of the same generated videos: a run
directory whose ``aligned`` table holds the reference captions, read either directly (frames
from the decoded-pixel cache, ``--frames pixels``) or from ``howtocap export --format
webdataset`` shards (JPEG frames streamed through a shuffle buffer). Also measured: the data
path alone (clips/s with no model), the one-off cost of each (building the pixel cache vs
exporting shards) and their size on disk. Other jobs share this CPU, so every figure is the best
of several epochs or repeats, the two paths alternating.

Run: ``.venv/bin/python benchmarks/speed/bench_webdataset.py`` ->
``benchmarks/results/webdataset.{json,md}``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import pandas as pd
import torch
from _harness import best_time, machine, write_json, write_md, write_rows

from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.io.pairs import build_clips, read_pairs
from howtocap.io.webdataset import export_webdataset
from howtocap.samples import make_fixture_set
from howtocap.schemas import conform
from howtocap.train.api import train
from howtocap.train.data import (
    ClipBatches,
    DualItem,
    PixelCache,
    ShardStream,
    batch_loader,
    epoch_draws,
    shard_batches,
    shard_source,
    stream_batches,
)
from howtocap.train.tiny import make_tiny_clip

N_VIDEOS, EPOCHS, REPEATS, BATCH, FRAMES = 16, 3, 2, 8, 4


def make_run(root: Path, videos: list) -> RunDir:
    """A run directory whose kept aligned captions are the videos' reference step captions."""
    rd = RunDir(root)
    rd.record_videos([VideoItem(v.video_id, v.video_path) for v in videos])
    rows = [{"video_id": v.video_id, "start": s.start, "end": s.end, "text": t,
             "orig_start": s.start, "orig_end": s.end, "offset": 0.0, "score": 0.5,
             "kept": True, "encoders": "reference", "source": "reference", "block": 0,
             "model": "reference"} for v in videos for s in v.steps
            for t in (s.caption, s.narration)]
    write_rows(rd, "aligned", conform(pd.DataFrame(rows), "aligned"))
    return rd


def du(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 2)


def data_only(run: Path, shards: Path, cache: Path) -> dict:
    """Clips/s of one epoch's batches with no model: pixel-cache memmaps vs streamed shards."""
    ps = build_clips(read_pairs(run), log=None)
    px = PixelCache(cache / "pixels", 224)

    def pixels() -> int:
        plan = shard_batches(epoch_draws(ps.clips, 0, 0, FRAMES), BATCH)
        return sum(len(b[2]) for b in batch_loader(ClipBatches(ps.clips, plan, px), 0))

    src = shard_source(shards, 0.0, 0)

    def streamed(workers: int) -> int:
        urls, n = src.plan(0, 0, 0, 1, BATCH)
        ds = ShardStream(urls, src.held, DualItem(src.shards.meta["frame_keys"], FRAMES, 0, 0),
                         seed=0, epoch=0, rank=0, buffer=1000, chunk=BATCH)
        return sum(len(b) for b in stream_batches(ds, n, BATCH, workers))

    out = {}
    for name, fn in (("pixel_cache", pixels), ("webdataset", lambda: streamed(0)),
                     ("webdataset_2_workers", lambda: streamed(2))):
        secs, n = best_time(fn, repeats=5)
        out[name] = {"clips_per_s": round(n / secs, 1), "clips": n}
    return out


def main() -> None:
    torch.set_num_threads(1)  # other jobs share this 2-core CPU: 2 threads oversubscribe it
    out: dict = {"machine": machine(f"torch {torch.__version__}", torch_threads=True)}
    with tempfile.TemporaryDirectory(prefix="bench-wds-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        videos = make_fixture_set(tmp / "videos", n_videos=N_VIDEOS, seed=1, size=224, fps=10,
                                  audio=False, subtitles=None, seconds_per_step=4.0)
        print(f"fixtures: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        run = make_run(tmp / "run", videos).root
        n_clips = sum(len(v.steps) for v in videos)
        spec = make_tiny_clip(tmp / "tiny-clip", width=64, layers=2, dim=64, image_size=224,
                              patch_size=32)
        setup: dict = {"videos": N_VIDEOS, "clips": n_clips, "pairs": 2 * n_clips,
                       "video_seconds": round(sum(v.duration for v in videos), 1)}

        # one-off costs: building the pixel cache, exporting the shards
        cache = tmp / "cache"
        ps = build_clips(read_pairs(run), log=None)
        px = PixelCache(cache / "pixels", 224)
        t0 = time.perf_counter()
        for c in {c.video_id: c for c in ps.clips}.values():
            px.build(c)
        setup["pixel_cache_build_s"] = round(time.perf_counter() - t0, 2)
        setup["pixel_cache_mb"] = du(cache / "pixels")
        shards = tmp / "shards"
        secs, res = best_time(lambda: export_webdataset(run, shards, frames_per_clip=FRAMES,
                                                        image_size=224, shard_size=16,
                                                        progress=False), repeats=2)
        setup["export_s"] = round(secs, 2)
        setup["shards"] = len(res.shards)
        setup["shards_mb"] = du(shards)
        out["setup"] = setup
        print(json.dumps(setup), file=sys.stderr)

        out["data_only"] = data_only(run, shards, cache)
        print(json.dumps(out["data_only"]), file=sys.stderr)

        # training throughput, the two paths alternating
        kw = dict(encoder=spec, epochs=EPOCHS, batch_size=BATCH, lr=1e-4, eval_fraction=0,
                  frames_per_clip=FRAMES, progress=False)
        best: dict[str, list[float]] = {"parquet_pixel_cache": [], "webdataset": []}
        t0 = time.perf_counter()
        for rep in range(REPEATS):
            r = train(run, out_dir=tmp / f"px-{rep}", frames="pixels", cache_dir=cache, **kw)
            best["parquet_pixel_cache"] += [h["pairs_per_s"] for h in r.history if h["epoch"]]
            r = train(shards, out_dir=tmp / f"wds-{rep}", **kw)
            best["webdataset"] += [h["pairs_per_s"] for h in r.history if h["epoch"]]
        thr: dict = {"model": "tiny random HF CLIP (ViT 2x64, text 2x64, 224 px), "
                              f"{FRAMES} frames/clip, batch {BATCH}, alpha 0.1, 1 process, "
                              "no loader workers",
                     "seconds": round(time.perf_counter() - t0, 1)}
        for k, vals in best.items():
            thr[k] = {"pairs_per_s": round(max(vals), 2), "epochs_measured": len(vals)}
        thr["ratio_webdataset_vs_pixel_cache"] = round(
            thr["webdataset"]["pairs_per_s"] / thr["parquet_pixel_cache"]["pairs_per_s"], 2)
        out["training"] = thr
        print(json.dumps(thr), file=sys.stderr)

    write_json("webdataset", out)
    s, d = out["setup"], out["data_only"]
    md = ["# WebDataset benchmark", "", f"Machine: {out['machine']}", "",
          f"{s['videos']} generated videos ({s['video_seconds']} s at 224 px), {s['clips']} "
          f"clips with 2 captions each ({s['pairs']} pairs); the same clips and model on both "
          "paths.", "",
          "## Training throughput", "",
          "| data path | training pairs/s |", "|---|---|",
          f"| the run's aligned table + decoded-pixel cache (`--frames pixels`) | "
          f"{thr['parquet_pixel_cache']['pairs_per_s']} |",
          f"| WebDataset shards (JPEG frames, streamed) | {thr['webdataset']['pairs_per_s']} |",
          "",
          f"Shards vs pixel cache: **{thr['ratio_webdataset_vs_pixel_cache']}x** training "
          f"pairs/s ({thr['model']}; best of {thr['webdataset']['epochs_measured']} epochs "
          "each, the paths alternating). A training step counts one pair per clip, as both "
          "paths draw one caption per clip per epoch.", "",
          "## Data path alone (no model)", "",
          "| data path | clips/s |", "|---|---|",
          f"| pixel cache (uint8 memmap) | {d['pixel_cache']['clips_per_s']} |",
          f"| WebDataset shards, in process | {d['webdataset']['clips_per_s']} |",
          f"| WebDataset shards, 2 loader workers | "
          f"{d['webdataset_2_workers']['clips_per_s']} |", "",
          "## One-off cost and size", "",
          "| | seconds | MB on disk |", "|---|---|---|",
          f"| build the pixel cache (every second of every video) | "
          f"{s['pixel_cache_build_s']} | {s['pixel_cache_mb']} |",
          f"| export shards ({FRAMES} JPEG frames per clip, {s['shards']} shards) | "
          f"{s['export_s']} | {s['shards_mb']} |", "",
          "The pixel cache stores every second of every video uncompressed (147 KB per second "
          "at 224 px) and is read by random access; shards store only the clips' frames as "
          "JPEG and are read sequentially, which is what lets training scale past one disk "
          "(shards stream from any file system or object store, are split between DDP ranks "
          "and loader workers, and need no per-video seeks)."]
    write_md("webdataset", md)


if __name__ == "__main__":
    main()
