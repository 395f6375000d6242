"""Text-only captioning of a HowTo100M-style caption.json: peak memory and videos/s of our own
overhead (the LLM answers instantly), against the old whole-file ``json.load`` in the same run.

Run: .venv/bin/python benchmarks/scale/bench_textonly.py [--videos 100000]
     -> benchmarks/results/textonly.{json,md}
The synthetic caption.json (20-60 lines a video, 5-15 words a line, as HowTo100M's ASR) is
written once, streaming, to benchmarks/work/ (git-ignored) and reused.

Each measurement runs in its own child process, so its peak RSS (``ru_maxrss``) is its own:
* ``json.load``: the old ``SubtitleSource`` (the whole file as Python objects, keys as str);
* ``reader``: ``SubtitleSource`` streaming the file into Parquet, then every video read back;
* ``caption_run``: the full library call ``caption_run(None, DIR, CaptionRunConfig(subtitles=
  SRC), llm=InstantLLM())`` — conversion, the stages a shard at a time (chunk and shard
  files, status files; no merge) — with phases timed by wrapping the functions that run them;
* ``import``: the same imports and nothing else, the floor every process pays.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import WORK, load_results, machine, md_table, peak_rss_mb, write_md, write_results

WORK = WORK / "textonly"
WORDS = ["first", "we", "take", "the", "eggs", "and", "crack", "them", "into", "bowl", "then",
         "whisk", "with", "fork", "until", "smooth", "add", "salt", "pepper", "pan", "heat",
         "oil", "butter", "cook", "minutes", "flip", "over", "serve", "plate", "garnish", "cut",
         "slice", "onion", "garlic", "stir", "pour", "water", "boil", "simmer", "now", "you",
         "want", "to", "make", "sure", "that", "it", "is", "really", "nice", "okay", "so", "let",
         "me", "show", "how", "this", "goes"]
REPLY_TIME = re.compile(r"^(\d+)s: ", re.M)


def write_caption_json(path: Path, n_videos: int, seed: int = 0) -> None:
    """``{video_id: {start, end, text}}`` one video at a time (the generator is no memory hog)."""
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write("{")
        for i in range(n_videos):
            t, start, end, text = rng.uniform(0, 5), [], [], []
            for _ in range(rng.randint(20, 60)):
                d = rng.uniform(1.5, 6.0)
                start.append(round(t, 2))
                end.append(round(t + d, 2))
                text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))))
                t += d + rng.uniform(0.0, 1.0)
            vid = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
                                     "456789_-") for _ in range(11))  # YouTube-like ids
            fh.write(("," if i else "") + json.dumps(f"{vid}{i}") + ":"
                     + json.dumps({"start": start, "end": end, "text": text}))
        fh.write("}")
    tmp.rename(path)


class InstantLLM:
    """The LLM protocol, answering at once with one valid caption per block."""

    name = "instant"

    def chat(self, messages: list[dict[str, str]], gen: Any) -> str:
        m = REPLY_TIME.search(messages[-1]["content"])
        t = m.group(1) if m else "0"
        return f"{t}s: Do step {t} of the recipe."  # distinct, so no caption is a duplicate

    def chat_many(self, batch: Sequence[list[dict[str, str]]], gen: Any) -> list[str | Exception]:
        return [self.chat(m, gen) for m in batch]


# -- children ------------------------------------------------------------------------------
def child_import(src: Path) -> dict:
    import pandas  # noqa: F401

    from howtocap.caption.run import caption_run  # noqa: F401

    return {}


def child_json_load(src: Path) -> dict:
    child_import(src)
    t0 = time.perf_counter()
    with src.open("rb") as fh:
        data = json.load(fh)
    data = {str(k): v for k, v in data.items()}  # what the old SubtitleSource kept
    return {"seconds": time.perf_counter() - t0, "videos": len(data)}


def child_reader(src: Path) -> dict:
    child_import(src)
    from howtocap.io.subtitles import SubtitleSource

    cache = WORK / "reader-cache"
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    source = SubtitleSource.open(src, cache_dir=cache)
    ids = source.video_ids()
    t_convert = time.perf_counter() - t0
    rows = sum(len(source.get(v)) for v in ids)  # type: ignore[arg-type]
    t_read = time.perf_counter() - t0 - t_convert
    size = sum(p.stat().st_size for p in cache.iterdir())
    shutil.rmtree(cache, ignore_errors=True)
    return {"videos": len(ids), "rows": rows, "convert_seconds": t_convert,
            "read_seconds": t_read, "parquet_mb": size / 1e6, **source.stats()}


def child_caption_run(src: Path) -> dict:
    child_import(src)
    from howtocap.caption import run as cap_mod
    from howtocap.engine.rundir import RunDir
    from howtocap.io.subtitles import SubtitleSource

    phases: dict[str, float] = {}

    def timed(owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                phases[label] = phases.get(label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, wrapper)

    timed(SubtitleSource, "store", "convert (stream caption.json -> Parquet), open the store")
    timed(RunDir, "record_videos", "record videos.parquet")
    timed(cap_mod, "run_stage", "captioning, a shard at a time (stage + chunk, shard and "
                                "status files)")
    out = WORK / "run"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    _, summary = cap_mod.caption_run(None, out, cap_mod.CaptionRunConfig(subtitles=str(src)),
                                  llm=InstantLLM(), progress=False)
    seconds = time.perf_counter() - t0
    import pyarrow.parquet as pq

    rd = RunDir(out, create=False)
    rows = {t: sum(pq.read_metadata(p).num_rows for p in rd.table_files(t))
            for t in ("subtitles", "captions")}
    files = sum(1 for _ in out.rglob("*") if _.is_file())
    shards = rd.shard_count()
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": seconds, "done": summary.done, "failed": len(summary.failed),
            "first_failures": summary.failed[:3], "phases": phases, "rows": rows,
            "run_files": files, "shards": shards}


def child_breakdown(src: Path, n: int = 2000) -> dict:
    """CPU milliseconds a video (steadier than wall time on shared cores) for each step of
    one caption-stage call and its writes (the first ``n`` videos, one thread): what the
    captioning phase above is made of."""
    child_import(src)
    import pandas as pd

    from howtocap.caption.captioner import CaptionConfig, caption_rows
    from howtocap.caption.filler import load_parser
    from howtocap.engine.records import StatusRecord
    from howtocap.engine.rundir import RunDir
    from howtocap.engine.stage import BATCH_SIZE
    from howtocap.io.inputs import VideoItem
    from howtocap.io.subtitles import SubtitleSource
    from howtocap.subtitles.policy import choose_subtitles

    work = WORK / "breakdown"
    shutil.rmtree(work, ignore_errors=True)
    source = SubtitleSource.open(src, cache_dir=work / "cache", limit=n)
    ids = source.video_ids()
    rundir, llm, cfg = RunDir(work / "run"), InstantLLM(), CaptionConfig()
    rundir.record_videos(VideoItem(v, None) for v in ids)  # numbered first, as a run does
    shards = rundir.shard_of(ids).tolist()
    held: list[tuple[str, Any, Any]] = []  # the chunk in flight: (video, subtitles, captions)
    ms: dict[str, float] = {}

    def step(label: str, t0: float) -> float:
        now = time.process_time()
        ms[label] = ms.get(label, 0.0) + 1000 * (now - t0) / len(ids)
        return now

    nlp = load_parser()  # the stage loads it once, at setup: not a per-video cost
    caption_rows(ids[0], choose_subtitles(VideoItem(ids[0], None), "auto", source, None), llm,
                 cfg, nlp=nlp)
    for i, vid in enumerate(ids):
        t = time.process_time()
        subs = choose_subtitles(VideoItem(vid, None), "auto", source, None)
        t = step("subtitles: Parquet row group -> plain columns", t)
        cfg.resolved_template()
        t = step("  (inside caption_rows) resolving the prompt template", t)
        caps, _ = caption_rows(vid, subs, llm, cfg, nlp=nlp)
        t = step("caption_rows (blocks, prompts, filler parse), instant LLM", t)
        held.append((vid, subs.to_pandas(), caps.to_pandas()))
        last = i + 1 == len(ids) or shards[i + 1] != shards[i]
        if len(held) < BATCH_SIZE and not last:
            continue
        t = time.process_time()
        for stage, table, col in (("subtitles", "subtitles", 1), ("caption", "captions", 2)):
            rundir.writer(stage, shards[i], (table,)).commit(
                [StatusRecord(h[0], stage, "ok") for h in held],
                {table: pd.concat([h[col] for h in held], ignore_index=True)})
        held.clear()
        t = step(f"chunk commits, {BATCH_SIZE:,} videos each (2 table + 2 status files, "
                 "Parquet, temp + rename)", t)
        if last:
            for stage, table in (("subtitles", "subtitles"), ("caption", "captions")):
                rundir.writer(stage, shards[i], (table,)).finish()
            step("shard finish (chunks -> shard files, status file last)", t)
    shutil.rmtree(work, ignore_errors=True)
    return {"videos": len(ids), "ms_per_video": ms}


CHILDREN = {"import": child_import, "breakdown": child_breakdown, "json_load": child_json_load,
            "reader": child_reader, "caption_run": child_caption_run}


def run_child(kind: str, src: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, "--src", str(src)],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {kind}: {json.dumps(res)[:300]}", flush=True)
    return res


# -- report --------------------------------------------------------------------------------
def report(r: dict) -> str:
    n, size = r["videos"], r["file_mb"]
    base, rd, cr, floor = r["json_load"], r["reader"], r["caption_run"], r["import"]
    rows = [
        "# Text-only captioning benchmark (`howtocap caption --subtitles caption.json`)",
        "",
        f"{r['machine']}. Synthetic HowTo100M-style `caption.json`: **{n:,} videos**, "
        f"{rd['rows']:,} subtitle lines (20-60 a video, 5-15 words a line), **{size:.0f} MB**. "
        "The LLM answers instantly (one valid caption per block), so the figures are our own "
        "overhead. Each row is its own process; peak memory is its RSS high-water mark "
        f"(importing pandas + howtocap alone: {floor['peak_rss_mb']:.0f} MB).",
        "",
        "| what | peak memory | time | videos/s |",
        "|---|---:|---:|---:|",
        f"| baseline: old reader, `json.load` of the whole file | "
        f"**{base['peak_rss_mb']:,.0f} MB** | {base['seconds']:.0f} s (load only) | - |",
        f"| new reader: stream into Parquet, then read every video | "
        f"**{rd['peak_rss_mb']:,.0f} MB** | {rd['convert_seconds']:.0f} s + "
        f"{rd['read_seconds']:.0f} s | {n / (rd['convert_seconds'] + rd['read_seconds']):,.0f} |",
        f"| full `caption_run(...)`, instant LLM | **{cr['peak_rss_mb']:,.0f} MB** | "
        f"{cr['seconds'] / 60:.1f} min | **{n / cr['seconds']:,.0f}** |",
        "",
        f"Peak memory of the whole run: {cr['peak_rss_mb'] / base['peak_rss_mb']:.2f}x the "
        f"baseline's load alone ({base['peak_rss_mb'] / size:.1f}x the file size for "
        f"`json.load`). Reader high-water marks: {rd['max_buffered_rows']:,} rows buffered "
        f"while converting, {rd['max_cached_groups']} row groups held while reading "
        f"({rd['groups_read']} decoded, each once); converted file {rd['parquet_mb']:.0f} MB.",
        "",
        "Where the full run's time goes:",
        "",
        *md_table(["phase", "seconds", "ms / video"],
                  [[name, f"{secs:.0f}", f"{1000 * secs / n:.2f}"]
                   for name, secs in cr["phases"].items()], align="lrr"),
    ]
    bd = r["breakdown"]
    rows += ["", f"The captioning phase, step by step (first {bd['videos']:,} videos, one "
             "thread, the filler parser loaded first as the stage does; CPU time, steadier than "
             "wall time on shared cores; the template line is part of `caption_rows`, measured "
             "apart):", "",
             *md_table(["step", "CPU ms / video"],
                       [[k, f"{v:.2f}"] for k, v in bd["ms_per_video"].items()], align="lr")]
    rows += ["", f"{cr['done']:,} videos captioned ({cr['failed']} failed); "
             f"{cr['rows']['subtitles']:,} subtitle rows, {cr['rows']['captions']:,} captions; "
             f"{cr['run_files']:,} files in the run directory ({cr['shards']:,} shards, each "
             "stage's table and status files a shard at a time, no merged tables). Total "
             f"benchmark time: {r['total_seconds'] / 60:.0f} min.", ""]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--videos", type=int, default=100_000)
    ap.add_argument("--child", choices=sorted(CHILDREN))
    ap.add_argument("--src", type=Path)
    ap.add_argument("--report-only", action="store_true",
                    help="Rewrite textonly.md from textonly.json (no measuring).")
    args = ap.parse_args()
    if args.report_only:
        write_md("textonly", report(load_results("textonly")), echo=False)
        return
    if args.child:
        res = CHILDREN[args.child](args.src)
        res["peak_rss_mb"] = peak_rss_mb()
        print(json.dumps(res))
        return
    t_start = time.perf_counter()
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / f"caption_{args.videos}.json"
    if not src.exists():
        print(f"writing {src} ...", flush=True)
        write_caption_json(src, args.videos)
    result: dict[str, Any] = {
        "machine": machine(f"load avg {os.getloadavg()[0]:.1f} at start"),
        "videos": args.videos, "file_mb": src.stat().st_size / 1e6}
    for kind in ("import", "json_load", "reader", "breakdown", "caption_run"):
        result[kind] = run_child(kind, src)
    result["total_seconds"] = time.perf_counter() - t_start
    result["machine"] += f", {os.getloadavg()[0]:.1f} at end (other jobs add time, not memory)"
    write_results("textonly", result, report(result))


if __name__ == "__main__":
    main()
