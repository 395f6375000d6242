"""A caption run against a bad LLM server: faults injected vs survived, videos lost, wall time
against a fault-free run in the same session, and how fast a down server stops the run.

Run: .venv/bin/python benchmarks/robustness/bench_faults.py [--videos 24]
     -> benchmarks/results/faults.{json,md,png}

Every scenario is the real CLI, ``howtocap caption --subtitles caption.json --out DIR
--llm-url URL`` (a child process, default client settings except ``--llm-timeout``), against
``tests/support/fault_server.py``: a real HTTP server on 127.0.0.1 in this process that answers
deterministically, so a run that survived its faults has captions identical to the clean run.

* clean: no faults (the baseline);
* faults: the first request of every prompt gets a fault, cycling HTTP 500, 429 +
  Retry-After: 1, 503 + Retry-After: 1, a timeout (answers after 4 s; the client waits 2 s),
  invalid JSON, JSON without ``choices``, a reply without timestamps, a dropped connection;
* closed port: nothing listens (the circuit breaker must stop the run, marking nothing failed),
  then a re-run against a live server resumes;
* dies mid-run: the server answers 20 requests, then is gone; then a re-run resumes;
* hung: the server accepts every request and never answers in time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import ROOT, WORK, load_avg, machine_info, md_table, write_results

sys.path.insert(0, str(ROOT))  # tests.support.fault_server

import pandas as pd  # noqa: E402
from tests.support.fault_server import fault_server  # noqa: E402

from howtocap.engine.rundir import RunDir  # noqa: E402

WORK = WORK / "faults"
FAULTS = ["500", "429", "503", "timeout", "badjson", "nochoices", "notimestamp", "reset"]
WORDS = ["first", "we", "take", "the", "eggs", "and", "crack", "them", "into", "bowl", "then",
         "whisk", "with", "fork", "until", "smooth", "add", "salt", "pepper", "pan", "heat",
         "oil", "butter", "cook", "minutes", "flip", "over", "serve", "plate", "garnish"]
TIMEOUT = 2.0  # --llm-timeout for every run; the "timeout" fault stalls 2x longer


def write_caption_json(path: Path, n_videos: int, seed: int = 0) -> None:
    """HowTo100M's shape, 30-50 lines of 5-12 words a video: one or two 200-word blocks."""
    rng = random.Random(seed)
    data = {}
    for i in range(n_videos):
        t, start, end, text = 0.0, [], [], []
        for _ in range(rng.randint(30, 50)):
            d = rng.uniform(1.5, 4.0)
            start.append(round(t, 2))
            end.append(round(t + d, 2))
            text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))))
            t += d + 0.5
        data[f"vid{i:03d}"] = {"start": start, "end": end, "text": text}
    path.write_text(json.dumps(data))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(src: Path, out: Path, url: str) -> dict[str, Any]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "howtocap.cli", "caption", "--subtitles", str(src), "--out",
           str(out), "--llm-url", url, "--llm-timeout", str(TIMEOUT)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    seconds = time.perf_counter() - t0
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    return {"exit": res.returncode, "seconds": round(seconds, 2), "error_lines": errors,
            "traceback": "Traceback" in res.stderr, "load": round(os.getloadavg()[0], 1)}


def breaker_seconds(url: str) -> dict[str, Any]:
    """In-process, default client settings, 4 threads asking at once (as the caption stage
    does): seconds until every thread has been told the server is gone."""
    from concurrent.futures import ThreadPoolExecutor

    from howtocap.errors import ServiceUnavailable
    from howtocap.llm.base import GenerationConfig
    from howtocap.llm.openai import OpenAIChatLLM

    llm = OpenAIChatLLM(url, model="m", timeout=TIMEOUT)
    msg = [{"role": "user", "content": "0s: stir"}]

    def ask(_: int) -> str:
        try:
            llm.chat(msg, GenerationConfig())
            return "answered"
        except ServiceUnavailable:
            return "stopped"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        outcomes = Counter(pool.map(ask, range(4)))
    seconds = time.perf_counter() - t0
    llm.close()  # its aiohttp session: unclosed, aiohttp warns at exit
    return {"seconds": round(seconds, 2), "outcomes": dict(outcomes),
            "attempts": llm.stats["attempts"]}


def run_state(out: Path, n: int) -> dict[str, Any]:
    """What the run directory holds: statuses by stage, captioned videos, leftover claims."""
    rd = RunDir(out, create=False)
    status = rd.table("status")
    cap = status[status["stage"] == "caption"]
    claims = list((out / "claims").rglob("*.lock")) if out.exists() else []
    return {"caption_ok": int((cap["status"] == "ok").sum()),
            "caption_failed": int((cap["status"] == "error").sum()),
            "caption_pending": n - len(cap), "failed_any_stage": int((status["status"] ==
                                                                       "error").sum()),
            "claims_left": len(claims)}


def captions(out: Path) -> pd.DataFrame:
    """The caption rows themselves (a per-row config id may name the server's port)."""
    df = RunDir(out, create=False).table("captions")
    cols = ["video_id", "start", "end", "text", "source", "block", "model"]
    return df[cols].sort_values(["video_id", "start", "text"]).reset_index(drop=True)


def rerun_same_url(src: Path, out: Path, port: int, n: int, ref: pd.DataFrame
                   ) -> dict[str, Any]:
    """The same command again against a healthy server at the same URL (the settings check
    needs the same URL): its state and whether its captions equal the clean run's."""
    with fault_server(port=port) as srv:
        again = run_cli(src, out, srv.url)
        again["requests"] = srv.requests
    again.update(run_state(out, n))
    again["identical_to_clean"] = bool(captions(out).equals(ref))
    return again


def fresh(name: str) -> Path:
    out = WORK / name
    shutil.rmtree(out, ignore_errors=True)
    return out


def survived(history: dict[str, list[str]]) -> tuple[Counter[str], Counter[str]]:
    """Per fault kind: injected, and followed by a clean answer for the same prompt."""
    injected, ok = Counter(), Counter()
    for outcomes in history.values():
        for i, kind in enumerate(outcomes):
            if kind in ("ok", "dead"):
                continue
            injected[kind] += 1
            ok[kind] += int("ok" in outcomes[i + 1:])
    return injected, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--videos", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2, help="clean/faulty runs, best kept")
    args = ap.parse_args()
    n = args.videos
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "caption.json"
    write_caption_json(src, n)
    load0 = os.getloadavg()
    t_all = time.perf_counter()
    res: dict[str, Any] = {"videos": n, "llm_timeout": TIMEOUT}

    # the floor every scenario pays: starting the interpreter and importing the CLI
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "howtocap.cli", "--help"], capture_output=True,
                   check=True)
    res["cli_startup_s"] = round(time.perf_counter() - t0, 2)

    # clean and faulty runs alternate, best of --repeats each (other jobs only add time)
    clean_s, faulty_s = [], []
    for _ in range(args.repeats):
        with fault_server() as srv:
            clean = run_cli(src, fresh("clean"), srv.url)
            clean["requests"] = srv.requests
        clean_s.append(clean["seconds"])
        with fault_server(faults=FAULTS, stall=2 * TIMEOUT, retry_after="1") as srv:
            faulty = run_cli(src, fresh("faults"), srv.url)
            faulty["requests"] = srv.requests
            injected, ok = survived(srv.history)
            faulty["prompts"] = len(srv.history)
        faulty_s.append(faulty["seconds"])
    clean["seconds"], clean["all_seconds"] = min(clean_s), clean_s
    faulty["seconds"], faulty["all_seconds"] = min(faulty_s), faulty_s
    clean.update(run_state(WORK / "clean", n))
    ref = captions(WORK / "clean")
    clean["captions"] = len(ref)
    res["clean"] = clean
    print("clean", clean, flush=True)
    faulty.update(run_state(WORK / "faults", n))
    got = captions(WORK / "faults")
    faulty["injected"] = dict(sorted(injected.items()))
    faulty["survived"] = dict(sorted(ok.items()))
    faulty["identical_to_clean"] = bool(got.equals(ref))
    faulty["videos_lost"] = int(ref["video_id"].nunique() - got["video_id"].nunique())
    res["faults"] = faulty
    print("faults", faulty, flush=True)

    out = fresh("closed")
    port = closed_port()
    closed = run_cli(src, out, f"http://127.0.0.1:{port}/v1")
    closed.update(run_state(out, n))
    again = rerun_same_url(src, out, port, n, ref)
    res["closed_port"] = {"stop": closed, "rerun": again}
    print("closed port", res["closed_port"], flush=True)

    out = fresh("dies")
    with fault_server(die_after=20) as srv:
        dies = run_cli(src, out, srv.url)
        dies["answered_before_dying"] = srv.answered
        port = srv.httpd.server_address[1]
    dies.update(run_state(out, n))
    again = rerun_same_url(src, out, port, n, ref)
    res["dies_mid_run"] = {"stop": dies, "rerun": again}
    print("dies mid-run", res["dies_mid_run"], flush=True)

    out = fresh("hung")
    with fault_server(stall=3 * TIMEOUT) as srv:
        srv.plan = ["timeout"] * 10_000
        hung = run_cli(src, out, srv.url)
        hung["requests"] = srv.requests
    hung.update(run_state(out, n))
    res["hung"] = hung
    print("hung", hung, flush=True)

    res["breaker_closed_port"] = breaker_seconds(f"http://127.0.0.1:{closed_port()}/v1")
    with fault_server(stall=3 * TIMEOUT) as srv:
        srv.plan = ["timeout"] * 10_000
        res["breaker_hung"] = breaker_seconds(srv.url)
    print("breaker", res["breaker_closed_port"], res["breaker_hung"], flush=True)

    res["machine"] = machine_info(load_avg_start=[round(x, 1) for x in load0],
                                  load_avg_end=load_avg())
    res["total_s"] = round(time.perf_counter() - t_all, 1)
    write_results("faults", res, report(res), plot=lambda png: plot(res, png))


def report(r: dict[str, Any]) -> str:
    c, f = r["clean"], r["faults"]
    cp, dm, hg = r["closed_port"], r["dies_mid_run"], r["hung"]
    bc, bh = r["breaker_closed_port"], r["breaker_hung"]
    m = r["machine"]
    inj = f["injected"]
    total_inj, total_ok = sum(inj.values()), sum(f["survived"].values())
    rows = "\n".join(md_table(["fault", "injected", "survived"],
                               [*([k, inj[k], f["survived"].get(k, 0)] for k in inj),
                                ["**total**", f"**{total_inj}**", f"**{total_ok}**"]],
                               align="lrr"))

    def stop_row(name: str, s: dict[str, Any], rerun: dict[str, Any] | None) -> str:
        re_txt = (f"{rerun['caption_ok']}/{r['videos']} ok, "
                  f"{'identical' if rerun['identical_to_clean'] else 'DIFFERENT'}"
                  if rerun else "-")
        return (f"| {name} | {s['exit']} | {s['seconds']:.1f} | {s['caption_ok']} | "
                f"{s['caption_failed']} | {s['caption_pending']} | {s['claims_left']} | "
                f"{re_txt} |")

    line = (cp["stop"]["error_lines"] or ["(none)"])[0]
    return f"""# LLM server faults (`howtocap caption --subtitles … --llm-url …`)

{m['platform']}, {m['cpus']} cores, Python {m['python']}; load average {m['load_avg_start'][0]}
at start, {m['load_avg_end'][0]} at the end (other jobs on the cores inflate the times; the
*differences* between scenarios are what the numbers show). Every
scenario is the real CLI in a child process (its start-up alone: {r['cli_startup_s']:.1f} s)
against a real HTTP server on 127.0.0.1 (`tests/support/fault_server.py`), **{r['videos']} videos**
from a HowTo100M-style caption.json, default client settings (4 requests in flight, 3
retries, backoff 1 s x 2^n with jitter, breaker after 8 outages) and `--llm-timeout
{r['llm_timeout']:g}`.

## Faults on the first request of every prompt

{rows}

| run | exit | wall s | requests | captions | videos lost | failed |
|---|---:|---:|---:|---:|---:|---:|
| clean (baseline, best of {len(c['all_seconds'])}) | {c['exit']} | {c['seconds']:.1f} \
| {c['requests']} | {c['captions']} | - | {c['caption_failed']} |
| every prompt faulted once (best of {len(f['all_seconds'])}) | {f['exit']} \
| {f['seconds']:.1f} | {f['requests']} | - | **{f['videos_lost']}** | {f['caption_failed']} |

Captions of the faulty run identical to the clean run: **{f['identical_to_clean']}**.
Wall time {f['seconds'] / c['seconds']:.1f}x the clean run: the cost is the waiting the
faults ask for (Retry-After 1 s, a {r['llm_timeout']:g} s timeout, 1-2 s backoff), overlapped
4 requests at a time. "Survived" = the same prompt later got a clean answer (a reply without
timestamps is asked again by the captioner; everything else by the client).

## A server that is not there

| case | exit | seconds to stop | caption ok | marked failed | pending | claims left | re-run |
|---|---:|---:|---:|---:|---:|---:|---|
{stop_row("closed port", cp['stop'], cp['rerun'])}
{stop_row("dies after 20 answers", dm['stop'], dm['rerun'])}
{stop_row("hung (never answers)", hg, None)}

The one line (exit 75, EX_TEMPFAIL): `{line}`

"Seconds to stop" is the whole CLI run (start-up, reading the caption.json, the subtitles
stage). The breaker itself, in-process with the default client and 4 requests at once: a
closed port is declared gone after {bc['seconds']:.1f} s ({bc['attempts']} attempts), a hung
server after {bh['seconds']:.1f} s ({bh['attempts']} attempts of `--llm-timeout
{r['llm_timeout']:g}`).

What the defaults can and cannot do: a server that answers at all, however badly (5xx, 429,
garbage, dropped connections, no timestamps), costs time but no video. A server that is gone
stops the run within seconds, marks nothing failed and leaves no claim, and the re-run does
only what is left. Not covered: a server that answers
well-formed but wrong captions (the parser and the align filter judge those), and a hung
server with a long `--llm-timeout` (120 s by default) takes 2 x that to be declared gone.
Total benchmark time: {r['total_s']:.0f} s.
"""


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["clean", "faults", "closed port", "dies mid-run", "hung", "CLI start-up"]
    secs = [r["clean"]["seconds"], r["faults"]["seconds"], r["closed_port"]["stop"]["seconds"],
            r["dies_mid_run"]["stop"]["seconds"], r["hung"]["seconds"], r["cli_startup_s"]]
    colors = ["tab:green", "tab:orange", "tab:red", "tab:red", "tab:red", "tab:gray"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.barh(names[::-1], secs[::-1], color=colors[::-1])
    for i, s in enumerate(secs[::-1]):
        ax.text(s, i, f" {s:.1f} s", va="center", fontsize=8)
    ax.set_xlabel("wall seconds (CLI child process)")
    ax.set_title(f"{r['videos']} videos: full runs vs time to stop on a gone server "
                 f"(load {r['machine']['load_avg_start'][0]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
