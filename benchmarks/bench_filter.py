"""The align filter on generated videos with labelled chatter: steps kept vs chatter dropped.

Run: ``.venv/bin/python benchmarks/bench_filter.py [--quick]``. Writes
``benchmarks/results/filter.json``, ``filter.md`` and ``filter.png``.

Generated narrated videos (``make_fixture_set(chatter=2)``: 4-5 steps per video, each video
opened and closed by a presenter saying channel chatter), two captions per segment (the short
caption and the spoken sentence, as an LLM often writes several), placed at the segment's start
with an LLM-like error (uniform ±3 s). One real ``align_run`` scores everything (the embedded
default encoder); every filter is then applied to the *same* scores by re-running only the
reduce step: the old default (keep all) is the baseline, the paper's explicit modes
(``--threshold``, ``--quantile``, ``--keep-top``) and the new default (``null_z``) are compared,
plus a sweep of the default's bar. Timing: scoring with the default's reference captions vs
without (``--reference-captions 0``), warm frame cache, same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.align import DEFAULT_NULL_Z, AlignConfig
from howtocap.encoders import create
from howtocap.io.inputs import VideoItem
from howtocap.pipeline.align import align_run, finish_align
from howtocap.rundir import RunDir
from howtocap.samples import ground_truth, make_fixture_set

RESULTS = Path(__file__).parent / "results"


def _captions(truth: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for r in truth.itertuples():
        for text in (r.caption, r.narration):
            start = float(r.start) + float(rng.uniform(-3, 3))
            rows.append({"video_id": r.video_id, "start": start, "end": start + 8,
                         "text": text, "source": "llm", "block": 0, "model": "bench",
                         "kind": r.kind})
    return pd.DataFrame(rows)


def _rates(al: pd.DataFrame, kinds: dict[tuple[str, str], str]) -> dict[str, Any]:
    kind = np.array([kinds[(v, t)] for v, t in zip(al["video_id"], al["text"], strict=True)])
    kept = al["kept"].to_numpy(dtype=bool)
    steps, chat = kind == "step", kind == "chatter"
    return {"steps": int(steps.sum()), "chatter": int(chat.sum()),
            "steps_kept": round(float(kept[steps].mean()), 3),
            "chatter_dropped": round(float(1 - kept[chat].mean()), 3),
            "kept": int(kept.sum())}


def run(quick: bool, encoder_name: str) -> dict[str, Any]:
    encoder = create(encoder_name)
    res: dict[str, Any] = {"encoder": encoder.name, "quick": quick,
                           "machine": f"{platform.machine()}, torch threads "
                                      f"{__import__('torch').get_num_threads()}",
                           "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="bench-filter-") as tmp_name:
        tmp = Path(tmp_name)
        videos = make_fixture_set(tmp / "videos", n_videos=4 if quick else 10, seed=1,
                                  chatter=2, audio=False, subtitles=None, size=224)
        truth = ground_truth(videos)
        caps = _captions(truth, np.random.default_rng(1))
        kinds = {(r.video_id, r.text): r.kind for r in caps.itertuples()}
        rundir = RunDir(tmp / "run")
        rundir.record_videos([VideoItem(v.video_id, v.video_path) for v in videos])
        for vid, g in caps.groupby("video_id"):
            rundir.write_part("captions", str(vid), g.drop(columns="kind"))
        t0 = time.perf_counter()
        align_run(rundir, [], AlignConfig(), encoders=[encoder], progress=False)
        res["first_run_seconds"] = round(time.perf_counter() - t0, 1)
        # timing of the null: the same scoring without and with reference captions (warm cache)
        t0 = time.perf_counter()
        align_run(rundir, [], AlignConfig(reference_captions=0), encoders=[encoder],
                  progress=False, redo=True)
        t_without = time.perf_counter() - t0
        t0 = time.perf_counter()
        align_run(rundir, [], AlignConfig(), encoders=[encoder], progress=False, redo=True)
        t_with = time.perf_counter() - t0
        res["timing"] = {"scoring_without_reference_s": round(t_without, 2),
                         "scoring_with_reference_s": round(t_with, 2),
                         "reference_captions": min(256, len(caps))}
        n_steps = int((caps["kind"] == "step").sum())
        modes: dict[str, AlignConfig] = {
            "keep all (old default)": AlignConfig(keep_all=True),
            "--threshold 0.05": AlignConfig(threshold=0.05),
            "--threshold 0.10": AlignConfig(threshold=0.10),
            "--quantile 0.5": AlignConfig(quantile=0.5),
            "--quantile 0.7": AlignConfig(quantile=0.7),
            f"--keep-top {n_steps} (oracle count of steps)": AlignConfig(keep_top=n_steps),
            f"default: null z >= {DEFAULT_NULL_Z:g}": AlignConfig(),
        }
        res["modes"] = {}
        for label, cfg in modes.items():
            al, thr = finish_align(rundir, cfg, [encoder.name], report=False)
            res["modes"][label] = {**_rates(al, kinds),
                                   "score_threshold": None if not np.isfinite(thr) else
                                   round(float(thr), 4)}
        res["sweep_null_z"] = {}
        for z in (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5):
            al, _ = finish_align(rundir, AlignConfig(null_z=z), [encoder.name], report=False)
            res["sweep_null_z"][f"{z:g}"] = _rates(al, kinds)
        al, _ = finish_align(rundir, AlignConfig(), [encoder.name], report=False)
        al["kind"] = [kinds[(v, t)] for v, t in zip(al["video_id"], al["text"], strict=True)]
        missed = al[(al["kind"] == "step") & ~al["kept"]]
        survived = al[(al["kind"] == "chatter") & al["kept"]]
        cols = [c for c in ("video_id", "text", "kind", "score", "z_text", "z_clip", "null_z",
                            "kept") if c in al]
        al[cols].to_csv(RESULTS / "filter_captions.csv", index=False)
        res["steps_dropped_by_default"] = sorted(set(missed["text"]))
        res["chatter_kept_by_default"] = sorted(set(survived["text"]))
        res["videos"] = len(videos)
        res["captions"] = len(caps)
    res["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return res


def write_md(res: dict[str, Any], path: Path) -> None:
    lines = [
        "# Align filter: steps kept vs chatter dropped", "",
        f"Encoder `{res['encoder']}`, {res['machine']}; load average "
        f"{res['load_average_start']} → {res['load_average_end']} (a shared machine: timings "
        "are inflated, ratios are not). "
        f"{res['videos']} generated videos, {res['captions']} captions (two per segment, "
        "±3 s timestamp error); every filter applied to the same scores.", "",
        "| filter | steps kept | chatter dropped | pairs kept | score threshold |",
        "|---|---|---|---|---|",
    ]
    for label, m in res["modes"].items():
        thr = "–" if m["score_threshold"] is None else f"{m['score_threshold']:.4f}"
        lines.append(f"| {label} | {m['steps_kept']:.0%} of {m['steps']} | "
                     f"{m['chatter_dropped']:.0%} of {m['chatter']} | {m['kept']} | {thr} |")
    lines += ["", "Sweep of the default's bar (`--null-z Z`):", "",
              "| Z | steps kept | chatter dropped |", "|---|---|---|"]
    for z, m in res["sweep_null_z"].items():
        lines.append(f"| {z} | {m['steps_kept']:.0%} | {m['chatter_dropped']:.0%} |")
    t = res["timing"]
    meet = [m for m, r in res["modes"].items()
            if r["steps_kept"] >= 0.9 and r["chatter_dropped"] >= 0.8]
    lines += [
        "",
        f"Steps the default dropped: {', '.join(res['steps_dropped_by_default']) or 'none'}.  ",
        f"Chatter the default kept: {', '.join(res['chatter_kept_by_default']) or 'none'}.", "",
        f"Cost of the default's null: scoring all videos took {t['scoring_with_reference_s']} s "
        f"with {t['reference_captions']} reference captions vs "
        f"{t['scoring_without_reference_s']} s without (warm frame cache, same run).", "",
        "Filters that meet both targets here (≥ 90 % of steps kept, ≥ 80 % of chatter "
        f"dropped): {', '.join(meet) or 'none'}. An explicit score threshold or quantile is "
        "tuned to this encoder and this share of chatter after the fact (a run does not know "
        "either); the default needs neither, since it compares each caption with other "
        "videos' captions on its clip and with its own scores on other videos' clips. Its bar "
        "(1.5) was chosen on this same set, as the setting that falls least short of both "
        "targets, so it is not a held-out figure (tests/test_align_filter.py checks it on other "
        "videos). What no visual filter can do: keep steps the encoder does not recognise "
        "(listed above), which look like chatter to it.",
    ]
    path.write_text("\n".join(lines) + "\n")


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    labels = list(res["modes"])
    y = np.arange(len(labels))
    ax1.barh(y - 0.2, [res["modes"][m]["steps_kept"] for m in labels], 0.4,
             color="tab:green", label="steps kept")
    ax1.barh(y + 0.2, [res["modes"][m]["chatter_dropped"] for m in labels], 0.4,
             color="tab:red", label="chatter dropped")
    ax1.axvline(0.9, color="tab:green", linestyle=":")
    ax1.axvline(0.8, color="tab:red", linestyle=":")
    ax1.set_yticks(y, labels, fontsize=8)
    ax1.set_xlim(0, 1)
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title("Filters on the same scores (targets: 90 % / 80 %)")
    zs = [float(z) for z in res["sweep_null_z"]]
    ax2.plot(zs, [m["steps_kept"] for m in res["sweep_null_z"].values()], "o-",
             color="tab:green", label="steps kept")
    ax2.plot(zs, [m["chatter_dropped"] for m in res["sweep_null_z"].values()], "o-",
             color="tab:red", label="chatter dropped")
    ax2.axvline(DEFAULT_NULL_Z, color="gray", linestyle="--", label="default bar")
    ax2.set_xlabel("--null-z Z")
    ax2.set_ylim(0, 1.02)
    ax2.legend(fontsize=8)
    ax2.set_title("The default's bar")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="4 videos instead of 10")
    ap.add_argument("--encoder", default="default")
    args = ap.parse_args()
    res = run(args.quick, args.encoder)
    print(json.dumps(res, indent=1), file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "filter.json").write_text(json.dumps(res, indent=2))
    write_md(res, RESULTS / "filter.md")
    plot(res, RESULTS / "filter.png")
    print((RESULTS / "filter.md").read_text())


if __name__ == "__main__":
    main()
