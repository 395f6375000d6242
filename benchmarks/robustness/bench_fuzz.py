"""Fuzz every reader of user input with Hypothesis: cases tried, one-line errors, crashes.

Run: .venv/bin/python benchmarks/robustness/bench_fuzz.py [--cases 10000]
     -> benchmarks/results/fuzz.{json,md}

The targets and their contracts live in ``tests/support/fuzz_targets.py`` (``tests/test_fuzz.py``
runs the same ones with a few examples): VTT/SRT files, caption.json / pickle dumps, CSV sources,
manifests and ``--ids`` lists, the LLM reply parser, the YAML config loader and the settings models,
the ``eval`` annotation readers (MSR-VTT, YouCook2, MSVD, LSMDC, CSV), a CrossTask release,
``dvc-eval`` predictions and ground truth, TDR annotations and scripts, ``--template`` files and
training-pair CSVs. A case passes with a valid result (checked: columns, finite sorted times, end >=
start, captions inside the block, clips with finite spans) or the project's one-line error; anything
else is a crash. Crashes do not stop the run (every distinct one is listed). ``--cases`` is split
over the targets by weight (the cheap in-memory parser gets more, the file-converting readers
fewer)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import ROOT, load_avg, machine_info, md_table, write_results

sys.path.insert(0, str(ROOT))  # tests.support.fuzz_targets

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from tests.support.fuzz_targets import TARGETS, Tally  # noqa: E402

WEIGHTS = {"vtt/srt files": 3, "caption.json / pickle dumps": 1.5,
           "CSV sources (dump + per video)": 1, "manifests + --ids lists": 1,
           "LLM reply parser": 6, "config loader + settings": 2.5,
           "eval annotations (MSR-VTT, YouCook2, MSVD, LSMDC, CSV)": 1.5,
           "CrossTask release": 1, "dvc-eval predictions + ground truth": 0.5,
           "TDR annotations + scripts": 1, "--template files": 1, "training-pair CSVs": 1}


def fuzz(name: str, n: int, seed: int) -> dict[str, Any]:
    strategy, fn = TARGETS[name]
    tally = Tally()

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(strategy)
    def run(case: Any) -> None:
        tally.run(fn, case, keep_going=True)

    from hypothesis import seed as hseed

    t0 = time.perf_counter()
    hseed(seed)(run)()
    secs = time.perf_counter() - t0
    return {"cases": tally.cases, "one_line_errors": tally.one_line_errors,
            "valid": tally.cases - tally.one_line_errors - sum(tally.kinds.values()),
            "crashes": sum(tally.kinds.values()), "crash_kinds": dict(tally.kinds),
            "examples": tally.crashes[:10], "seconds": round(secs, 1),
            "cases_per_s": round(tally.cases / secs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="total, split by weight")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.disable(logging.WARNING)  # "read as Windows-1252" notes, thousands of them
    load0 = os.getloadavg()
    total_w = sum(WEIGHTS.values())
    res: dict[str, Any] = {"targets": {}}
    t0 = time.perf_counter()
    for name in TARGETS:
        n = max(1, round(args.cases * WEIGHTS[name] / total_w))
        r = fuzz(name, n, args.seed)
        res["targets"][name] = r
        print(f"{name}: {r['cases']} cases, {r['crashes']} crashes, {r['seconds']} s "
              f"{r['crash_kinds']}", flush=True)
    res["cases"] = sum(r["cases"] for r in res["targets"].values())
    res["crashes"] = sum(r["crashes"] for r in res["targets"].values())
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["machine"] = machine_info(load_avg_start=[round(x, 1) for x in load0],
                                  load_avg_end=load_avg())
    write_results("fuzz", res, report(res))


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    rows = "\n".join(md_table(
        ["reader", "cases", "valid results", "one-line errors", "crashes", "cases/s"],
        [[name, f"{t['cases']:,}", f"{t['valid']:,}", f"{t['one_line_errors']:,}",
          f"**{t['crashes']}**", f"{t['cases_per_s']:.0f}"] for name, t in r["targets"].items()],
        align="lrrrrr"))
    crashes = "\n".join(f"- {name}: {k} (x{c})" for name, t in r["targets"].items()
                        for k, c in t["crash_kinds"].items()) or "none"
    return f"""# Fuzzing the readers of user input (Hypothesis)

{m['platform']}, {m['cpus']} cores, Python {m['python']}; load average {m['load_avg_start'][0]}
at start, {m['load_avg_end'][0]} at the end (a shared machine: cases/s are low and noisy).

**{r['cases']:,} cases, {r['crashes']} crashes** in {r['seconds']:.0f} s. A case passes with a
valid result (columns, finite sorted times, end >= start; captions inside their block, no
duplicates; settings that validate) or the project's one-line error (`HowtocapError`, one line,
naming the file); any other exception is a crash.

{rows}

Inputs are the field's real shapes (WebVTT/SRT cues with YouTube timing tags, HowTo100M
caption.json entries and sentencified records, HowToCaption score pairs, pickles, CSV dumps and
manifests, LLM replies in every timestamp form the parser accepts, YAML configs with the CLI's
option names, MSR-VTT/LSMDC/YouCook2/MSVD annotations, CrossTask release folders, densevid_eval
submissions and PDVC/YouCook2 ground truth, TDR scripts in both forms, template files and
training-pair CSVs), then truncated, byte-flipped, re-encoded (UTF-16, BOM) or replaced by junk;
JSON and CSV files also get one or two places replaced by junk (a key dropped, a cell cut) so
most cases get past the first check. In a case of several files (a release folder, predictions
+ ground truth) one file is broken and the others stay valid, so the reader gets to it.

Crashes in this run: {crashes}

Crashes found while building this fuzzer, each fixed in the reader (now one line) and pinned by
a regression test in `tests/test_fuzz.py`: a YAML config that is not UTF-8
(`UnicodeDecodeError`; UTF-16 with a BOM is now read), a manifest path holding a NUL byte and
a `--template` value holding one (`ValueError: embedded null byte`); then, with the later
targets: a NUL byte in a path of an `eval` CSV or a training-pair CSV (`ValueError`), NaN/inf
clip times accepted by the `eval` CSV, YouCook2 and training-pair readers, a YouCook2 segment
that is not two numbers (`ValueError`/`TypeError`), an empty YouCook2 sentence or video id
accepted as a query, a damaged MSVD `raw-captions.pkl` (`KeyError`, `TypeError`, ...), a TDR
annotation `id` that is not an integer (`ValueError`) and non-finite TDR times. An earlier
version of the manifest target counted any crash of the manifest reader as a one-line error
(the `--ids` reading of the same bytes ran in a `finally`); `tests/test_fuzz.py` now plants a
`ValueError` there and checks that it is reported as a crash. Later, at 5,000 cases a
target: a training-pair row with an empty `video_id` (a clip of video ''), and a blank
YouCook2 video id again (its check was lost when the three YouCook2 readers became one
model); both are one line now. What it cannot show:
inputs far outside these shapes (multi-GB files, deep nesting beyond Hypothesis's sizes), and
whether a *valid* result is the
right one (the readers' own tests check that).
"""


if __name__ == "__main__":
    main()
