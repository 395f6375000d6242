"""Retrieval-metric speed: counting ranks vs sorting every row, on a 10k x 10k similarity.

Run: ``.venv/bin/python benchmarks/speed/bench_metrics.py [--n 10000]``. Writes
``benchmarks/results/metrics.json`` and ``metrics.md``. Baselines measured in the same run:

* ``reference``: :func:`howtocap.metrics.reference_metrics`, a per-row lexsort with
  an explicit tie key (exact, tie-aware; what the fast code must equal);
* ``argsort``: the usual one-shot ``np.argsort(-sim, axis=1)`` recipe (fast-ish, but leaves
  ties to the sort order), timed for context.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import torch
from _harness import best_time, machine, write_results

from howtocap.metrics import TIE_RULES, metrics_from_ranks, reference_metrics, retrieval_metrics


def argsort_metrics(sim: np.ndarray) -> dict:
    order = np.argsort(-sim, axis=1)
    r = 1 + np.argmax(order == np.arange(len(sim))[:, None], axis=1)
    return metrics_from_ranks(r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--n-ties", type=int, default=2_000, help="size of the tied-score check")
    args = ap.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    sim = rng.standard_normal((n, n), dtype=np.float32)
    sim[np.arange(n), np.arange(n)] += 2.0

    t_fast, fast = best_time(lambda: retrieval_metrics(sim), 3)
    t_ref, ref = best_time(lambda: reference_metrics(sim))
    t_arg, arg = best_time(lambda: argsort_metrics(sim))
    equal_random = fast == ref

    # exactness with many ties, every rule (integer-valued scores)
    tied = rng.integers(0, 5, size=(args.n_ties, args.n_ties)).astype(np.float32)
    equal_ties = {t: retrieval_metrics(tied, ties=t) == reference_metrics(tied, ties=t)
                  for t in TIE_RULES}

    result = {
        "n": n, "fast_seconds": round(t_fast, 3), "reference_seconds": round(t_ref, 3),
        "argsort_seconds": round(t_arg, 3), "speedup_vs_reference": round(t_ref / t_fast, 1),
        "speedup_vs_argsort": round(t_arg / t_fast, 1),
        "equal_to_reference_random": equal_random,
        "n_ties_check": args.n_ties, "equal_to_reference_with_ties": equal_ties,
        "argsort_recipe_R@1": arg["R@1"], "fast_R@1": fast["R@1"],
        "metrics": fast, "torch_threads": torch.get_num_threads(),
        "machine": machine(),
    }
    md = [
        f"# Retrieval metrics on a {n:,} x {n:,} similarity matrix (float32, CPU)",
        "",
        "| implementation | seconds | vs counting |",
        "|---|---:|---:|",
        f"| counting ranks (`retrieval_metrics`) | {t_fast:.2f} | 1.0x |",
        f"| per-row lexsort reference (`reference_metrics`) | {t_ref:.2f} | "
        f"{t_ref / t_fast:.1f}x slower |",
        f"| one-shot `np.argsort(-sim, axis=1)` | {t_arg:.2f} | {t_arg / t_fast:.1f}x slower |",
        "",
        f"Equal to the reference on the random matrix: **{equal_random}**; on a "
        f"{args.n_ties:,}² integer (heavily tied) matrix, per tie rule: "
        + ", ".join(f"{k} **{v}**" for k, v in equal_ties.items()) + ".",
        "",
    ]
    write_results("metrics", result, md)
    if not (equal_random and all(equal_ties.values())):
        raise SystemExit("metrics disagree with the reference")


if __name__ == "__main__":
    main()
