"""Many LLM servers from one driver: throughput with 1, 2 and 3 servers, and one server killed.

Run: .venv/bin/python benchmarks/scale/bench_servers.py [--videos 120 --delay 0.5]
     -> benchmarks/results/servers.{json,md,png}

Each server is ``python -m tests.support.chat_server --delay D`` in its own process (a real HTTP
server on 127.0.0.1 that answers every request after D seconds, deterministically from the prompt),
so the servers, not the driver, are the limit: with ``--concurrency C`` per server, N servers can
answer at most N*C/D requests a second. The driver is the library call ``howtocap caption`` makes
(``caption_run`` on a HowTo100M-style caption.json, text-only).

* scaling: the same videos captioned with 1, 2 and 3 servers (videos/s, and the ideal N*C/D);
* kill: 3 servers, one SIGKILLed a third of the clean 3-server run's time into the run:
  videos lost, failed, and whether the captions equal the clean 3-server run's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import ROOT, WORK, machine, write_results

sys.path[:0] = [str(ROOT), str(ROOT / "src")]
WORK = WORK / "servers"

from benchmarks.scale.bench_textonly import write_caption_json  # noqa: E402

from howtocap.caption.config import CaptionRunConfig  # noqa: E402
from howtocap.caption.run import caption_run  # noqa: E402
from howtocap.engine.rundir import RunDir  # noqa: E402
from howtocap.llm import LLMOptions  # noqa: E402


@contextmanager
def servers(n: int, delay: float) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [subprocess.Popen([sys.executable, "-m", "tests.support.chat_server",
                               "--delay", str(delay)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        for p in procs:
            p.url = p.stdout.readline().strip()  # type: ignore[attr-defined,union-attr]
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def caption(src: Path, out: Path, urls: list[str], concurrency: int) -> dict[str, Any]:
    if out.exists():
        import shutil

        shutil.rmtree(out)
    cfg = CaptionRunConfig(subtitles=str(src), llm=LLMOptions(url=urls, model="echo",
                                                            concurrency=concurrency))
    t0 = time.perf_counter()
    _, cap = caption_run(None, out, cfg, progress=False)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "done": cap.done, "failed": len(cap.failed),
            "videos_per_s": round(cap.done / wall, 2)}


def captions_of(out: Path) -> Any:
    cols = ["video_id", "start", "end", "text"]
    return RunDir(out).table("captions")[cols].sort_values(cols).reset_index(drop=True)


def run_kill(src: Path, out: Path, n_videos: int, delay: float, concurrency: int,
             after_s: float) -> dict[str, Any]:
    """3 servers; the first is SIGKILLed ``after_s`` into the run (a third of the clean
    3-server run's time: finished videos are committed by batch, so they cannot be counted
    while the run goes)."""
    with servers(3, delay) as procs:
        urls = [p.url for p in procs]  # type: ignore[attr-defined]
        ended = threading.Event()

        def killer() -> None:
            if not ended.wait(after_s):
                os.kill(procs[0].pid, signal.SIGKILL)

        watcher = threading.Thread(target=killer, daemon=True)
        watcher.start()
        t0 = time.perf_counter()
        res = caption(src, out, urls, concurrency)
        killed = time.perf_counter() - t0 > after_s  # the run outlived the server
        ended.set()
    return {**res, "killed_after_s": round(after_s, 2), "killed_mid_run": killed,
            "lost": n_videos - res["done"]}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    n = [r["servers"] for r in rows]
    ax.plot(n, [r["videos_per_s"] for r in rows], "o-", label="measured")
    ax.plot(n, [r["ideal_videos_per_s"] for r in rows], "--", color="grey",
            label="servers' limit")
    ax.set_xlabel("LLM servers (one driver)")
    ax.set_ylabel("videos / s")
    ax.set_xticks(n)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--videos", type=int, default=120)
    ap.add_argument("--delay", type=float, default=0.5, help="each server's seconds a request")
    ap.add_argument("--concurrency", type=int, default=2, help="requests in flight per server")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / f"caption_{args.videos}.json"
    if not src.exists():
        write_caption_json(src, args.videos)

    rows = []
    for n in (1, 2, 3):
        with servers(n, args.delay) as procs:
            res = caption(src, WORK / f"run{n}", [p.url for p in procs],  # type: ignore
                          args.concurrency)
        if n == 1:  # requests = LLM blocks (one each: the echo server always parses)
            caps = RunDir(WORK / "run1").table("captions")
            blocks = int(caps.groupby("video_id")["block"].nunique().sum())
        ideal = n * args.concurrency / args.delay * args.videos / blocks
        rows.append({"servers": n, **res, "requests": blocks,
                     "ideal_videos_per_s": round(ideal, 2)})
        print(f"{n} server(s): {res['videos_per_s']} videos/s (limit {ideal:.2f})", flush=True)
    base = rows[0]["videos_per_s"]
    for r in rows:
        r["speedup"] = round(r["videos_per_s"] / base, 2)
        r["of_limit"] = round(r["videos_per_s"] / r["ideal_videos_per_s"], 3)

    kill = run_kill(src, WORK / "kill", args.videos, args.delay, args.concurrency,
                    rows[2]["wall_s"] / 3)
    kill["captions_equal_clean_run"] = bool(captions_of(WORK / "kill").equals(
        captions_of(WORK / "run3")))
    print(f"kill: {kill}", flush=True)

    result = {"videos": args.videos, "delay_s": args.delay, "concurrency": args.concurrency,
              "machine": machine(),
              "scaling": rows, "by_servers": {str(r["servers"]): r for r in rows},
              "kill": kill}
    lines = ["# Many LLM servers from one driver", "",
             f"{args.videos} videos (text-only caption.json), each server answers after "
             f"{args.delay} s, {args.concurrency} requests in flight per server "
             f"({result['machine']}).", "",
             "| servers | videos/s | servers' limit | of limit | speedup | failed |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['servers']} | {r['videos_per_s']} | {r['ideal_videos_per_s']} | "
              f"{r['of_limit']:.0%} | {r['speedup']}x | {r['failed']} |" for r in rows]
    lines += ["", f"One of 3 servers SIGKILLed {kill['killed_after_s']} s into the run "
              f"(mid-run: {kill['killed_mid_run']}): "
              f"{kill['done']} done, {kill['lost']} lost, {kill['failed']} failed, "
              f"{kill['videos_per_s']} videos/s; captions equal the clean run's: "
              f"{kill['captions_equal_clean_run']}.", ""]
    write_results("servers", result, lines, plot=lambda png: plot(rows, png))


if __name__ == "__main__":
    main()
