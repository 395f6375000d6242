"""The embedded default encoder: speed on CPU and zero-shot frame -> caption retrieval.

Run: ``.venv/bin/python benchmarks/quality/bench_encoders.py [--videos N]``. Writes
``benchmarks/results/encoders.json`` and ``encoders.md``.

Fixtures: ``howtocap.samples.make_fixture_set`` narrated videos (one scikit-image photograph
per step, slow zoom/pan, a known step caption). Every decoded second is a query; its true
caption is the caption of the step on screen.

* global: rank all distinct step captions of the fixture set (12 by default);
* within video: rank only that video's 4-5 step captions (what alignment faces).

A random ranking is the baseline (its expected R@k = k / #captions). The ablation recomputes
the three recalls for the choices the default makes (class-name prompt, softmax temperature, top-k,
pixel normalisation) from one pass of the CNN, so the default is picked by measurement.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import torch
from _harness import machine, write_results

from howtocap.encoders import create
from howtocap.encoders.embedded import (
    DEFAULT_CENTER,
    DEFAULT_PROMPT,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_K,
    PROMPTS,
    EmbeddedEncoder,
    _prompt_text,
    class_names,
)
from howtocap.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, frames_to_tensor
from howtocap.io.video import iter_frames
from howtocap.metrics import retrieval_metrics
from howtocap.samples import make_fixture_set


def within_video(sims: np.ndarray, truth: np.ndarray, video: np.ndarray,
                 cands: dict[int, list[int]], k: int) -> float:
    hits = []
    for i, (t, v) in enumerate(zip(truth, video, strict=True)):
        cols = cands[int(v)]
        order = np.argsort(-sims[i, cols])[:k]
        hits.append(t in [cols[j] for j in order])
    return float(np.mean(hits))


def load_fixtures(n_videos: int, work: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       list[str], dict[int, list[int]]]:
    vids = make_fixture_set(work, n_videos=n_videos, audio=False, subtitles=None)
    captions: list[str] = sorted({s.caption for v in vids for s in v.steps})
    frames, truth, video = [], [], []
    cands: dict[int, list[int]] = {}
    for vi, v in enumerate(vids):
        cands[vi] = sorted({captions.index(s.caption) for s in v.steps})
        for t, img in iter_frames(v.video_path, fps=1.0, size=224):
            step = next(s for s in v.steps if s.start <= t < s.end)
            frames.append(img)
            truth.append(captions.index(step.caption))
            video.append(vi)
    return np.stack(frames), np.array(truth), np.array(video), captions, cands


def scores(img: np.ndarray, txt: np.ndarray, truth: np.ndarray, video: np.ndarray,
           cands: dict[int, list[int]]) -> dict[str, float]:
    sims = img @ txt.T
    m = retrieval_metrics(sims, truth)  # the project's own metric code (percent)
    out = {"R@1": m["R@1"] / 100, "R@5": m["R@5"] / 100,
           "video_R@1": within_video(sims, truth, video, cands, 1)}
    out["mean"] = float(np.mean(list(out.values())))
    return out


@torch.no_grad()
def ablation(enc: EmbeddedEncoder, frames: np.ndarray, captions: list[str], truth: np.ndarray,
             video: np.ndarray, cands: dict[int, list[int]]) -> list[dict[str, object]]:
    names = class_names()
    norms = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD), "half": ((0.5,) * 3, (0.5,) * 3)}
    logits = {}
    for key, (mean, std) in norms.items():
        px = frames_to_tensor(frames, size=224, mean=mean, std=std, device=enc.device)
        logits[key] = torch.cat([enc.cnn_outputs(px[i:i + 32])[1]
                                 for i in range(0, len(px), 32)])
    prompt_emb = {p: torch.from_numpy(enc.sentences([_prompt_text(n, p) for n in names]))
                  for p in PROMPTS}
    raw_txt = torch.from_numpy(enc.sentences(captions))
    rows = []
    for norm, lg in logits.items():
        for prompt, E in prompt_emb.items():
            for center in (False, True):
                mu = E.mean(0) if center else torch.zeros(E.shape[1])
                txt = torch.nn.functional.normalize(raw_txt - mu, dim=-1).numpy()
                for temp in (0.5, 1.0, 2.0):
                    for k in (1, 5, 20, 1000):
                        z = lg / temp
                        if k < 1000:
                            kth = z.topk(k, dim=-1).values[:, -1:]
                            z = z.masked_fill(z < kth, float("-inf"))
                        img = torch.nn.functional.normalize(z.softmax(-1) @ (E - mu), dim=-1)
                        rows.append({"norm": norm, "prompt": prompt, "center": center,
                                     "temperature": temp, "top_k": k,
                                     **scores(img.numpy(), txt, truth, video, cands)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-enc-") as tmp:
        frames, truth, video, captions, cands = load_fixtures(args.videos, Path(tmp))
    t0 = time.perf_counter()
    enc = create("default")
    load_s = time.perf_counter() - t0
    assert isinstance(enc, EmbeddedEncoder)
    enc.encode_images(frames[:4])  # warm-up
    t0 = time.perf_counter()
    img = enc.encode_images(frames, batch_size=32)
    img_s = time.perf_counter() - t0
    texts = [c for c in captions for _ in range(20)]
    t0 = time.perf_counter()
    enc.encode_texts(texts)
    txt_s = time.perf_counter() - t0
    txt = enc.encode_texts(captions)
    default = scores(img, txt, truth, video, cands)
    n_c = len(captions)
    mean_cands = float(np.mean([len(cands[int(v)]) for v in video]))
    random = {"R@1": 1 / n_c, "R@5": min(1.0, 5 / n_c), "video_R@1": float(
        np.mean([1 / len(cands[int(v)]) for v in video]))}
    rows = ablation(enc, frames, captions, truth, video, cands)
    rows.sort(key=lambda r: -r["mean"])  # type: ignore[operator]
    result = {
        "encoder": enc.name,
        "config": {"prompt": DEFAULT_PROMPT, "temperature": DEFAULT_TEMPERATURE,
                   "top_k": DEFAULT_TOP_K, "center": DEFAULT_CENTER, "norm": "imagenet"},
        "fixtures": {"videos": args.videos, "frames": int(len(frames)), "captions": n_c,
                     "mean_captions_per_video": mean_cands},
        "speed": {"images_per_s": len(frames) / img_s, "texts_per_s": len(texts) / txt_s,
                  "load_s": load_s, "threads": torch.get_num_threads()},
        "default": default, "random": random,
        "ablation": rows,
        "ablation_default_row": next(r for r in rows if r["norm"] == "imagenet"
                                     and r["prompt"] == DEFAULT_PROMPT
                                     and r["center"] == DEFAULT_CENTER
                                     and r["temperature"] == DEFAULT_TEMPERATURE
                                     and r["top_k"] == DEFAULT_TOP_K),
        "machine": machine(f"torch {torch.__version__}"),
    }
    md = ["# Embedded default encoder (`default-v1`)", "",
          f"{len(frames)} one-per-second frames from {args.videos} narrated fixture videos, "
          f"{n_c} distinct step captions ({mean_cands:.1f} per video on average). CPU, "
          f"{torch.get_num_threads()} threads, shared machine.", "",
          "| | R@1 (all captions) | R@5 (all captions) | R@1 (within video) |",
          "|---|---|---|---|",
          f"| default-v1 | {default['R@1']:.3f} | {default['R@5']:.3f} | "
          f"{default['video_R@1']:.3f} |",
          f"| random ranking | {random['R@1']:.3f} | {random['R@5']:.3f} | "
          f"{random['video_R@1']:.3f} |", "",
          f"Speed: {result['speed']['images_per_s']:.1f} images/s, "
          f"{result['speed']['texts_per_s']:.0f} texts/s (load {load_s:.1f} s).", "",
          "Ablation (best 10 of prompt x centring x temperature x top-k x pixel normalisation, "
          "ranked by the mean of the three recalls; all rows in encoders.json):", "",
          "| norm | prompt | centred | T | top-k | R@1 | R@5 | R@1 within video |",
          "|---|---|---|---|---|---|---|---|"]
    for r in rows[:10]:
        md.append(f"| {r['norm']} | {r['prompt']} | {r['center']} | {r['temperature']} | "
                  f"{r['top_k']} | "
                  f"{r['R@1']:.3f} | {r['R@5']:.3f} | {r['video_R@1']:.3f} |")
    for label, pick in (("uncentred", lambda r: not r["center"]),
                        ('the old "a photo of a {}" default, uncentred',
                         lambda r: r["prompt"] == "photo" and not r["center"]
                         and r["norm"] == "imagenet")):
        best = next(r for r in rows if pick(r))
        md.append(f"\nBest {label}: {best['norm']}/{best['prompt']}/T={best['temperature']}/"
                  f"k={best['top_k']}: R@1 {best['R@1']:.3f}, R@5 {best['R@5']:.3f}, "
                  f"within video {best['video_R@1']:.3f}.")
    write_results("encoders", result, md)


if __name__ == "__main__":
    main()
