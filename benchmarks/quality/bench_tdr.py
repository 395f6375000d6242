"""Temporal description retrieval: the paper's Table 2/3 ablation on generated data.

Run: ``.venv/bin/python benchmarks/quality/bench_tdr.py [--quick] [--videos-per-goal N]``. Writes
``benchmarks/results/tdr.json``, ``tdr.md`` and ``tdr.png``.

Data: ``howtocap samples --tdr`` (3 goals, narrated videos whose some steps say only "it",
3 scripts per goal with distractor sentences). Rows, all on the validation split:

* training-free baselines: BM25 over the transcript, and the frozen default encoder's cosine
  between the sentence and the transcript (text), the frame (image) or both (joint);
* trained (Adam 1e-4, one video per batch): text-only, image-only, joint (no context),
  +LSTM, +LSTM+FCL, +LSTM+KOFCL (λ 0.05, μ 0.1), each over several seeds (mean ± sd);
* retrieval as a DVC caption (the paper's claim that retrieved sentences carry the key
  objects): each gold segment captioned with its most retrieved script sentence vs with its
  transcript, scored with ``howtocap.dvc.evaluate`` (gold segments, so only captions differ).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import pandas as pd
from _harness import RESULTS, machine_info, md_table, write_json, write_md

from howtocap.tdr import api
from howtocap.tdr.synth import make_tdr_set

KEYS = ["R@1", "R@3", "R@5", "NDCG@1", "NDCG@3", "NDCG@5", "isolated_R@1"]
TRAINED = [  # (row, modality, context, aux)
    ("text-only", "text", "none", "none"),
    ("image-only", "image", "none", "none"),
    ("joint", "joint", "none", "none"),
    ("+LSTM", "joint", "lstm", "none"),
    ("+LSTM +FCL", "joint", "lstm", "fcl"),
    ("+LSTM +KOFCL", "joint", "lstm", "kofcl"),
]


def dvc_rows(ds, ckpt: Path, work: Path, enc, tmp: Path) -> dict:
    """Caption every gold validation segment by retrieval and by its transcript."""
    info = api.export(ds.annotations, ds.scripts, ds.videos_dir, tmp / "features",
                      checkpoint=ckpt, split="validation", work=work, encoder_model=enc,
                      progress=False)
    retrieved = pd.read_parquet(tmp / "features" / "retrieved.parquet")
    gt = json.loads(Path(ds.annotations).read_text())
    retr, trans = {}, {}
    from howtocap.io.subtitles import read_subtitle_file

    for vid in info["shapes"]:
        rows = retrieved[retrieved["video_id"] == vid]
        subs = read_subtitle_file(ds.videos_dir / f"{vid}.vtt")
        r, t = [], []
        for a in gt["database"][vid]["annotations"]:
            s, e = a["segment"]
            inside = rows[(rows["time"] >= s) & (rows["time"] <= e)]
            if inside.empty:  # no sampled frame inside: the nearest one
                inside = rows.iloc[[int(np.argmin(np.abs(rows["time"] - (s + e) / 2)))]]
            votes = Counter(inside["sentence"])
            best = max(votes, key=lambda x: (votes[x], inside[inside["sentence"] == x]
                                             ["score"].sum()))
            r.append({"timestamp": [s, e], "sentence": best})
            said = subs[(subs["end"] > s) & (subs["start"] < e)]["text"]
            t.append({"timestamp": [s, e], "sentence": " ".join(said) or "nothing"})
        retr[vid], trans[vid] = r, t
    try:
        from howtocap.dvc import evaluate as dvc_evaluate
    except ImportError:
        return {"note": "howtocap.dvc not available: DVC scores not computed",
                "retrieved_example": retr}
    out = {}
    for name, pred in (("retrieved sentence", retr), ("transcript", trans)):
        res = dvc_evaluate({"results": pred}, gt, split="validation")
        out[name] = {k: float(v) for k, v in res["scores"].items()
                     if isinstance(v, (int, float))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--videos-per-goal", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None)
    args = ap.parse_args()
    vpg = args.videos_per_goal or (3 if args.quick else 6)
    epochs = args.epochs or (10 if args.quick else 30)
    seeds = args.seeds or (1 if args.quick else 2)
    load0 = os.getloadavg()
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tdr-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        ds = make_tdr_set(tmp / "data", videos_per_goal=vpg, seed=0)
        gen_s = time.perf_counter() - t0
        enc = api._encoder("default", None)
        common = (ds.annotations, ds.scripts, ds.videos_dir)
        work = tmp / "work"
        rows, timing = [], {}
        t0 = time.perf_counter()
        for b in api.BASELINES:
            res = api.evaluate(*common, baseline=b, work=work, encoder_model=enc,
                               progress=False)
            if b == "bm25":  # first call: decodes, encodes every validation video
                timing["features_seconds_per_video (validation, decode+encode)"] = \
                    (time.perf_counter() - t0) / max(1, res["videos"])
            rows.append({"method": f"{b} (no training)", "kind": "baseline",
                         **{k: res[k] for k in KEYS},
                         "retrieval_s_per_video": res["retrieval_seconds_per_video"]})
        n_val, n_frames, n_iso = res["videos"], res["frames"], res["isolated_frames"]
        ckpt_for_dvc = None
        for name, modality, context, aux in TRAINED:
            runs = []
            for seed in range(seeds):
                cfg = api.TdrConfig(modality=modality, context=context, aux=aux,
                                    epochs=epochs, seed=seed)
                out = tmp / f"ckpt-{name.replace(' ', '').replace('+', '_')}-{seed}"
                tr = api.train(*common, out, cfg, work=work, encoder_model=enc,
                               progress=False)
                res = api.evaluate(*common, checkpoint=out, work=work, encoder_model=enc,
                                   progress=False)
                runs.append({**{k: res[k] for k in KEYS},
                             "train_s_per_video_epoch": tr.seconds_per_video_epoch,
                             "retrieval_s_per_video": res["retrieval_seconds_per_video"]})
                if name == "+LSTM +KOFCL" and seed == 0:
                    ckpt_for_dvc = out
            df = pd.DataFrame(runs)
            rows.append({"method": name, "kind": "trained",
                         **{k: float(df[k].mean()) for k in KEYS},
                         **{f"{k}_sd": float(df[k].std(ddof=0)) for k in KEYS},
                         "train_s_per_video_epoch": float(df["train_s_per_video_epoch"].mean()),
                         "retrieval_s_per_video": float(df["retrieval_s_per_video"].mean())})
            print(name, {k: round(rows[-1][k], 3) for k in KEYS}, flush=True)
        assert ckpt_for_dvc is not None
        dvc = dvc_rows(ds, ckpt_for_dvc, work, enc, tmp)
        n_train = tr.videos
    result = {
        "data": {"videos_per_goal": vpg, "goals": 3, "train_videos": n_train,
                 "validation_videos": n_val, "validation_frames": n_frames,
                 "isolated_frames": n_iso, "every_s": 4.5, "generation_s": gen_s},
        "train": {"epochs": epochs, "seeds": seeds, "lr": 1e-4, "lambda": 0.05, "mu": 0.1},
        "rows": rows, "dvc_retrieval_as_caption": dvc, "timing": timing,
        "machine": machine_info(loadavg_start=load0, loadavg_end=os.getloadavg()),
        "total_s": time.perf_counter() - t_all,
    }
    write_json("tdr", result, indent=1)
    write_md("tdr", report(result))
    plot(result)
    print(f"wrote {RESULTS / 'tdr.md'}", file=sys.stderr)


def report(r: dict) -> list[str]:
    d, t = r["data"], r["train"]
    lines = [
        "# Temporal description retrieval (generated data)",
        "",
        f"`benchmarks/quality/bench_tdr.py`: {d['train_videos']} training / "
        f"{d['validation_videos']} "
        f"validation videos of 3 goals ({d['validation_frames']} validation frames every "
        f"{d['every_s']} s, {d['isolated_frames']} of them isolated), default encoder "
        f"(frozen), {t['epochs']} epochs, Adam {t['lr']}, λ {t['lambda']}, μ {t['mu']}, "
        f"trained rows are the mean (± sd) over {t['seeds']} seeds. Load average "
        f"{r['machine']['loadavg_start'][0]:.1f} → {r['machine']['loadavg_end'][0]:.1f} on "
        f"{r['machine']['cpus']} shared cores: times are upper bounds.",
        "",
    ]

    def cell(row: dict, k: str) -> str:
        sd = row.get(f"{k}_sd")
        return f"{row[k]:.3f}" + (f" ± {sd:.3f}" if sd else "")
    lines += md_table(
        ["method", "R@1", "R@3", "R@5", "NDCG@1", "NDCG@3", "NDCG@5", "isolated R@1",
         "train s/video/epoch", "retrieval s/video"],
        [[row["method"], *(cell(row, k) for k in KEYS),
          f"{row.get('train_s_per_video_epoch', float('nan')):.4f}",
          f"{row['retrieval_s_per_video']:.3f}"] for row in r["rows"]])
    lines += ["", "## Retrieval as a DVC caption (gold segments, validation)", ""]
    dvc = r["dvc_retrieval_as_caption"]
    if "note" in dvc:
        lines.append(dvc["note"])
    else:
        keys = sorted({k for v in dvc.values() for k in v})
        lines += md_table(["caption of each gold segment", *keys],
                          [[name, *(f"{sc.get(k, float('nan')):.3f}" for k in keys)]
                           for name, sc in dvc.items()])
    lines += ["", "## What the numbers say (computed from the table above)", ""]
    lines += findings(r)
    for k, v in r["timing"].items():
        lines.append(f"- {k}: {v:.2f} s")
    lines.append("- retrieval s/video includes encoding the goal's sentences and the metrics "
                 "(ROUGE-L) under the load above; the model itself is milliseconds.")
    return lines


def findings(r: dict) -> list[str]:
    """The paper's orderings, checked on these numbers (ties count as not reproduced)."""
    by = {row["method"]: row for row in r["rows"]}
    out = []

    def check(claim: str, a: str, b: str, key: str) -> None:
        ok = by[a][key] > by[b][key] + 1e-9
        noise = max(by[a].get(f"{key}_sd", 0.0), by[b].get(f"{key}_sd", 0.0))
        verdict = "reproduced" if ok else "NOT reproduced"
        if abs(by[a][key] - by[b][key]) < noise:
            verdict += " (difference within one seed sd: noise)"
        out.append(f"- {claim}: {a} {by[a][key]:.3f} vs {b} {by[b][key]:.3f} ({key}) → "
                   f"{verdict}")

    check("dense retrieval beats BM25", "joint", "bm25 (no training)", "R@1")
    check("joint query beats text-only", "joint", "text-only", "R@1")
    check("joint query beats image-only", "joint", "image-only", "R@1")
    check("I² context (LSTM) helps", "+LSTM", "joint", "NDCG@1")
    check("FCL helps on top of LSTM", "+LSTM +FCL", "+LSTM", "NDCG@1")
    check("KOFCL beats FCL", "+LSTM +KOFCL", "+LSTM +FCL", "NDCG@1")
    check("KOFCL helps isolated frames vs no aux", "+LSTM +KOFCL", "+LSTM", "isolated_R@1")
    dvc = r["dvc_retrieval_as_caption"]
    if "note" not in dvc:
        a, b = dvc["retrieved sentence"]["CIDEr"], dvc["transcript"]["CIDEr"]
        out.append(f"- retrieved sentences as captions vs transcripts (CIDEr): {a:.3f} vs "
                   f"{b:.3f} → {'retrieval better' if a > b else 'transcript better'}; our "
                   "gold captions are short imperatives and the generated narration repeats "
                   "their words, which favours the transcript.")
    out.append("- On generated data the image alone separates steps well (one photograph per "
               "step), so the ceiling is reached early and the context/auxiliary-loss rows "
               "differ by little; these videos cannot reproduce the paper's effect sizes.")
    return out + [""]


def plot(r: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = r["rows"]
    names = [row["method"] for row in rows]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    x = np.arange(len(rows))
    for i, k in enumerate(["R@1", "NDCG@1", "isolated_R@1"]):
        ax.bar(x + (i - 1) * 0.27, [row[k] for row in rows], 0.27, label=k,
               yerr=[row.get(f"{k}_sd", 0) for row in rows], capsize=2)
    ax.set_xticks(x, names, rotation=25, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_title("TDR on generated data (validation): baselines vs trained retrievers")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "tdr.png", dpi=110)


if __name__ == "__main__":
    main()
