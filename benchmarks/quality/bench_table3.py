"""HowToCaption Table 3 style, end to end: which captions make a better retrieval model?

The same generated training videos (steps on scikit-image photographs, with channel chatter)
give four caption sets, and one dual encoder is trained on each with the same recipe:

(a) raw ASR lines: the narration subtitles, with their own timestamps;
(b) LLM captions: ``howtocap caption`` with the embedded LLM (qwen2.5-coder-1.5b);
(c) filtered LLM captions: scored against the frames at their LLM timestamps (no shift) and the
    best ``KEEP`` fraction kept;
(d) filtered and aligned: each caption moved to its best window within ±10 s, then the same
    filter.

Every model is evaluated on SEPARATE generated videos whose photographs were never used in
training (opencv-doc and scikit-learn photographs, see ``howtocap.photos``): text -> clip
R@1/5/10 and MedR, queries are the reference captions of the steps. The zero-shot encoder is
the reference row. Several training seeds per variant give a spread.

Run: ``.venv/bin/python benchmarks/quality/bench_table3.py [--quick]`` ->
``benchmarks/results/table3.{json,md,png}``. The LLM captions are cached under
``benchmarks/work/table3/`` (the slow step: ~20-50 s per block on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import pandas as pd
from _harness import RESULTS, WORK, load_results, machine, md_table, write_json, write_md

WORK = WORK / "table3"
N_TRAIN_VIDEOS = 10
KEEP = 0.5  # fraction of LLM captions the filter keeps in (c) and (d)

# Steps on photographs that no training video uses (opencv-doc + scikit-learn sample images).
UNSEEN_STEPS: list[tuple[str, str, str]] = [
    ("opencv:baboon", "Now take a close look at the baboon's face and its colours.",
     "look at the baboon's face"),
    ("opencv:fruits", "Next, wash all of the fruit and arrange it in a bowl.",
     "arrange fruit in a bowl"),
    ("opencv:butterfly", "Gently hold still and photograph the butterfly on the flower.",
     "photograph the butterfly"),
    ("opencv:squirrel_cls", "Put some nuts out and watch the squirrel come to eat them.",
     "feed the squirrel nuts"),
    ("opencv:building", "Now measure the front of the building before you paint it.",
     "measure the building's front"),
    ("opencv:messi5", "Kick the football across the pitch to your teammate.",
     "kick the football on the pitch"),
    ("opencv:smarties", "Sort the colourful candies into little piles by colour.",
     "sort the candies by colour"),
    ("opencv:orange", "Peel the orange and split it into segments.",
     "peel the orange"),
    ("opencv:starry_night", "Mix the blue paint and copy the swirling night sky.",
     "paint the starry night sky"),
    ("sklearn:china", "Walk up to the old temple and take in the roof.",
     "visit the old temple"),
    ("sklearn:flower", "Cut the flower stem at an angle and put it in water.",
     "cut the flower and put it in water"),
    ("opencv:plant", "Water the potted plant and wipe the dust off the leaves.",
     "water the potted plant"),
]


def prepare(work: Path, n_train: int, quick: bool, caption: bool = True) -> dict:
    """Generate training/eval videos and LLM captions once (cached under ``work``)."""
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.caption.run import caption_run
    from howtocap.photos import packaged_photos
    from howtocap.samples import ground_truth, make_fixture_set

    work.mkdir(parents=True, exist_ok=True)
    info: dict = {}
    tv = work / "videos_train"
    if not (work / "train_truth.csv").exists():
        # the narrator talks 3 s before a step is shown, as instructors often do: raw ASR
        # lines are then only partly aligned with what is on screen
        vids = make_fixture_set(tv, n_videos=n_train, seed=3, chatter=2, audio=False,
                                subtitles="vtt", fps=4, size=160, seconds_per_step=6.0,
                                narration_lead=-3.0)
        ground_truth(vids).to_csv(work / "train_truth.csv", index=False)
    ev = work / "videos_eval"
    if not (work / "eval_truth.csv").exists():
        photos = packaged_photos()
        missing = [s[0] for s in UNSEEN_STEPS if s[0] not in photos]
        if missing:
            raise SystemExit(f"missing photographs {missing}: apt-get install opencv-doc")
        vids = make_fixture_set(ev, n_videos=6, seed=11, steps=UNSEEN_STEPS, photos=photos,
                                audio=False, subtitles=None, fps=4, size=160,
                                seconds_per_step=6.0)
        ground_truth(vids).to_csv(work / "eval_truth.csv", index=False)
    run = work / "run"
    t0 = time.perf_counter()
    if caption:  # else: use the videos captioned so far (an interrupted, cached run)
        caption_run([tv], run, CaptionRunConfig(), progress=not quick)
    info["caption_seconds_this_run"] = round(time.perf_counter() - t0, 1)
    return info


def caption_sets(work: Path, encoder) -> dict[str, pd.DataFrame]:
    """The four training sets as pairs ``video_id, video_path, caption, start, end``."""
    from howtocap.align.config import AlignConfig
    from howtocap.align.filter import align_video, apply_filter
    from howtocap.encoders.cache import frame_embeddings
    from howtocap.engine.rundir import RunDir

    rd = RunDir(work / "run", create=False)
    paths = dict(zip(rd.table("videos")["video_id"], rd.table("videos")["video_path"], strict=True))
    subs = rd.table("subtitles")
    caps = rd.table("captions")
    done = sorted(set(caps["video_id"]))
    subs = subs[subs["video_id"].isin(done)]

    def pairs(df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"video_id": df["video_id"].to_numpy(),
                             "video_path": [paths[v] for v in df["video_id"]],
                             "caption": df["text"].astype(str).to_numpy(),
                             "start": df["start"].to_numpy(float),
                             "end": df["end"].to_numpy(float)})

    out = {"a_asr": pairs(subs), "b_llm": pairs(caps)}
    for name, offset in (("c_filtered", 0.0), ("d_filtered_aligned", 10.0)):
        cfg = AlignConfig(offset_seconds=offset, quantile=KEEP)
        rows = []
        for vid, g in caps.groupby("video_id", sort=True):
            fe = frame_embeddings(Path(paths[vid]), encoder, fps=1.0,
                                  cache_dir=work / "cache")
            text = encoder.encode_texts(g["text"].astype(str).tolist())
            rows.append(align_video(str(vid), g.reset_index(drop=True), [fe], [text],
                                    [encoder.name], cfg))
        al, _ = apply_filter(pd.concat(rows, ignore_index=True), cfg)
        out[name] = pairs(al[al["kept"]])
    return out


def label_quality(pairs: pd.DataFrame, truth: pd.DataFrame) -> dict:
    """How clean a training set is: share of pairs whose clip centre lies in a real step (not
    chatter) and share whose text is about that step's photograph (same step as the centre)."""
    in_step = on_topic = 0
    for r in pairs.itertuples():
        mid = 0.5 * (r.start + r.end)
        hit = truth[(truth["video_id"] == r.video_id) & (truth["start"] <= mid)
                    & (truth["end"] > mid)]
        if len(hit) and hit["kind"].iloc[0] == "step":
            in_step += 1
            narr = str(hit["narration"].iloc[0]).lower()
            cap = str(hit["caption"].iloc[0]).lower()
            words = {w.strip(".,!'") for w in (narr + " " + cap).split() if len(w) > 3}
            on_topic += any(w.strip(".,!'") in words for w in str(r.caption).lower().split()
                            if len(w) > 3)
    n = max(1, len(pairs))
    return {"pairs": int(len(pairs)), "videos": int(pairs["video_id"].nunique()),
            "clip_in_a_step_pct": round(100 * in_step / n, 1),
            "text_matches_shown_step_pct": round(100 * on_topic / n, 1)}


def evaluate(encoder, work: Path) -> dict:
    from howtocap.evaluate.benchmarks import EvalSample
    from howtocap.evaluate.embed import video_embeddings
    from howtocap.metrics import retrieval_metrics

    truth = pd.read_csv(work / "eval_truth.csv")
    samples = [EvalSample(r.video_id, work / "videos_eval" / f"{r.video_id}.mp4", r.caption,
                          float(r.start), float(r.end)) for r in truth.itertuples()]
    clips = video_embeddings(samples, encoder, n_frames=4, progress=False)
    text = encoder.encode_texts([s.caption for s in samples])
    caps = [s.caption for s in samples]
    gt = np.array([[a == b for b in caps] for a in caps])
    m = retrieval_metrics(text @ clips.emb.T, gt)
    return {k: float(m[k]) for k in ("R@1", "R@5", "R@10", "MedR")}


TRAIN = dict(recipe="howtocaption", lr=1e-3, batch_size=16, queue_size=64, epochs=4,
             eval_fraction=0, frames="pixels", train_params="residual", progress=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--cached-captions", action="store_true",
                    help="train on the videos whose LLM captions are already cached")
    ap.add_argument("--render", action="store_true",
                    help="rewrite table3.md/png from table3.json (no videos, no training)")
    args = ap.parse_args()
    if args.render:
        out = load_results("table3")
        write_md("table3", report(out))
        plot(out)
        return
    info = prepare(WORK, N_TRAIN_VIDEOS, args.quick, caption=not args.cached_captions)
    print(json.dumps(info), file=sys.stderr)
    if args.prepare_only:
        return
    import torch

    from howtocap.encoders import create, load_encoder
    from howtocap.train.api import train

    torch.set_num_threads(2)
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    base = create("default", device="cpu")
    sets = caption_sets(WORK, base)
    truth = pd.read_csv(WORK / "train_truth.csv")
    quality = {k: label_quality(v, truth) for k, v in sets.items()}
    print(json.dumps(quality, indent=1), file=sys.stderr)
    seeds = [0] if args.quick else [0, 1, 2]
    results: dict = {"zero_shot": {"seeds": [evaluate(base, WORK)]}}
    tmp = WORK / "train"
    for name, df in sets.items():
        runs = []
        for seed in seeds:
            out = tmp / f"{name}-s{seed}"
            csv_path = tmp / f"{name}.csv"
            tmp.mkdir(parents=True, exist_ok=True)
            df.to_csv(csv_path, index=False)
            t0 = time.perf_counter()
            res = train(csv_path, out_dir=out, encoder="default", seed=seed,
                        cache_dir=WORK / "cache", resume=(out / "ckpt" / "last.pt").exists(),
                        **TRAIN)
            enc = load_encoder(res.checkpoint, device="cpu")
            m = evaluate(enc, WORK)
            runs.append({**m, "train_seconds": round(time.perf_counter() - t0, 1),
                         "seed": seed})
            print(name, seed, m, file=sys.stderr)
        results[name] = {"seeds": runs, "quality": quality[name]}
    for r in results.values():
        runs = r["seeds"]
        r["mean"] = {k: round(float(np.mean([x[k] for x in runs])), 2)
                     for k in ("R@1", "R@5", "R@10", "MedR")}
        r["std"] = {k: round(float(np.std([x[k] for x in runs])), 2)
                    for k in ("R@1", "R@5", "R@10", "MedR")}
    r1 = [results[k]["mean"]["R@1"] for k in ORDER]
    r5 = [results[k]["mean"]["R@5"] for k in ORDER]
    paper_order = all(r1[i] < r1[i + 1] for i in range(3))
    eval_truth = pd.read_csv(WORK / "eval_truth.csv")
    out = {
        "machine": machine(f"torch {torch.__version__}"),
        "load_average_start": [round(x, 2) for x in load0],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "seconds_total": round(time.perf_counter() - t_start, 1),
        "caption_info": info, "train_settings": {k: v for k, v in TRAIN.items()},
        "keep_fraction": KEEP, "seeds": seeds,
        "eval": {"videos": int(eval_truth["video_id"].nunique()),
                 "clips": int(len(eval_truth)),
                 "distinct_captions": int(eval_truth["caption"].nunique()),
                 "photographs": sorted(set(eval_truth["image"]))},
        "train_photographs": sorted(set(truth["image"])),
        "results": results,
        "paper_order_R@1": paper_order,
        "R@1_by_variant": dict(zip(ORDER, r1, strict=True)),
        "R@5_by_variant": dict(zip(ORDER, r5, strict=True)),
    }
    write_json("table3", out, indent=1)
    write_md("table3", report(out))
    plot(out)


LABELS = {"zero_shot": "zero-shot default (no training)", "a_asr": "(a) raw ASR lines",
          "b_llm": "(b) LLM captions", "c_filtered": "(c) filtered LLM captions",
          "d_filtered_aligned": "(d) filtered + aligned"}


ORDER = ["a_asr", "b_llm", "c_filtered", "d_filtered_aligned"]


def verdict(res: dict) -> list[str]:
    """Whether the paper's ordering appears, step by step, read against the seed spread."""
    out = []
    for metric, better in (("R@1", 1), ("R@5", 1), ("R@10", 1), ("MedR", -1)):
        steps, holds = [], True
        for lo, hi in zip(ORDER, ORDER[1:], strict=False):
            diff = res[hi]["mean"][metric] - res[lo]["mean"][metric]
            holds &= better * diff > 0  # lower MedR is better
            spread = res[hi]["std"][metric] + res[lo]["std"][metric]
            sign = "<" if diff > 0 else ("=" if diff == 0 else ">")  # relation of the values
            steps.append(f"{lo[0]} {sign} {hi[0]}" + ("" if abs(diff) > spread else " (within "
                                                      "the seed spread)"))
        vals = ", ".join(f"{k[0]} {res[k]['mean'][metric]}" for k in ORDER)
        out.append(f"- **{metric}** ({vals}): the paper's ordering "
                   f"{'appears' if holds else 'does NOT fully appear'}; {'; '.join(steps)}.")
    zs = res["zero_shot"]["mean"]["R@1"]
    below = [k[0] for k in ORDER if res[k]["mean"]["R@1"] < zs]
    if below:
        out.append(f"- The untrained encoder's R@1 ({zs}) is above the trained models' of "
                   f"({', '.join(below)}): fine-tuning on these few pairs of 10 videos overfits "
                   "their photographs, so the table ranks caption sets by how much they help "
                   "or hurt a model that already works, not by what they would teach at scale.")
    return ["The paper's ordering (a) < (b) < (c) < (d), per metric (a difference is called "
            "within the seed spread when it is smaller than the two stds added):", "", *out]


def report(out: dict) -> list[str]:
    res = out["results"]
    lines = ["# HowToCaption Table 3 style: which captions train a better retrieval model", "",
             f"{out['machine']}; load average {out['load_average_start'][0]} at start, "
             f"{out['load_average_end'][0]} at end (the machine was shared: timings are "
             f"indicative). Total {out['seconds_total']} s, plus the cached LLM captioning.",
             ""]

    def row(k: str, r: dict) -> list[str]:
        q, m, sd = r.get("quality", {}), r["mean"], r["std"]
        return [LABELS[k], str(q.get("pairs", "–")), f"{q.get('clip_in_a_step_pct', '–')}%",
                f"{q.get('text_matches_shown_step_pct', '–')}%",
                *(f"{m[x]} ± {sd[x]}" for x in ("R@1", "R@5", "R@10", "MedR"))]
    lines += md_table(["training captions", "pairs", "clip in a step",
                       "text about the shown step", "R@1", "R@5", "R@10", "MedR"],
                      [row(k, r) for k, r in res.items()])
    ev = out["eval"]
    pairs = [r["quality"]["pairs"] for r in res.values() if "quality" in r]
    n_vid = max(r["quality"]["videos"] for r in res.values() if "quality" in r)
    lines += ["", f"Mean ± std over training seeds {out['seeds']} (text -> clip, "
              f"{ev['distinct_captions']} distinct reference captions over {ev['clips']} clips "
              f"of {ev['videos']} evaluation videos built only from photographs never used in "
              f"training: {', '.join(ev['photographs'])}).", "",
              *verdict(res),
              "", f"Setup: the same {n_vid} generated training videos (of {N_TRAIN_VIDEOS} "
              "generated; only those whose LLM captions are cached are used; steps on "
              "scikit-image photographs, two chatter segments each over a portrait, narration "
              "3 s ahead of the picture) give the four caption sets; (b) is `howtocap "
              "caption` with the embedded LLM; (c) scores each LLM caption against the "
              "frames at its own time and "
              f"keeps the best {int(out['keep_fraction'] * 100)} %; (d) first moves each caption "
              "to its best window within ±10 s, then keeps the same share. Training: the "
              "embedded default encoder's residual head only (`--train-params residual`), "
              f"`--recipe howtocaption` with overrides {json.dumps(out['train_settings'])}.",
              "", "Cost: captioning the training videos with the "
              "embedded qwen2.5-coder-1.5b took "
              f"{out['caption_info'].get('caption_seconds_this_run', 0)} s in this run "
              "(including model load; 0 when every video was already cached under "
              "`benchmarks/work/table3/`, which a re-run resumes); training and evaluation took "
              f"{out['seconds_total']} s for {len(out['seeds']) * 4} models.",
              "", "What this can and cannot show: the default encoder is a small ImageNet-class "
              f"composition, the training sets have {min(pairs)}–{max(pairs)} pairs, and the "
              "evaluation has "
              f"{ev['distinct_captions']} captions, so one rank moves R@1 by several points; "
              "read the spread across seeds before reading an ordering. The caption-quality "
              "columns (share of pairs whose clip centre lies in a real step, and whose text "
              "names that step's content) show what filtering and alignment change in the "
              "data, independent of the small model."]
    return lines


def plot(out: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = out["results"]
    keys = list(res)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    x = np.arange(len(keys))
    for i, k in enumerate(("R@1", "R@5", "R@10")):
        ax.bar(x + (i - 1) * 0.27, [res[n]["mean"][k] for n in keys], 0.27,
               yerr=[res[n]["std"][k] for n in keys], label=k, capsize=3)
    ax.set_xticks(x, [LABELS[n].replace(" (no training)", "") for n in keys], rotation=15,
                  fontsize=8)
    ax.set_ylabel("text -> clip recall (%), unseen photographs")
    ax.set_title("Training captions vs retrieval (HowToCaption Table 3 style)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "table3.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
