"""CrossTask step localisation on generated videos: ordered DP inference vs independent argmax.

Run: ``.venv/bin/python benchmarks/quality/bench_crosstask.py [--quick]``. Writes
``benchmarks/results/crosstask.{json,md,png}``.

A CrossTask-format release is generated (``write_crosstask_release``): 3 tasks of 4 steps, each
step a photograph named by a short instruction; every video shows its task's steps as 3-s
segments with background photographs between some of them, and (as in real videos) two steps
swapped in ~30 % of the videos and one step left out in ~20 %. The bundled default encoder
scores every second against every step text (frames through the frame cache, as
``howtocap eval --benchmark crosstask`` does). Measured in the same run, on the same scores:

1. recall of the CrossTask DP (steps in canonical order, one second each) vs each step's
   independent argmax, per task and averaged over tasks (the official protocol);
2. the same with Gaussian noise of growing size added to the scores (a weaker encoder);
3. reference points: chance (random scores) and oracle scores (the annotations themselves),
   which show the DP's ceiling on videos whose steps are not in canonical order;
4. the time of the DP on a CrossTask-sized video (5 min, 11 steps) vs the argmax.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import WORK, best_time, machine, md_table, write_results

from howtocap.encoders import create  # noqa: E402
from howtocap.evaluate.benchmarks import index_videos  # noqa: E402
from howtocap.evaluate.crosstask import (  # noqa: E402
    INFERENCE,
    dp_inference,
    evaluate_crosstask,
    independent_inference,
    read_release,
    recall_by_inference,
    score_videos,
)
from howtocap.evaluate.crosstask_samples import write_crosstask_release  # noqa: E402

WORK = WORK / "crosstask"


def recalls(kept: list, scores: list[np.ndarray]) -> dict[str, float]:
    return {n: r["recall"] for n, r in recall_by_inference(kept, scores).items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2 videos per task (a smoke run)")
    ap.add_argument("--encoder", default="default")
    args = ap.parse_args()
    load0 = os.getloadavg()
    per_task = 2 if args.quick else 5
    t0 = time.perf_counter()
    fx = write_crosstask_release(WORK, videos_per_task=per_task, n_tasks=3,
                                 seconds_per_segment=3.0, size=160, fps=4, seed=0)
    gen_s = time.perf_counter() - t0
    encoder = create(args.encoder)
    t0 = time.perf_counter()
    res_cli = evaluate_crosstask(fx.release, fx.videos_dir, encoder, cache_dir=WORK / "cache",
                                 out=WORK / "eval.json", progress=False, show=False)
    eval_s = time.perf_counter() - t0
    release = read_release(fx.release)
    kept, skipped = score_videos(release, encoder, found=index_videos(fx.videos_dir),
                                 cache_dir=WORK / "cache")
    assert not skipped, skipped
    scores = [s for _, s, _ in kept]
    base = recalls(kept, scores)
    assert abs(base["dp"] - res_cli["recall_by_inference"]["dp"]) < 1e-9

    spread = float(np.std(np.concatenate([s.ravel() for s in scores])))
    rng = np.random.default_rng(0)
    draws = 10 if args.quick else 30
    noise_levels = [0.0, 0.25, 0.5, 1.0, 2.0]
    noise = {}
    for lvl in noise_levels:
        runs = [recalls(kept, [s + rng.normal(0, lvl * spread, s.shape) for s in scores])
                for _ in range(draws if lvl else 1)]
        noise[str(lvl)] = {n: float(np.mean([r[n] for r in runs])) for n in INFERENCE}
        noise[str(lvl)].update({f"{n}_sd": float(np.std([r[n] for r in runs]))
                                for n in INFERENCE})
    chance_runs = [recalls(kept, [rng.random(s.shape) for s in scores]) for _ in range(200)]
    chance = {n: float(np.mean([r[n] for r in chance_runs])) for n in INFERENCE}
    oracle = recalls(kept, [g.astype(float) for _, _, g in kept])

    n_swapped = sum(v.order != sorted(v.order) for v in fx.videos)
    n_dropped = sum(len(v.order) < 4 for v in fx.videos)
    big = np.random.default_rng(1).normal(size=(300, 11))
    dp_s, _ = best_time(lambda: dp_inference(big), repeats=20)
    arg_s, _ = best_time(lambda: independent_inference(big), repeats=20)

    res = {
        "encoder": encoder.name, "quick": args.quick,
        "machine": machine(torch_threads=True),
        "loadavg_start": [round(x, 2) for x in load0],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "videos": len(kept), "tasks": len(release.tasks), "steps_per_task": 4,
        "annotated_steps": res_cli["n_steps"], "videos_with_swapped_steps": n_swapped,
        "videos_with_a_missing_step": n_dropped,
        "seconds_generate": round(gen_s, 1), "seconds_eval_command": round(eval_s, 1),
        "recall": base, "per_task": res_cli["per_task"],
        "noise": {"levels_in_score_sd": noise_levels, "score_sd": spread, "draws": draws,
                  "by_level": noise},
        "chance": chance, "oracle_scores": oracle,
        "dp_time_ms_300s_11steps": round(dp_s * 1e3, 3),
        "argmax_time_ms_300s_11steps": round(arg_s * 1e3, 3),
    }
    write_results("crosstask", res, report(res), plot=lambda png: plot(res, png))


def report(res: dict) -> list[str]:
    r, c, o = res["recall"], res["chance"], res["oracle_scores"]
    lines = [
        "# CrossTask step localisation on generated videos: DP vs independent argmax", "",
        f"Encoder `{res['encoder']}`; {res['videos']} generated videos of {res['tasks']} tasks "
        f"({res['steps_per_task']} steps each, {res['annotated_steps']} annotated steps; "
        f"{res['videos_with_swapped_steps']} videos with two steps swapped, "
        f"{res['videos_with_a_missing_step']} with a step left out). Recall = correctly "
        "placed steps / annotated steps per task, averaged over tasks (official protocol). "
        f"Machine: {res['machine']}; load average {res['loadavg_start'][0]} at the start, "
        f"{res['loadavg_end'][0]} at the end (shared machine: the times are inflated).", "",
        "| scores | DP (canonical order) | independent argmax |", "|---|---|---|",
        f"| `{res['encoder']}` frames × step texts | **{r['dp']:.1f}** | {r['independent']:.1f} |",
        f"| chance (random scores, 200 draws) | {c['dp']:.1f} | {c['independent']:.1f} |",
        f"| oracle (the annotations as scores) | {o['dp']:.1f} | {o['independent']:.1f} |", "",
        "Per task (default encoder):", "",
    ]
    lines += md_table(["task", "videos", "steps", "DP", "independent"],
                      [[f"{t} {p['title']}", p["videos"], p["steps"], f"{p['recall']:.1f}",
                        f"{p['recall_independent']:.1f}"] for t, p in res["per_task"].items()])
    lines += ["", f"With Gaussian noise added to the scores (σ in units of the scores' standard "
                  f"deviation {res['noise']['score_sd']:.3f}; mean ± sd over "
                  f"{res['noise']['draws']} draws):", "",
              *md_table(["noise σ", "DP", "independent"],
                        [[lvl, f"{n['dp']:.1f} ± {n['dp_sd']:.1f}",
                          f"{n['independent']:.1f} ± {n['independent_sd']:.1f}"]
                         for lvl, n in res["noise"]["by_level"].items()])]
    lines += [
        "",
        f"The DP on a 5-min video with 11 steps takes {res['dp_time_ms_300s_11steps']:.2f} ms "
        f"(argmax {res['argmax_time_ms_300s_11steps']:.3f} ms); `howtocap eval` on the "
        f"{res['videos']} videos took {res['seconds_eval_command']:.0f} s, nearly all of it "
        "decoding and encoding frames (cold cache).", "",
        f"What this shows: on these videos the ordered DP places {r['dp'] - r['independent']:+.1f} "
        "points more steps correctly than the independent argmax, and keeps its lead as the "
        "scores get noisier. Part of that lead is the order prior itself, not the encoder: "
        f"with random scores the DP already scores {c['dp']:.1f} vs {c['independent']:.1f} "
        "(a short video with few steps leaves an ordered placement little room to be wrong), "
        "so compare each inference with its own chance row. On videos whose steps really "
        "happen out of order the DP cannot place them all (oracle row: independent 100 %, DP "
        f"{o['dp']:.1f} %). What it does not show: these are 3 tasks of generated videos, one "
        "photograph per step, scored by the ImageNet-based default encoder; the absolute "
        "numbers say nothing about the real CrossTask videos, only that the command, the DP "
        "and the official averaging work as on the real release.",
    ]
    return lines


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lv = res["noise"]["levels_in_score_sd"]
    by = res["noise"]["by_level"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for n, label in (("dp", "DP (canonical order)"), ("independent", "independent argmax")):
        m = np.array([by[str(x)][n] for x in lv])
        sd = np.array([by[str(x)][f"{n}_sd"] for x in lv])
        ax.plot(lv, m, marker="o", label=label)
        ax.fill_between(lv, m - sd, m + sd, alpha=0.2)
        ax.axhline(res["chance"][n], ls=":", lw=1, color=ax.lines[-1].get_color())
    ax.set_xlabel("noise added to the scores (σ / score sd)")
    ax.set_ylabel("CrossTask recall (%)")
    ax.set_title(f"Step localisation, {res['videos']} generated videos ({res['encoder']})",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
