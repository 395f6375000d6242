"""The filler test's parse (``caption.filler``) in the driver's process vs in parser processes
(``--parse-workers``): captions judged per second, the measure of how many cores the
default filler test needs to keep up with an LLM cluster.

Run: .venv/bin/python benchmarks/speed/bench_parse.py [--videos 200 --workers 0 1 2]
     -> benchmarks/results/parse.{json,md}

Captions: every labelled caption and narration line of ``benchmarks/data`` (the texts the
filler rules are judged on), dealt out 40 a "video" (a HowTo100M video's captions, about one
per ASR line) and sent by 32 threads at once, as a caption run over HTTP does with
``--concurrency 32``. The verdict table is bypassed (every text is parsed), so the figure is
the parse, not the cache. 0 workers: in this process, through the batching the driver uses
(threads waiting at once are parsed in one ``nlp.pipe`` call). The machine's other jobs take
cores too: its load average is recorded, and the parse's CPU a caption (this process and its
parser processes, during the timed part) is the steadier figure.

The first row is the baseline of the same run: in this process with spaCy's own Matcher in the
attribute ruler instead of ``nlp.RuleIndex`` (its lookups find the same matches; the verdicts
of every row are compared).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import DATA, ROOT, machine, stamp, write_results

PER_VIDEO = 40
THREADS = 32


def texts() -> list[str]:
    data = DATA
    caps = json.loads((data / "filler_captions.json").read_text())["captions"]
    spoken = json.loads((data / "spoken_youcook2.json").read_text())["videos"]
    return [str(c[0]) for c in caps] + [str(ln["text"]) for v in spoken for ln in v["lines"]]


def _workers_cpu(pool: Any) -> float:
    """CPU seconds the pool's live parser processes have used so far (/proc, Linux)."""
    if pool is None:
        return 0.0
    total = 0
    for w in pool._all:
        fields = Path(f"/proc/{w.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


def measure(workers: int, videos: list[list[str]], matcher: bool = False) -> dict[str, Any]:
    from howtocap.caption.filler import _COMBINE, ParserPool, load_parser

    t0 = time.perf_counter()
    pool = ParserPool(workers) if workers else None
    nlp = None if pool else load_parser()
    start_s = time.perf_counter() - t0
    ruler = nlp.get_pipe("attribute_ruler") if nlp is not None else None
    index = ruler.__dict__.pop("match") if matcher and ruler is not None else None

    def judge(batch: list[str]) -> list[str]:
        return pool.verdicts(batch) if pool else _COMBINE(nlp, batch, 256)

    judge(videos[0])  # warm: the first parse of a pipeline allocates its buffers
    load0 = os.getloadavg()[0]
    c0, k0 = time.process_time(), _workers_cpu(pool)
    t1 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as ex:
        got = list(ex.map(judge, videos))
    wall = time.perf_counter() - t1
    own_cpu = time.process_time() - c0
    workers_cpu = _workers_cpu(pool) - k0  # the timed part only: not loading the pipeline
    if pool:
        pool.close()
    if index is not None:
        ruler.match = index
    n = sum(len(v) for v in videos)
    assert sum(len(g) for g in got) == n
    return {"workers": workers, "label": f"{workers}, spaCy's Matcher" if matcher
            else str(workers), "start_s": round(start_s, 2), "wall_s": round(wall, 2),
            "videos_per_s": round(len(videos) / wall, 1),
            "captions_per_s": round(n / wall),
            "driver_cpu_ms_per_video": round(1000 * own_cpu / len(videos), 2),
            "parse_cpu_ms_per_caption": round(1000 * (own_cpu + workers_cpu) / n, 3),
            "load_avg": round(load0, 2), "verdicts": got}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    pool_texts = texts()
    videos = [[pool_texts[(v * PER_VIDEO + i) % len(pool_texts)] for i in range(PER_VIDEO)]
              for v in range(args.videos)]
    base = measure(0, videos, matcher=True)
    rows = [base, *(measure(w, videos) for w in args.workers)]
    want = base["verdicts"]
    for r in rows:
        if r.pop("verdicts") != want:
            raise SystemExit(f"{r['label']} workers gave other verdicts than "
                             f"{base['label']}")
        r["speedup"] = round(r["videos_per_s"] / base["videos_per_s"], 2)
    index0 = rows[1]
    result = {"machine": machine(),
              "videos": args.videos, "captions_per_video": PER_VIDEO, "threads": THREADS,
              "distinct_texts": len(set(pool_texts)),
              "rows": rows, "by_workers": {str(r["workers"]): r for r in rows[1:]},
              "matcher": base,
              "rule_index_cpu_ratio": round(base["parse_cpu_ms_per_caption"]
                                            / index0["parse_cpu_ms_per_caption"], 2),
              "measured_at": stamp()}
    lines = ["# The filler test's parse: in the driver vs parser processes", "",
             f"{result['machine']}; {args.videos} videos × {PER_VIDEO} captions from "
             f"{THREADS} threads (the labelled texts of benchmarks/data, every one parsed: "
             "no verdict table). Same verdicts in every row (checked). How to read: "
             "benchmarks/speed/bench_parse.py docstring.", "",
             "| --parse-workers | videos/s | captions/s | vs the first row | driver CPU ms a "
             "video | parse CPU ms a caption | start (s) | load avg |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['videos_per_s']:.1f} | {r['captions_per_s']:,} | "
                     f"{r['speedup']:.2f}x | {r['driver_cpu_ms_per_video']:.2f} | "
                     f"{r['parse_cpu_ms_per_caption']:.3f} | "
                     f"{r['start_s']:.1f} | {r['load_avg']:.1f} |")
    lines += ["", "0 = parsed in the driver's process (the only choice before `--parse-workers`)."
              " The first row: the same, with spaCy's Matcher in the attribute ruler (the "
              f"baseline; the rule index parses with {result['rule_index_cpu_ratio']:.2f}x less "
              "CPU a caption). Parse CPU: this process and its parser processes. Start: "
              "loading the pipeline (in the workers: without torch, which thinc would import).",
              ""]
    write_results("parse", result, lines)


if __name__ == "__main__":
    main()
