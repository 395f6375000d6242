"""HowTo100M Table 3 style: the MEE baseline trained with vs without intra-video negatives.

Run: ``.venv/bin/python benchmarks/quality/bench_mee_negatives.py [--quick]`` (after, or without,
``bench_crosstask.py``: both share the CrossTask fixture and its frame cache). Writes
``benchmarks/results/mee_negatives.{json,md}``.

Training: generated videos of 5 steps each (scikit-image photographs in random order), one clip
per step, its caption the narrated sentence; 25 % of the clips get a neighbouring step's
sentence instead (narration is only weakly aligned in HowTo100M too). The MEE (gated embedding
units on the frozen default encoder's features, max-margin ranking loss) is trained

* **with** intra-video negatives: ``--clips-per-video 5`` (all clips of a video in one batch;
  same-video negatives get half of the negative weight, as in the paper), and
* **without**: ``--clips-per-video 1`` (a batch never holds two clips of one video, so every
  negative comes from another video and all weigh the same),

same data, epochs, batch size and seeds. Evaluation on *separate* generated videos (the
CrossTask fixture of ``bench_crosstask.py``): CrossTask step-localisation recall (the paper's
"C" column; DP and independent argmax) and within-video step retrieval (for each annotated
step, the rank of its segment among the segments of the same video, R@1 and mean rank), which
is exactly what intra-video negatives train for. The frozen encoder without MEE is the
reference measured in the same run.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import torch
import torch.nn.functional as F
from _harness import WORK, machine, md_table, write_json, write_md

from howtocap.encoders import create  # noqa: E402
from howtocap.encoders.cache import frame_embeddings  # noqa: E402
from howtocap.evaluate.benchmarks import index_videos  # noqa: E402
from howtocap.evaluate.crosstask import (  # noqa: E402
    read_release,
    recall_by_inference,
    score_videos,
)
from howtocap.evaluate.crosstask_samples import write_crosstask_release  # noqa: E402
from howtocap.samples import DEFAULT_STEPS, make_narrated_video  # noqa: E402
from howtocap.train.api import train  # noqa: E402

CT_WORK = WORK / "crosstask"
WORK = WORK / "mee_negatives"


def make_training_set(n_videos: int, seed: int) -> Path:
    """Videos of 5 random steps and a CSV of (clip, narrated sentence) pairs, 25 % shifted."""
    rng = random.Random(seed)
    vdir = WORK / "train_videos"
    rows = []
    for v in range(n_videos):
        steps = rng.sample(DEFAULT_STEPS, 5)
        vid = f"train_{v:03d}"
        sample = make_narrated_video(vdir, vid, steps, seconds_per_step=2.0, fps=2, size=160,
                                     audio=False, subtitles=None, seed=seed)
        for i, st in enumerate(sample.steps):
            j = i
            if rng.random() < 0.25:
                j = min(max(i + rng.choice([-1, 1]), 0), len(steps) - 1)
            rows.append({"video_id": vid, "video_path": str(sample.video_path),
                         "caption": steps[j][1], "start": st.start, "end": st.end})
    path = WORK / "pairs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


class _Projected:
    """Text side of a trained MEE (or the frozen encoder alone when ``joint`` is None)."""

    def __init__(self, base: object, joint: torch.nn.Module | None) -> None:
        self.base, self.joint = base, joint
        self.dim = joint.dim if joint is not None else base.dim  # type: ignore[attr-defined]

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        t = torch.from_numpy(self.base.encode_texts(texts)).float()  # type: ignore[attr-defined]
        if self.joint is not None:
            with torch.no_grad():
                t = self.joint.text_unit(F.normalize(t, dim=-1).to(_device(self.joint))).cpu()
        return t.numpy()

    def project_frames(self, x: np.ndarray) -> np.ndarray:
        if self.joint is None:
            return x
        with torch.no_grad():
            v = torch.from_numpy(np.asarray(x, np.float32)).to(_device(self.joint))
            return self.joint.video_unit(F.normalize(v, dim=-1)).cpu().numpy()


def _device(m: torch.nn.Module) -> torch.device:
    return next(m.parameters()).device


def evaluate(proj: _Projected, base: object, release_dir: Path, videos: Path,
             feat_dir: Path) -> dict:
    """CrossTask recall (DP, independent) and within-video step retrieval on the fixture."""
    release = read_release(release_dir)
    found = index_videos(videos)
    feat_dir.mkdir(parents=True, exist_ok=True)
    for v in release.videos:
        fe = frame_embeddings(found[v.video_id], base, fps=1.0,  # type: ignore[arg-type]
                              cache_dir=CT_WORK / "cache")
        np.save(feat_dir / f"{v.video_id}.npy", proj.project_frames(np.asarray(fe.emb)))
    kept, skipped = score_videos(release, proj, feat_dir=feat_dir)
    assert not skipped, skipped
    out = {n: r["recall"] for n, r in recall_by_inference(kept).items()}
    ranks = []
    for _, s, g in kept:  # a segment's score: the max over its seconds (the MEE pooling)
        present = [k for k in range(g.shape[1]) if g[:, k].any()]
        seg = np.array([[s[g[:, j], k].max() for j in present] for k in present])
        for i in range(len(present)):
            ranks.append(int((seg[i] >= seg[i, i]).sum()))  # ties count against
    ranks_a = np.array(ranks)
    out["within_video_R@1"] = float(100 * np.mean(ranks_a == 1))
    out["within_video_mean_rank"] = float(ranks_a.mean())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    load0 = os.getloadavg()
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    pairs = make_training_set(10 if args.quick else 30, seed=0)
    fx = write_crosstask_release(CT_WORK, videos_per_task=2 if args.quick else 5, n_tasks=3,
                                 seconds_per_segment=3.0, size=160, fps=4, seed=0)
    gen_s = time.perf_counter() - t0
    base = create("default")
    res: dict = {"encoder": base.name, "quick": args.quick, "epochs": args.epochs,
                 "seeds": args.seeds, "batch_size": 16,
                 "machine": machine(),
                 "loadavg_start": [round(x, 2) for x in load0],
                 "train_videos": 10 if args.quick else 30, "eval_videos": len(fx.videos),
                 "seconds_generate": round(gen_s, 1)}
    t0 = time.perf_counter()
    arms = {"with intra-video negatives": 5, "without intra-video negatives": 1}
    trained = []  # train every run first (the training frames are encoded once, up front)
    train_s = []
    for seed in range(args.seeds):
        for arm, cpv in arms.items():
            out = WORK / f"run_{cpv}_{seed}"
            t1 = time.perf_counter()
            tr = train(pairs, out_dir=out, model="mee", encoder=base, epochs=args.epochs,
                       batch_size=16, clips_per_video=cpv, cache_dir=WORK / "cache",
                       seed=seed, eval_fraction=0.1, progress=False)
            train_s.append(time.perf_counter() - t1)
            assert tr.model is not None
            trained.append((arm, seed, out, tr))
    res["seconds_per_training_run_median"] = round(float(np.median(train_s)), 1)
    res["frozen encoder (no MEE)"] = evaluate(_Projected(base, None), base, fx.release,
                                              fx.videos_dir, WORK / "feat_frozen")
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    for arm, seed, out, tr in trained:
        m = evaluate(_Projected(base, tr.model.eval()), base, fx.release, fx.videos_dir,
                     out / "feat")
        m["train_pairs"] = tr.n_pairs
        runs[arm].append(m)
        print(arm, seed, m, file=sys.stderr)
    keys = ["dp", "independent", "within_video_R@1", "within_video_mean_rank"]
    res["arms"] = {arm: {"clips_per_video": arms[arm], "runs": rs,
                         **{k: float(np.mean([r[k] for r in rs])) for k in keys},
                         **{f"{k}_sd": float(np.std([r[k] for r in rs])) for k in keys}}
                   for arm, rs in runs.items()}
    res["seconds_total"] = round(time.perf_counter() - t0, 1)
    res["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    w, wo = res["arms"]["with intra-video negatives"], res["arms"]["without intra-video "
                                                                   "negatives"]
    res["paper_ordering_appears"] = ordering(w, wo)
    write_json("mee_negatives", res)
    write_md("mee_negatives", report(res))


def ordering(w: dict, wo: dict) -> dict[str, str]:
    """"better" / "worse" only when the gap exceeds the larger seed sd, else "within noise"."""
    out = {}
    for k in ("dp", "independent", "within_video_R@1"):
        gap, sd = w[k] - wo[k], max(w[f"{k}_sd"], wo[f"{k}_sd"])
        out[k] = ("within noise" if abs(gap) <= sd else "better" if gap > 0 else "worse") \
            + f" ({gap:+.1f}, seed sd {sd:.1f})"
    return out


def report(res: dict) -> list[str]:
    fz = res["frozen encoder (no MEE)"]
    lines = [
        "# HowTo100M Table 3 style: MEE with vs without intra-video negatives", "",
        f"MEE on the frozen `{res['encoder']}` features, trained on {res['train_videos']} "
        f"generated videos (5 steps each, narrated sentences as captions, 25 % shifted to a "
        f"neighbouring step), {res['epochs']} epochs, batch {res['batch_size']}, "
        f"{res['seeds']} seeds; evaluated on {res['eval_videos']} separate generated videos "
        "(the CrossTask fixture). Mean ± sd over seeds. Load average "
        f"{res['loadavg_start'][0]} → {res['loadavg_end'][0]} (shared 2-CPU machine).", "",
        *md_table(
            ["model", "CrossTask recall, DP", "independent argmax", "within-video step R@1",
             "within-video mean rank"],
            [["frozen encoder, no MEE", f"{fz['dp']:.1f}", f"{fz['independent']:.1f}",
              f"{fz['within_video_R@1']:.1f}", f"{fz['within_video_mean_rank']:.2f}"],
             *([f"MEE {arm} (`--clips-per-video {a['clips_per_video']}`)",
                f"{a['dp']:.1f} ± {a['dp_sd']:.1f}",
                f"{a['independent']:.1f} ± {a['independent_sd']:.1f}",
                f"{a['within_video_R@1']:.1f} ± {a['within_video_R@1_sd']:.1f}",
                f"{a['within_video_mean_rank']:.2f} ± {a['within_video_mean_rank_sd']:.2f}"]
               for arm, a in res["arms"].items())]),
    ]
    po = res["paper_ordering_appears"]
    lines += [
        "",
        "HowTo100M (Table 3) reports that intra-video negatives help on every benchmark, "
        "CrossTask included. Here, with minus without: CrossTask recall (DP) "
        f"{po['dp']}; independent argmax {po['independent']}; within-video step R@1 "
        f"{po['within_video_R@1']}. So the paper's ordering does "
        f"{'' if all(v.startswith('better') for v in po.values()) else 'not '}clearly appear. "
        "Why the effect would be missing here: these are a few dozen generated videos built "
        "from a dozen photographs, where clips of one video share no scene (every step is a "
        "different photograph), so the hard negatives "
        "the paper relies on — same kitchen, different action — barely exist. The experiment "
        "checks the switch and the protocol, not the paper's effect size.",
    ]
    return lines


if __name__ == "__main__":
    main()
