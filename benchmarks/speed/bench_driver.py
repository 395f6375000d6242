"""The driver's own cost per video on a text-only run (issue #22 part 3), before and after, in
the same run: ``howtocap caption --subtitles caption.json`` as a user runs it. The target:
**the driver process's CPU (user + system) under 1 ms a video** over HTTP, ``--keep-fillers``,
on ``--large`` videos; each row shows CPU ms a video (the process's whole CPU, imports and
closing merges included, divided by its videos).

Run: .venv/bin/python benchmarks/bench_driver.py [--videos 1000 --large 10000 --base REV]
     -> benchmarks/results/driver.{json,md,png}

``--base`` (default: main before the LLM client moved to asyncio + httpx, 3c67310: its own
HTTP/1.1 on ``http.client`` and a hand-written ``selectors`` loop resuming videos written as
generators) is checked out into a git worktree under benchmarks/work/; every measurement is
its own child process with that tree's or this tree's sources first on the path, so both
versions see the same machine, file and load:

* ``in-process``: ``caption_run`` with an LLM object that answers at once (one caption per
  block), so nothing but our own code is timed;
* ``http``: the CLI, ``--llm-url`` to one real OpenAI-compatible server on 127.0.0.1 that
  answers at once with one caption per ASR line it was given (``tests.chat_server
  --keep-alive``, its own process: HTTP/1.1 with connections kept open and TCP_NODELAY, as
  vLLM's and llama.cpp's servers answer; until 2026-11-26 it was HTTP/1.0, a new connection
  per request, then Python's threaded ``http.server``; now a one-thread loop,
  ``LeanChatServer``, at ~0.08 ms of CPU a request instead of ~0.2, since it shares the 2
  cores with the driver and stands for a server that answers from C or a GPU; both versions
  talk to the same server), ``--concurrency 32``: the issue's setting.

Each with the filler test on (the default: spaCy's parser reads every caption; since
``--parse-workers``, over HTTP in a parser process of its own, whose CPU and peak RSS are
reported apart, read from the child's reaped children) and off
(``--keep-fillers``), on ``--videos``; the ``--keep-fillers`` settings again on ``--large``
videos, where the fixed costs (imports, the closing merges) weigh less. Figures: videos/s, ms
of wall per video, CPU seconds of the child (user + system: less swayed by other jobs on the
machine than wall time; over HTTP counted until the CLI returns, so the benchmark's own read
of the status table after it is not the driver's) and, over HTTP, of the server, peak RSS.
Each run's merged ``captions.parquet`` is hashed: "captions identical" compares the two
versions' tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import add_worktree, machine, remove_worktree, stamp, write_results

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
ROOT = HERE.parent
WORK = HERE / "work" / "driver"
OUT = HERE / "results"
# main before the LLM client moved to asyncio + httpx (issue #39): the hand-written loop.
# Earlier comparisons are in git history of this file's results: 853cefd (32 video threads
# blocking on their sockets), 49d531a (before results through a queue, the client's own
# HTTP/1.1 framing, request slots on a SimpleQueue, shared prompt prefixes) and 52ce0ad (httpx
# on threads).
BASE = "3c67310"
TARGET_MS = 1.0  # issue #22 part 3: driver CPU a video over HTTP

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, src, out, fillers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
t0 = time.perf_counter()
if mode == "in-process":
    sys.path.insert(0, {bench!r})
    from bench_textonly import InstantLLM
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.caption.run import caption_run
    cfg = CaptionRunConfig(subtitles=src, caption=CaptionConfig(reject_fillers=not fillers))
    _, cap = caption_run(None, out, cfg, llm=InstantLLM(), progress=False)
    done = cap.done
else:
    from howtocap.cli import app
    args = ["caption", "--out", out, "--subtitles", src, "--llm-url", sys.argv[5],
            "--llm-model", "echo", "--concurrency", "32", "--quiet"]
    if fillers:
        args.append("--keep-fillers")
    try:
        app(args, standalone_mode=False)
    except SystemExit:
        pass
    mine = resource.getrusage(resource.RUSAGE_SELF)  # the CLI's, not the check's below
    from howtocap.engine.rundir import RunDir
    st = RunDir(out, create=False).table("status")
    done = int(((st["stage"] == "caption") & (st["status"] == "ok")).sum())
wall = time.perf_counter() - t0
import gc, howtocap
gc.collect()  # the caption stage's parser processes (--parse-workers) stop and are reaped
use = mine if mode != "in-process" else resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "done": done, "howtocap": howtocap.__file__,
                  "cpu_s": use.ru_utime + use.ru_stime, "rss_mb": use.ru_maxrss / 1024,
                  "children_cpu_s": kids.ru_utime + kids.ru_stime,
                  "children_rss_mb": kids.ru_maxrss / 1024}))
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(src_tree: Path, mode: str, data: Path, fillers: bool, url: str) -> dict[str, Any]:
    out = WORK / "run"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": f"{src_tree / 'src'}:{ROOT}"}
    code = CHILD.replace("{bench!r}", repr(str(HERE / "scale")))
    res = subprocess.run([sys.executable, "-c", code, mode, str(data), str(out),
                          "1" if fillers else "0", url], env=env, cwd=ROOT, text=True,
                         capture_output=True, check=False)
    if res.returncode:
        raise SystemExit(f"{mode} child failed:\n{res.stderr[-3000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    # The venv's editable install points at another checkout: only PYTHONPATH makes the child
    # run this tree's sources, so prove it did.
    if not Path(row.pop("howtocap")).resolve().is_relative_to((src_tree / "src").resolve()):
        raise SystemExit(f"{mode} child imported howtocap from outside {src_tree}")
    row["videos_per_s"] = row["done"] / row["wall_s"]
    row["ms_per_video"] = 1000 * row["wall_s"] / max(1, row["done"])
    row["cpu_ms_per_video"] = 1000 * row["cpu_s"] / max(1, row["done"])
    row["captions_sha"] = captions_digest(out / "captions.parquet")
    return row


def captions_digest(path: Path) -> str:
    """A hash of the merged captions table's values (column names, dtypes and rows)."""
    import hashlib

    import pandas as pd

    if not path.exists():
        return ""
    df = pd.read_parquet(path)
    text = "\n".join(f"{c}:{df[c].dtype}" for c in df.columns) + df.to_csv(index=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({(r["mode"], r["fillers"], r["videos"]) for r in rows},
                    key=lambda lab: (lab[2], lab[0], lab[1]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.38
    for ax, key, label in ((axes[0], "videos_per_s", "videos / s (higher is better)"),
                           (axes[1], "cpu_ms_per_video",
                            "driver CPU ms / video (lower is better)")):
        for k, version in enumerate(("before", "after")):
            ys = [next(r[key] for r in rows if r["version"] == version
                       and (r["mode"], r["fillers"], r["videos"]) == lab) for lab in labels]
            ax.bar([i + (k - 0.5) * width for i in range(len(labels))], ys, width,
                   label=version)
        ax.set_xticks(range(len(labels)),
                      [f"{m}, {n:,}\n{'--keep-fillers' if f else 'filler test on'}"
                       for m, f, n in labels], fontsize=7)
        ax.set_ylabel(label)
        ax.legend()
    axes[1].axhline(TARGET_MS, color="k", lw=0.8, ls="--")
    fig.suptitle("Text-only captioning, instant LLM: the driver's own speed and CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, default=1000)
    ap.add_argument("--large", type=int, default=10000,
                    help="videos of the --keep-fillers runs again (0: none)")
    ap.add_argument("--base", default=BASE)
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "src")]
    from benchmarks.scale.bench_textonly import write_caption_json

    WORK.mkdir(parents=True, exist_ok=True)
    sizes = [args.videos] + ([args.large] if args.large else [])
    files = {}
    for n in sizes:
        files[n] = WORK / f"caption-{n}.json"
        if not files[n].exists():
            write_caption_json(files[n], n)
    trees = {"before": add_worktree(args.base, WORK), "after": ROOT}
    server = subprocess.Popen([sys.executable, "-m", "tests.chat_server", "--delay", "0",
                               "--keep-alive"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    plan = [(args.videos, mode, fillers) for mode in ("in-process", "http")
            for fillers in (True, False)]
    plan += [(args.large, mode, True) for mode in ("in-process", "http")] if args.large else []
    try:
        url = (server.stdout.readline() if server.stdout else "").strip()
        for n, mode, fillers in plan:
            for version, tree in trees.items():  # the two versions back to back
                s0 = cpu_seconds(server.pid)
                row = child(tree, mode, files[n], fillers, url)
                if mode == "http":
                    row["server_cpu_s"] = cpu_seconds(server.pid) - s0
                rows.append({"version": version, "mode": mode, "fillers": fillers,
                             "videos": n, **row})
                print(f"{version:6s} {mode:10s} {n:6d} keep_fillers={fillers!s:5s} "
                      f"{row['videos_per_s']:7.1f} videos/s {row['cpu_s']:6.1f} CPU s "
                      f"{row['rss_mb']:6.0f} MB", flush=True)
    finally:
        server.kill()
        server.wait()
        remove_worktree(trees["before"])
    load1 = os.getloadavg()

    def get(version: str, mode: str, fillers: bool, n: int = args.videos) -> dict[str, Any]:
        return next(r for r in rows if (r["version"], r["mode"], r["fillers"], r["videos"]) ==
                    (version, mode, fillers, n))

    def entry(mode: str, fillers: bool, n: int) -> dict[str, Any]:
        b, a = get("before", mode, fillers, n), get("after", mode, fillers, n)
        out = {"before": round(b["videos_per_s"], 1), "after": round(a["videos_per_s"], 1),
               "speedup": round(a["videos_per_s"] / b["videos_per_s"], 2),
               "after_ms_per_video": round(a["ms_per_video"], 2),
               "before_cpu_s": round(b["cpu_s"], 2), "after_cpu_s": round(a["cpu_s"], 2),
               "before_cpu_ms_per_video": round(b["cpu_ms_per_video"], 3),
               "after_cpu_ms_per_video": round(a["cpu_ms_per_video"], 3),
               "captions_identical": bool(a["captions_sha"])
               and a["captions_sha"] == b["captions_sha"],
               "after_parse_cpu_s": round(a["children_cpu_s"], 2),
               "after_parse_rss_mb": round(a["children_rss_mb"])}
        if mode == "http":
            out["before_server_cpu_s"] = round(b["server_cpu_s"], 2)
            out["after_server_cpu_s"] = round(a["server_cpu_s"], 2)
        return out

    # keys: the mode on --videos (as before), with "_<n>" on --large
    summary = {f"{mode}{'_keep_fillers' if fillers else ''}{'' if n == args.videos else f'_{n}'}":
               entry(mode, fillers, n) for n, mode, fillers in plan}
    key = f"http_keep_fillers_{args.large}" if args.large else "http_keep_fillers"
    target = {"setting": key, "cpu_ms_per_video": summary[key]["after_cpu_ms_per_video"],
              "limit_ms": TARGET_MS,
              "met": summary[key]["after_cpu_ms_per_video"] < TARGET_MS}
    target["verdict"] = "met" if target["met"] else "not met"  # the docs' word for it
    if args.large:  # the CPU each video adds, the fixed costs (imports, merges) left out
        for version in ("before", "after"):
            lo, hi = (get(version, "http", True, n) for n in (args.videos, args.large))
            target[f"{version}_marginal_ms_per_video"] = round(
                1000 * (hi["cpu_s"] - lo["cpu_s"]) / (args.large - args.videos), 3)
    result = {"machine": machine(),
              "load_avg": [round(load0[0], 2), round(load1[0], 2)], "videos": args.videos,
              "large": args.large,
              "base": args.base, "rows": rows, "summary": summary, "target": target,
              "measured_at": stamp()}
    lines = ["# The driver's own cost per video (text-only, instant LLM)", "",
             f"{result['machine']}; load average {load0[0]:.1f} → {load1[0]:.1f} (other jobs "
             f"add time); HowTo100M-style videos (bench_textonly's generator); before = commit "
             f"{args.base}, after = this tree, measured back to back in one run; CPU s: the "
             "driver process (server: the HTTP server's own, on the same 2 cores; parser: the "
             "filler test's worker processes, `--parse-workers`, which the after tree starts "
             "with --llm-url: two on these 2 cores). How to read: benchmarks/bench_driver.py "
             "docstring.", "",
             "| setting | videos | before videos/s | after videos/s | speedup | after ms/video "
             "| before CPU s | after CPU s | **driver CPU ms/video before → after** "
             "| server CPU s before → after | after parser CPU s | after peak RSS (parser) "
             "| captions identical |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, mode, fillers in sorted(plan, key=lambda p: (p[0], p[1], not p[2])):
        b, a = get("before", mode, fillers, n), get("after", mode, fillers, n)
        server_cpu = f"{b['server_cpu_s']:.1f} → {a['server_cpu_s']:.1f}" \
            if mode == "http" else ""
        lines.append(f"| {mode}, {'--keep-fillers' if fillers else 'filler test on'} | {n:,} | "
                     f"{b['videos_per_s']:.1f} | {a['videos_per_s']:.1f} | "
                     f"{a['videos_per_s'] / b['videos_per_s']:.2f}x | "
                     f"{a['ms_per_video']:.1f} | {b['cpu_s']:.1f} | {a['cpu_s']:.1f} | "
                     f"{b['cpu_ms_per_video']:.2f} → **{a['cpu_ms_per_video']:.2f}** | "
                     f"{server_cpu} | {a['children_cpu_s']:.1f} | {a['rss_mb']:.0f} MB"
                     + (f" ({a['children_rss_mb']:.0f} MB)" if a["children_cpu_s"] else "")
                     + f" | {'yes' if a['captions_sha'] == b['captions_sha'] else 'NO'} |")
    lines += ["", f"**Target (issue #22 part 3): driver CPU < {TARGET_MS:g} ms a video over HTTP "
              f"(`--keep-fillers`, {target['setting']}): {target['cpu_ms_per_video']:.2f} ms, "
              f"{'met' if target['met'] else 'not met'}.** Also: ≥ 1,000 videos/s "
              "in-process, ≥ 300 over HTTP, on 2 cores.", ""]
    if args.large:
        lines += [f"The CPU each video adds over HTTP (`--keep-fillers`, the {args.large:,}-video "
                  f"run's CPU less the {args.videos:,}-video run's, over the videos between: the "
                  "fixed costs, imports and the closing merges, left out): "
                  f"{target['before_marginal_ms_per_video']:.2f} → "
                  f"**{target['after_marginal_ms_per_video']:.2f}** ms.", ""]
    write_results("driver", result, lines)
    plot(rows, OUT / "driver.png")


if __name__ == "__main__":
    main()
