"""Batched commits vs per-video parts: text-only captioning of a HowTo100M-style caption.json
with an instant in-process LLM, on the code before batching and on this tree, same machine.

Run: .venv/bin/python benchmarks/scale/bench_batches.py [--videos 1000 10000] [--only before|after]
     -> benchmarks/results/batches.{json,md}   (``--report-only``: the md from the json)

"before" is the commit named by ``--before`` (default: the last commit without batches),
extracted with ``git archive`` into benchmarks/work/ (git-ignored); "after" is this tree.
Each measurement is its own child process with that tree's ``src`` first on the path, so its
peak RSS (``ru_maxrss``) is its own. Per size and code:

* ``caption_run(None, DIR, CaptionRunConfig(subtitles=SRC), llm=InstantLLM())`` end to end:
  wall time, videos/s, peak RSS;
* files that hold results per table/stage folder, per 100 videos: under ``DIR/parts/``
  (before), or the table, ``status``, ``work`` and ``claims`` folders of the shard layout;
* ``howtocap status DIR --json`` as a user runs it (a fresh process, import included), wall s,
  and ``run_status(DIR)`` alone (imports done): what reading the run directory costs.

The child results are cached in benchmarks/work/batches/ (``--only`` measures one side and
keeps the other's cached figure, so the two sides may come from different invocations of
this script; the json says when each was taken).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent  # scale/: bench_textonly
ROOT = HERE.parents[1]
WORK = ROOT / "benchmarks" / "work" / "batches"
OUT = ROOT / "benchmarks" / "results"
BEFORE = "ea22188"  # main before batched commits (issue #22, part 1)
sys.path.insert(0, str(HERE))


def tree(code: str, before: str) -> Path:
    """The source tree of ``code``: this checkout, or ``before`` extracted once."""
    if code == "after":
        return ROOT
    dest = WORK / f"src-{before}"
    if not (dest / "src").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", before, "src"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def child(src: Path, out: Path) -> dict[str, Any]:
    """One caption run (in the child, with the tree's ``src`` on sys.path)."""
    from bench_textonly import InstantLLM

    from howtocap.caption import run as cap_mod

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    subs, caps = cap_mod.caption_run(None, out, cap_mod.CaptionRunConfig(subtitles=str(src)),
                                     llm=InstantLLM(), progress=False)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "done": caps.done, "failed": len(caps.failed),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


# folders of a shard-layout run directory that hold no results (settings, caches, logs)
NOT_RESULTS = ("fingerprints", "stats", "config", "logs", "cache", "index")


def files_per_folder(run: Path) -> dict[str, int]:
    """The files that hold results, by folder: under each ``parts/<a>`` of a run directory
    with parts (``parts/<a>/<b>`` for status/batches/claims), else each table folder and
    ``status|work|claims/<stage>`` of the shard layout."""
    root = run / "parts" if (run / "parts").is_dir() else run
    counts: dict[str, int] = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root).parts
        if not p.is_file() or len(rel) < 2 or rel[0] in NOT_RESULTS:
            continue
        key = "/".join(rel[:2]) if rel[0] in ("status", "batches", "claims", "work") and \
            len(rel) > 2 else rel[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


STATUS_INPROC = """
import sys, time
from howtocap.pipeline.run import run_status
t0 = time.perf_counter()
run_status(sys.argv[1])
print(time.perf_counter() - t0)
"""


def measure(code: str, n: int, src: Path, before: str) -> dict[str, Any]:
    base = tree(code, before)
    out = WORK / f"run-{code}-{n}"
    env = {**os.environ, "PYTHONPATH": f"{base / 'src'}{os.pathsep}{HERE}", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, __file__, "--child", str(src), "--out", str(out)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{code} {n}: {proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    files = files_per_folder(out)
    res["files"] = files
    res["files_per_100_videos"] = {k: round(100 * v / n, 3) for k, v in files.items()}
    res["files_total"] = sum(files.values())
    res["videos_per_s"] = n / res["seconds"]
    t0 = time.perf_counter()
    st = subprocess.run([sys.executable, "-m", "howtocap.cli", "status", str(out), "--json"],
                        capture_output=True, text=True, env=env)
    res["status_seconds"] = time.perf_counter() - t0
    if st.returncode != 0:
        raise SystemExit(f"status {code} {n}: {st.stderr[-2000:]}")
    stages = {s["stage"]: s["done"] for s in json.loads(st.stdout)["stages"]}
    res["status_done"] = stages
    timed = subprocess.run([sys.executable, "-c", STATUS_INPROC, str(out)], capture_output=True,
                           text=True, env=env)
    if timed.returncode != 0:
        raise SystemExit(f"status (in process) {code} {n}: {timed.stderr[-2000:]}")
    res["status_inproc_seconds"] = float(timed.stdout.split()[-1])
    res["taken_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    res["load_avg"] = round(os.getloadavg()[0], 1)
    shutil.rmtree(out, ignore_errors=True)
    print(f"  {code} {n}: {json.dumps(res)[:400]}", flush=True)
    return res


def write_md(r: dict[str, Any]) -> str:
    rows = ["# Batched commits vs per-video parts (`caption --subtitles caption.json`, "
            "instant LLM)", "",
            f"{r['machine']}. \"before\": commit `{r['before']}` (a part file per table and a "
            "status JSON per video and stage); \"after\": this tree (shards of videos: one "
            "Parquet file per table and one status file per stage per shard, committed in "
            f"chunks of {r['batch_size']:,} videos). Synthetic HowTo100M-style ASR (20-60 "
            "lines a video); the "
            "LLM answers instantly, so the figures are our own overhead. Each cell is its own "
            "process.", "",
            "| videos | code | videos/s | peak RSS | files per 100 videos | `status` | "
            "`status`, imports done | load avg |",
            "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for n in r["sizes"]:
        for code in ("before", "after"):
            m = r["runs"].get(f"{code}_{n}")
            if m is None:
                continue
            rows.append(f"| {int(n):,} | {code} | {m['videos_per_s']:.1f} | "
                        f"{m['peak_rss_mb']:.0f} MB | {100 * m['files_total'] / int(n):.2f} | "
                        f"{m['status_seconds']:.2f} s | "
                        + (f"{m['status_inproc_seconds']:.2f} s |"
                           if "status_inproc_seconds" in m else "- |")
                        + f" {m.get('load_avg', '-')} |")
    rows += ["", "Files that hold results by folder (per 100 videos; before: under `parts/`, "
             "after: the shard layout's table and status folders):", "",
             "| videos | code | folders |", "|---:|---|---|"]
    for n in r["sizes"]:
        for code in ("before", "after"):
            m = r["runs"].get(f"{code}_{n}")
            if m is not None:
                per = ", ".join(f"`{k}` {v:g}" for k, v in m["files_per_100_videos"].items())
                rows.append(f"| {int(n):,} | {code} | {per} |")
    rows += ["", "`status` is `howtocap status DIR --json` in a fresh process (import "
             "included: most of it is importing the pipeline, torch among it); \"imports "
             "done\" times `run_status(DIR)` alone in a fresh process. Each side's cell "
             "says when it was measured in the json "
             "(`taken_at`; `load avg` is the 1-minute load when the cell finished: other "
             "jobs on the 2 cores, test runs among them, add time, not memory, so the "
             "videos/s are noisy; the file counts are exact). What is left of the time is "
             "the stages' own work per video (subtitles conform, blocks, prompt, parse, the "
             "filler test), not the commits.", ""]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--videos", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--only", choices=["before", "after"])
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--child", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--report-only", action="store_true",
                    help="Rewrite batches.md from batches.json (no measuring).")
    args = ap.parse_args()
    if args.report_only:
        (OUT / "batches.md").write_text(write_md(json.loads((OUT / "batches.json").read_text())))
        return
    if args.child:
        print(json.dumps(child(args.child, args.out)))
        return
    from bench_textonly import write_caption_json

    WORK.mkdir(parents=True, exist_ok=True)
    cache = WORK / "measured.json"
    runs: dict[str, Any] = json.loads(cache.read_text()) if cache.exists() else {}
    for n in args.videos:
        src = WORK.parent / "textonly" / f"caption_{n}.json"
        if not src.exists():
            src.parent.mkdir(parents=True, exist_ok=True)
            write_caption_json(src, n)
        for code in ("before", "after"):
            if args.only in (None, code):
                runs[f"{code}_{n}"] = measure(code, n, src, args.before)
                cache.write_text(json.dumps(runs, indent=1))
    sys.path.insert(0, str(ROOT / "src"))
    from howtocap.engine import core

    batch_size = getattr(core, "BATCH_SIZE", 0)

    sizes = sorted({int(k.split("_")[1]) for k in runs})
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}",
              "before": args.before, "batch_size": batch_size, "sizes": [str(s) for s in sizes],
              "runs": runs}
    for n in sizes:
        b, a = runs.get(f"before_{n}"), runs.get(f"after_{n}")
        if a and b:
            result[f"speedup_{n}"] = a["videos_per_s"] / b["videos_per_s"]
    OUT.mkdir(exist_ok=True)
    (OUT / "batches.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / "batches.md").write_text(write_md(result))
    print(write_md(result))


if __name__ == "__main__":
    main()
