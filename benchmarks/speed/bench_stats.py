"""How fast is `howtocap stats`? Verb tagging vs a naive spaCy loop, and a whole run end to end.

Run: .venv/bin/python benchmarks/speed/bench_stats.py [--n-texts 3000] [--n-run 24000]
Writes benchmarks/results/stats.json and benchmarks/results/stats.md.

Baseline (measured in the same run): the full spaCy pipeline (parser + NER on) called once per
text, ``[nlp(t) for t in texts]``. Ours: parser/NER disabled, ``nlp.pipe`` in batches of 512.
Both see the same synthetic caption-like and ASR-like texts (random step sentences built from
cooking/DIY verbs and nouns, so almost no text repeats).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import pandas as pd
from _harness import machine_info, write_results, write_rows

from howtocap.engine.rundir import RunDir
from howtocap.nlp import iter_verb_lemmas, load_spacy, verb_lemmas
from howtocap.report.stats import compute_stats

VERBS = ["cut", "add", "stir", "pour", "mix", "fry", "wash", "peel", "sand", "paint", "drill",
         "screw", "fold", "glue", "measure", "remove", "place", "press", "heat", "bake"]
NOUNS = ["onion", "board", "bowl", "pan", "screw", "wall", "paper", "dough", "oil", "brush",
         "egg", "lid", "shelf", "butter", "flour", "wire", "knife", "pipe", "glass", "sauce"]
FILLERS = ["so", "um", "okay", "you know", "like", "basically", "right", "now"]


def synthetic_texts(n: int, seed: int, asr: bool) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v1, v2 = rng.choice(VERBS, 2)
        n1, n2 = rng.choice(NOUNS, 2)
        if asr:
            f = " ".join(rng.choice(FILLERS, 3))
            out.append(f"{f} you want to {v1} the {n1} and then we {v2} the {n2} "
                       f"{rng.integers(2, 60)} times")
        else:
            out.append(f"{v1.capitalize()} the {n1} and {v2} the {n2} "
                       f"for {rng.integers(2, 60)} minutes.")
    return out


def bench_tagging(n_texts: int) -> dict:
    texts = synthetic_texts(n_texts // 2, 1, asr=False) + synthetic_texts(n_texts // 2, 2, True)
    full = load_spacy(whole=True)  # the reference: every component, nothing disabled
    fast = load_spacy()
    words = sum(len(t.split()) for t in texts)

    t0 = time.perf_counter()
    base = [verb_lemmas(full(t)) for t in texts]
    t_base = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = list(iter_verb_lemmas(fast, texts, batch_size=512))
    t_ours = time.perf_counter() - t0
    agree = float(np.mean([a == b for a, b in zip(base, ours, strict=True)]))
    return {"texts": len(texts), "words": words,
            "baseline_seconds": t_base, "ours_seconds": t_ours,
            "baseline_texts_per_s": len(texts) / t_base, "ours_texts_per_s": len(texts) / t_ours,
            "speedup": t_base / t_ours, "verb_agreement": agree}


def bench_run(n_run: int) -> dict:
    """A run of n_run captions + n_run subtitle lines, 4 per video (6,000 videos by default, so
    the default 5,000-video sample is drawn, as in the paper)."""
    with tempfile.TemporaryDirectory() as tmp:
        rd = RunDir(tmp)
        per_video = 4
        caps = synthetic_texts(n_run, 3, asr=False)
        subs = synthetic_texts(n_run, 4, asr=True)
        for name, texts in (("captions", caps), ("subtitles", subs)):
            vids = [f"vid{i // per_video:05d}" for i in range(len(texts))]
            start = np.arange(len(texts), dtype=float) % per_video * 5
            df = pd.DataFrame({"video_id": vids, "start": start, "end": start + 8,
                               "text": texts, "source": "llm" if name == "captions" else "asr",
                               "block": 0, "model": "bench"})
            if name == "subtitles":
                df = df.drop(columns=["block", "model"])
            write_rows(rd, name, df)
        nlp = load_spacy()
        t0 = time.perf_counter()
        stats = compute_stats(rd, nlp=nlp, progress=True)
        secs = time.perf_counter() - t0
    n_texts = 2 * n_run
    used = sum(stats["text"][c]["texts_used"] for c in ("captions", "subtitles"))
    return {"texts": n_texts, "videos": stats["sample"]["videos_total"],
            "videos_used": stats["sample"]["videos_used"], "texts_used": used,
            "seconds": secs, "texts_per_s": used / secs,
            "projected_seconds_per_100k_texts": secs * 100_000 / used,
            "vocabulary_captions": stats["text"]["captions"]["vocabulary"],
            "words_per_caption_captions": stats["text"]["captions"]["words_per_caption"]["mean"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-texts", type=int, default=3000)
    ap.add_argument("--n-run", type=int, default=24000)
    args = ap.parse_args()
    load_before = os.getloadavg()
    tag = bench_tagging(args.n_texts)
    run = bench_run(args.n_run)
    load = [round(x, 2) for x in os.getloadavg()]
    result = {"machine": machine_info(load_avg_before=[round(x, 2) for x in load_before],
                                      load_avg_after=load),
              "tagging": tag, "end_to_end": run}
    md = [
        "# `howtocap stats` benchmark",
        "",
        f"Verb tagging of {tag['texts']:,} synthetic texts ({tag['words']:,} words), one process:",
        "",
        "| method | seconds | texts/s | speed-up |",
        "|---|---:|---:|---:|",
        f"| baseline: full pipeline, `nlp(t)` per text | {tag['baseline_seconds']:.1f} | "
        f"{tag['baseline_texts_per_s']:.0f} | 1.00x |",
        f"| ours: parser/NER off, `nlp.pipe` batch 512 | {tag['ours_seconds']:.1f} | "
        f"{tag['ours_texts_per_s']:.0f} | {tag['speedup']:.2f}x |",
        "",
        f"Verb lemmas identical for {100 * tag['verb_agreement']:.1f}% of texts.",
        "",
        f"End to end (`compute_stats`, default `--videos 5000`): a run of {run['texts']:,} "
        f"texts (captions + subtitles, 4 per video) over {run['videos']:,} videos; the sample "
        f"of {run['videos_used']:,} videos holds {run['texts_used']:,} texts, tokenised and "
        f"tagged by spaCy in one pass: {run['seconds']:.1f} s ({run['texts_per_s']:.0f} texts/s);"
        f" projected {run['projected_seconds_per_100k_texts']:.0f} s per 100k sampled texts.",
        "",
        f"Measured on {os.cpu_count()} shared CPU cores under load (load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end): absolute times are "
        "pessimistic, the speed-up is measured in the same run.",
        "",
    ]
    write_results("stats", result, md)


if __name__ == "__main__":
    main()
