"""A million videos on one run directory (issues #22, #39): `status`, the closing step and the
driver's memory as the number of videos grows, before vs after, in the same invocation.

Run: .venv/bin/python benchmarks/scale/bench_scale.py [--sizes 10000 100000 1200000]
                                                [--driver 10000 50000] [--only before|after]
     -> benchmarks/results/scale.{json,md,png}   (``--report-only``: md and png from the json)

A run directory is synthesized once per size and tree under benchmarks/work/scale/ (git-ignored)
the way that tree's code writes it, with the real schemas: before (#39's batch layout),
``RunDir.commit_batch`` in batches of 1,000 videos; after (the shard layout), a
``ShardWriter`` per shard of 1,000 videos, its chunks committed and the shard finished. A
``subtitles`` stage (8 lines a video) then a ``caption`` stage (4 captions a video, 2%
failures spread over three causes, half of them retried and ok later, 0.1% of the captions
forgotten), and ``videos.parquet``. No LLM. The generator keeps the per-video truth (done /
failed / pending / causes per stage) in ``truth.json``; every ``status`` answer is checked
against it.

"before" is commit ``BEFORE`` checked out with ``git worktree`` under benchmarks/work/scale/
(its own ``src`` on PYTHONPATH); "after" is this tree. Each measurement is a fresh child
process whose peak RSS is read with ``wait4`` (its own, not the parent's):

* ``status``: ``python -m howtocap.cli status DIR --json`` as a user runs it (wall, peak RSS),
  and ``run_status(DIR)`` timed inside a process whose imports are done;
* ``merge``: what ``caption_run`` does after its stages: before, ``merge_streaming`` of
  ``subtitles`` and ``captions`` (``give_back_memory`` before each) and
  ``write_status_table()``; after, nothing is merged (a table is its shard files), so the
  cell counts the tables' rows from the shard files' footers, what a reader's first look
  costs;
* files per 100 videos per table folder;
* ``--driver``: ``caption_run`` in process with ``InstantLLM`` (bench_textonly),
  ``--keep-fillers --no-imperative`` (no spaCy parse: its cost per caption is measured
  apart, ``bench_driver``/``bench_parse``) at each size: wall, videos/s, peak RSS. Its
  "before" is ``DRIVER_BEFORE`` (``--driver-before``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import RESULTS as OUT
from _harness import ROOT, add_worktree, remove_worktree
from _harness import WORK as BENCH_WORK

HERE = Path(__file__).resolve().parent  # scale/: bench_textonly
WORK = BENCH_WORK / "scale"
BEFORE = "0962e64"  # main before the shard layout (#39): batches, manifests, merges
DRIVER_BEFORE = BEFORE  # (earlier rounds of issue #22: 853cefd, 710b85c, 49d531a: git history)
BATCH = 1000
SUB_LINES = 8
CAP_LINES = 4
FAIL_RATE = 0.02
FORGET_RATE = 0.001
CAUSES = ("model output", "service", "bad input")
sys.path.insert(0, str(HERE))


# -- the synthetic run directory ------------------------------------------------------------
def generate(out: Path, n: int, seed: int = 0) -> dict[str, Any]:
    """Write a run directory of ``n`` videos with this tree's ``RunDir`` (see the module
    docstring); returns the per-video truth ``status`` must report."""
    import numpy as np
    import pyarrow as pa

    from howtocap.engine.records import StatusRecord
    from howtocap.engine.rundir import RunDir
    from howtocap.schemas import arrow_schema

    rng = np.random.default_rng(seed)
    shutil.rmtree(out, ignore_errors=True)
    rd = RunDir(out) if not hasattr(RunDir, "writer") else RunDir(out, shard_size=BATCH)
    ids = [f"v{random.Random(i).getrandbits(40):010x}{i}" for i in range(n)]

    class Item:
        def __init__(self, vid: str) -> None:
            self.video_id, self.video_path, self.subtitle_path = vid, None, None

    rd.record_videos(Item(v) for v in ids)
    sub_writes, cap_writes = ["subtitles"], ["captions"]
    fail = rng.random(n) < FAIL_RATE
    cause = rng.integers(0, len(CAUSES), n)
    t0 = time.perf_counter()

    def table(name: str, vids: list[str], k: int) -> Any:
        m = len(vids) * k
        schema = arrow_schema(name)
        start = np.tile(np.arange(k, dtype="float64") * 4.0, len(vids))
        cols: dict[str, Any] = {
            "video_id": pa.array(np.repeat(np.array(vids, dtype=object), k), pa.string()),
            "start": pa.array(start), "end": pa.array(start + 3.5),
            "text": pa.array([f"step {j % k} of the recipe with the eggs" for j in range(m)],
                             pa.string()),
            "source": pa.array(["asr" if name == "subtitles" else "llm"] * m, pa.string()),
            "config_id": pa.array(["c0ffee"] * m, pa.string())}
        if name == "captions":
            cols |= {"block": pa.array(np.zeros(m, dtype="int64")),
                     "model": pa.array(["instant"] * m, pa.string()),
                     "rejected": pa.array([""] * m, pa.string())}
        return pa.table([cols[f.name] for f in schema], schema=schema)

    failed = np.flatnonzero(fail)
    retried = failed[::2]  # half the failures retried: ok later, attempts 2
    again = np.zeros(n, dtype=bool)
    again[retried] = True
    if hasattr(rd, "commit_batch"):  # the batch layout (before)
        for lo in range(0, n, BATCH):
            vids = ids[lo:lo + BATCH]
            recs = [StatusRecord(v, "subtitles", "ok", seconds=0.01, config_id="c0ffee")
                    for v in vids]
            rd.commit_batch("subtitles", sub_writes, recs, {"subtitles": table("subtitles", vids,
                                                                               SUB_LINES)})
        for lo in range(0, n, BATCH):
            vids = ids[lo:lo + BATCH]
            ok = [v for i, v in enumerate(vids) if not fail[lo + i]]
            recs = [StatusRecord(v, "caption", "error", message="no caption parsed",
                                 cause=CAUSES[cause[lo + i]], config_id="c0ffee")
                    if fail[lo + i] else
                    StatusRecord(v, "caption", "ok", seconds=0.02, config_id="c0ffee",
                                 warnings=int(i % 50 == 0), metrics={"blocks": 2.0})
                    for i, v in enumerate(vids)]
            rd.commit_batch("caption", cap_writes, recs, {"captions": table("captions", ok,
                                                                            CAP_LINES)})
        for lo in range(0, len(retried), BATCH):
            vids = [ids[i] for i in retried[lo:lo + BATCH]]
            recs = [StatusRecord(v, "caption", "ok", seconds=0.02, attempts=2, config_id="c0ffee")
                    for v in vids]
            rd.commit_batch("caption", cap_writes, recs, {"captions": table("captions", vids,
                                                                            CAP_LINES)})
    else:  # the shard layout: a shard's chunks, then the shard finished
        for lo in range(0, n, BATCH):
            vids = ids[lo:lo + BATCH]
            k = lo // BATCH
            w = rd.writer("subtitles", k, sub_writes)
            w.commit([StatusRecord(v, "subtitles", "ok", seconds=0.01, config_id="c0ffee")
                      for v in vids], {"subtitles": table("subtitles", vids, SUB_LINES)})
            w.finish()
            w = rd.writer("caption", k, cap_writes)
            ok = [v for i, v in enumerate(vids) if not fail[lo + i]]
            w.commit([StatusRecord(v, "caption", "error", message="no caption parsed",
                                   cause=CAUSES[cause[lo + i]], config_id="c0ffee")
                      if fail[lo + i] else
                      StatusRecord(v, "caption", "ok", seconds=0.02, config_id="c0ffee",
                                   warnings=int(i % 50 == 0), metrics={"blocks": 2.0})
                      for i, v in enumerate(vids)], {"captions": table("captions", ok,
                                                                       CAP_LINES)})
            redo = [v for i, v in enumerate(vids) if again[lo + i]]
            if redo:
                w.commit([StatusRecord(v, "caption", "ok", seconds=0.02, attempts=2,
                                       config_id="c0ffee") for v in redo],
                         {"captions": table("captions", redo, CAP_LINES)})
            w.finish()
    cap_ok = ~fail
    cap_ok[retried] = True
    forgotten = np.flatnonzero(cap_ok & (rng.random(n) < FORGET_RATE))
    rd.forget("caption", [ids[i] for i in forgotten])
    cap_ok[forgotten] = False
    still = fail.copy()
    still[retried] = False
    truth = {
        "videos": n,
        "subtitles": {"done": n, "failed": 0, "pending": 0, "failures": {}},
        "caption": {"done": int(cap_ok.sum()), "failed": int(still.sum()),
                    "pending": int(n - cap_ok.sum() - still.sum()),
                    "failures": {c: int((still & (cause == k)).sum())
                                 for k, c in enumerate(CAUSES) if (still & (cause == k)).any()}},
        "seconds": time.perf_counter() - t0,
        "rows": {"subtitles": n * SUB_LINES, "captions": int(cap_ok.sum()) * CAP_LINES}}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


# -- children ---------------------------------------------------------------------------------
STATUS_INPROC = """
import json, sys, time
from howtocap.pipeline.run import run_status
t0 = time.perf_counter()
info = run_status(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

MERGE = """
import json, sys, time
try:
    from howtocap.engine.memory import give_back_memory
except ImportError:  # a tree from before it moved to the engine
    from howtocap.caption.run import give_back_memory
from howtocap.engine.rundir import RunDir
rd = RunDir(sys.argv[1], create=False)
out = {}
if hasattr(rd, "merge_streaming"):  # the batch layout: what caption_run ended with
    for table in ("subtitles", "captions"):  # memory given back between
        give_back_memory()
        t0 = time.perf_counter()
        out[table + "_rows"] = rd.merge_streaming(table)
        out[table + "_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["status_rows"] = rd.write_status_table()  # not read back whole: caption_run does not
    out["status_table_seconds"] = time.perf_counter() - t0
else:  # the shard layout merges nothing: the rows a reader finds in the files' footers
    import pyarrow.parquet as pq
    for table in ("subtitles", "captions", "status"):
        t0 = time.perf_counter()
        out[table + "_rows"] = sum(pq.read_metadata(p).num_rows for p in rd.table_files(table))
        out[table + "_seconds"] = time.perf_counter() - t0
out["corrupted"] = len(rd.corrupted)
print(json.dumps(out))
"""

DRIVER = """
import json, os, shutil, sys, threading, time
sys.path.insert(0, sys.argv[3])
from bench_textonly import InstantLLM
from howtocap.caption import run as cap_mod
from howtocap.caption.captioner import CaptionConfig
from howtocap.engine.rundir import RunDir
PAGE = os.sysconf("SC_PAGE_SIZE")
phase, peaks, windows = ["start"], {}, []
def sample():  # each phase's peak RSS (where the process's peak is reached) and each window's
    while True:
        with open("/proc/self/statm") as f:
            mb = int(f.read().split()[1]) * PAGE / 2**20
        peaks[phase[0]] = max(peaks.get(phase[0], 0.0), mb)
        if windows and phase[0] == "stages":
            windows[-1] = max(windows[-1], mb)
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
stage_run = cap_mod.run_stage
def run_stage(rundir, items, stage, **kw):  # a window starts with its subtitles stage
    if stage.name == "subtitles":
        windows.append(0.0)
    return stage_run(rundir, items, stage, **kw)
cap_mod.run_stage = run_stage
def during(owner, name, label, after=None):  # phase ``label`` from this call on
    f = getattr(owner, name)
    def g(*a, **k):
        phase[0] = label
        try:
            return f(*a, **k)
        finally:
            phase[0] = after or label
    setattr(owner, name, g)
phase[0] = "source"  # imports, the dump's conversion and its index
for name in ("record_videos", "record_video_ids"):  # files, or a text-only run's ids
    if hasattr(RunDir, name):
        during(RunDir, name, "record_videos", "stages")
for name, label in (("drop_caches", "merges"), ("write_status_table", "status_table")):
    if hasattr(RunDir, name):  # the batch layout's closing merges
        during(RunDir, name, label)
shutil.rmtree(sys.argv[2], ignore_errors=True)
t0 = time.perf_counter()
opts = {"reject_fillers": False}  # no parser: the driver's own cost, not spaCy's
if "imperative" in CaptionConfig.model_fields:
    opts["imperative"] = False
cfg = cap_mod.CaptionRunConfig(subtitles=sys.argv[1], caption=CaptionConfig(**opts))
subs, caps = cap_mod.caption_run(None, sys.argv[2], cfg, llm=InstantLLM(), progress=False)
print(json.dumps({"seconds": time.perf_counter() - t0, "done": caps.done,
                  "failed": len(caps.failed), "phase_peak_mb": peaks,
                  "window_peak_mb": windows, "window": cap_mod.WINDOW}))
"""


LAST_CPU = [0.0]  # user + system seconds of the last child (the load adds wall, not CPU)


def run_child(argv: list[str], src: Path) -> tuple[str, float, float]:
    """Run ``argv`` with ``src`` first on the path: ``(stdout, wall s, peak RSS MB)``, the
    RSS from ``wait4`` of that process alone (its CPU seconds go to ``LAST_CPU``)."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "NO_COLOR": "1"}
    log = WORK / f"child-{os.getpid()}.out"  # two invocations (before, after) may run at once
    err = WORK / f"child-{os.getpid()}.err"
    with log.open("w") as fo, err.open("w") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, env=env)
        _, code, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(code)
    LAST_CPU[0] = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {err.read_text()[-3000:]}")
    return log.read_text(), wall, usage.ru_maxrss / 1024


def check_status(info: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Where ``status --json`` differs from the generator's per-video truth."""
    bad = []
    if info["videos"] != truth["videos"]:
        bad.append(f"videos {info['videos']} != {truth['videos']}")
    stages = {s["stage"]: s for s in info["stages"]}
    for st in ("subtitles", "caption"):
        got, want = stages.get(st, {}), truth[st]
        for k in ("done", "failed", "pending"):
            if got.get(k) != want[k]:
                bad.append(f"{st}.{k} {got.get(k)} != {want[k]}")
        causes = {c: v["count"] for c, v in got.get("failures", {}).items()}
        if causes != want["failures"]:
            bad.append(f"{st}.failures {causes} != {want['failures']}")
    return bad


def count_files(run: Path) -> dict[str, int]:
    """Files by folder: ``parts/<table>`` and ``parts/batches/<stage>`` (batch layout),
    ``<table>`` and ``status/<stage>`` (shard layout)."""
    files: dict[str, int] = {}
    parts = run / "parts"
    for d in sorted((parts if parts.is_dir() else run).iterdir()):
        if not d.is_dir() or d.name in ("cache", "config", "fingerprints", "stats", "claims"):
            continue
        nested = d.name in ("batches", "status")
        for sub in (sorted(x for x in d.iterdir() if x.is_dir()) if nested else [d]):
            key = f"{d.name}/{sub.name}" if nested else d.name
            files[key] = sum(1 for p in sub.iterdir() if p.is_file())
    return files


def measure_size(n: int, trees: dict[str, Path]) -> dict[str, Any]:
    res: dict[str, Any] = {"videos": n}
    for code, src in trees.items():
        run = WORK / f"run-{code}-{n}"
        truth_path = run / "truth.json"
        if not truth_path.exists():
            out, wall, rss = run_child([sys.executable, __file__, "--generate", str(n),
                                        "--out", str(run)], src)
            print(f"  {code}: generated {n:,} in {wall:.0f} s", flush=True)
        truth = json.loads(truth_path.read_text())
        files = count_files(run)
        res.update({"files": files, "files_per_100_videos": {
            k: round(100 * v / n, 3) for k, v in files.items()},
            "generate_seconds": truth["seconds"], "truth": truth})
        m: dict[str, Any] = {"files": files}
        for table in ("subtitles", "captions", "status"):
            (run / f"{table}.parquet").unlink(missing_ok=True)
        out, wall, rss = run_child([sys.executable, "-m", "howtocap.cli", "status", str(run),
                                    "--json"], src)
        info = json.loads(out)
        m["status_seconds"], m["status_peak_rss_mb"] = wall, rss
        m["status_cpu_seconds"] = LAST_CPU[0]
        m["status_mismatch"] = check_status(info, truth)
        out, wall, rss = run_child([sys.executable, "-c", STATUS_INPROC, str(run)], src)
        m["status_inproc_seconds"] = json.loads(out.splitlines()[-1])["seconds"]
        out, wall, rss = run_child([sys.executable, "-c", MERGE, str(run)], src)
        merged = json.loads(out.splitlines()[-1])
        m["merge"] = merged
        m["merge_seconds"], m["merge_peak_rss_mb"] = wall, rss
        m["merge_cpu_seconds"] = LAST_CPU[0]
        m["merge_rows_ok"] = (merged["subtitles_rows"] == truth["rows"]["subtitles"]
                              and merged["captions_rows"] == truth["rows"]["captions"])
        m["taken_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        m["load_avg"] = round(os.getloadavg()[0], 1)
        res[code] = m
        shutil.rmtree(run / "cache", ignore_errors=True)
        print(f"  {code} {n:,}: status {m['status_seconds']:.2f} s "
              f"{m['status_peak_rss_mb']:.0f} MB (in-process {m['status_inproc_seconds']:.2f} s)"
              f", merge {m['merge_seconds']:.1f} s {m['merge_peak_rss_mb']:.0f} MB"
              f"{'' if m['merge_rows_ok'] else ' ROWS DIFFER'}"
              f"{' STATUS DIFFERS ' + str(m['status_mismatch']) if m['status_mismatch'] else ''}",
              flush=True)
    return res


def measure_driver(n: int, trees: dict[str, Path], before: str) -> dict[str, Any]:
    from bench_textonly import write_caption_json

    src = BENCH_WORK / "textonly" / f"caption_{n}.json"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        write_caption_json(src, n)
    res: dict[str, Any] = {"videos": n}
    for code, tree in trees.items():
        out_dir = WORK / f"driver-{code}-{n}"
        out, wall, rss = run_child([sys.executable, "-c", DRIVER, str(src), str(out_dir),
                                    str(HERE)], tree)
        r = json.loads(out.splitlines()[-1])
        res[code] = {**r, "videos_per_s": n / r["seconds"], "peak_rss_mb": rss,
                     "cpu_seconds": LAST_CPU[0],
                     "commit": before if code == "before" else "this tree",
                     "taken_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "load_avg": round(os.getloadavg()[0], 1)}
        shutil.rmtree(out_dir, ignore_errors=True)
        print(f"  driver {code} {n:,}: {r['seconds']:.0f} s, {n / r['seconds']:.0f} videos/s, "
              f"{rss:.0f} MB", flush=True)
    return res


# -- report -----------------------------------------------------------------------------------
def write_md(r: dict[str, Any]) -> str:
    rows = ["# A million videos on one run directory: `status`, merge, driver memory", "",
            f"{r['machine']}. \"before\": commit `{r['before']}`, \"after\": this tree, each "
            "cell a fresh process (peak RSS of that process), taken when its row says (an "
            "invocation with `--only` measures one side and keeps the other's cells: compare "
            "the load averages too). Synthetic run directories written by each version's own "
            "code (before: "
            f"`RunDir.commit_batch`, batches of {r['batch']:,} videos; after: a `ShardWriter` "
            f"per shard of {r['batch']:,} videos): `subtitles` ({r['sub_lines']} lines a "
            f"video), `caption` "
            f"({r['cap_lines']} captions a video, {r['fail_rate']:.0%} failed, half of those "
            f"retried ok, {r['forget_rate']:.1%} forgotten). Every `status` answer was checked "
            "against the generator's per-video truth.", "",
            "| videos | code | `status` | `status` CPU | `status` peak RSS | `status`, imports "
            "done | closing step (before: merge of subtitles + captions + status.parquet; after: "
            "the shard files' footers) | CPU | peak RSS "
            "| load avg | taken |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for key in r["sizes"]:
        s = r["runs"][key]
        for code in ("before", "after"):
            m = s.get(code)
            if m is None:
                continue
            ok = "" if not m["status_mismatch"] else " (wrong)"
            rows.append(f"| {s['videos']:,} | {code} | {m['status_seconds']:.2f} s{ok} | "
                        f"{m['status_cpu_seconds']:.2f} s | "
                        f"{m['status_peak_rss_mb']:.0f} MB | {m['status_inproc_seconds']:.2f} s "
                        f"| {m['merge_seconds']:.1f} s | {m['merge_cpu_seconds']:.1f} s | "
                        f"{m['merge_peak_rss_mb']:.0f} MB | {m['load_avg']} | "
                        f"{m.get('taken_at', '')} |")
    rows += ["", "Files per 100 videos, by folder (after):", "",
             "| videos | folders |", "|---:|---|"]
    for key in r["sizes"]:
        s = r["runs"][key]
        per = ", ".join(f"`{k}` {v:g}" for k, v in s["files_per_100_videos"].items())
        rows.append(f"| {s['videos']:,} | {per} |")
    if r.get("driver"):
        rows += ["", "The driver: `caption_run` in process, `InstantLLM`, "
                 "`--keep-fillers --no-imperative` (HowTo100M-style ASR, 20-60 lines a "
                 "video); \"before\" is the commit named in its row:", "",
                 "| videos | code | wall | videos/s | peak RSS | load avg | taken |",
                 "|---:|---|---:|---:|---:|---:|---|"]
        for key in sorted(r["driver"], key=int):
            d = r["driver"][key]
            for code in ("before", "after"):
                m = d.get(code)
                if m:
                    label = f"{code} (`{m['commit']}`)" if m.get("commit") and \
                        code == "before" else code
                    if m.get("partial"):  # stopped before the end: the peak so far
                        label += f" ({m['partial']})"
                    wall = f"{m['seconds']:.0f} s" if "seconds" in m else "—"
                    rate = f"{m['videos_per_s']:.0f}" if "videos_per_s" in m else "—"
                    rows.append(f"| {d['videos']:,} | {label} | {wall} | {rate} | "
                                f"{m['peak_rss_mb']:.0f} MB | {m['load_avg']} | "
                                f"{m['taken_at']} |")
    if r.get("driver"):
        rows += driver_growth(r)
    rows += ["", "`status` is `howtocap status DIR --json` in a fresh process, imports "
             "included; \"imports done\" times `run_status(DIR)` alone. The merge is the step "
             "`caption_run` ends with: `merge_streaming(\"subtitles\")`, "
             "`merge_streaming(\"captions\")` (memory given back before each), "
             "`write_status_table()` (not read back: the runs before this one's called "
             "`status_table()`, which also read status.parquet into pandas). The 2 cores are "
             "shared with other jobs (`load avg`), which adds time, not memory.", ""]
    return "\n".join(rows)


def driver_growth(r: dict[str, Any]) -> list[str]:
    """The driver's growth per 100k videos (100k to the largest size), each phase's peak,
    and the attribution notes kept in the results file (``driver_notes``)."""
    d = r["driver"]
    sizes = sorted((int(k) for k in d), key=int)
    rows: list[str] = []
    if 100_000 in sizes and sizes[-1] > 100_000:
        big = max((k for k in sizes if k <= 1_200_000), default=sizes[-1])
        per = []
        for code in ("before", "after"):
            g = growth(d, code, big)
            if g:
                per.append(f"{code} {g['per_100k_mb']:+.1f} MB ({g['from_mb']:.0f} → "
                           f"{g['to_mb']:.0f} MB, {g['pct']:+.0%})")
        rows += ["", f"**Growth of the driver's peak per 100k videos** (100k → {big:,}): "
                 + "; ".join(per) + ". Target (issue #22): flat, ≤ 1 GB at any size. The "
                 "project's bar: past the first ~300k videos (the window's caches and the "
                 "indexes' in-memory rows filling) the peak at twice the videos within ~10% "
                 "and ≤ ~5 MB per 100k videos, judged between the two largest sizes."]
        verdict = flatness(d)
        if verdict:
            rows += ["", verdict]
    phased = [(k, d[k]["after"]) for k in sorted(d, key=int)
              if d[k].get("after", {}).get("phase_peak_mb")]
    if phased:
        names = ["source", "stages", "record_videos", "merges", "status_table"]
        rows += ["", "Peak RSS of each phase of the driver (after; `source`: imports, the dump's "
                 "conversion to Parquet and its index; `stages`: both stages over every window; "
                 "`merges`: after the indexes are dropped, the two `merge_streaming`; "
                 "`status_table`: `status.parquet`):", "",
                 "| videos | " + " | ".join(f"`{n}`" for n in names) + " |",
                 "|---:|" + "---:|" * len(names)]
        for k, m in phased:
            ph = m["phase_peak_mb"]
            rows.append(f"| {int(k):,} | " + " | ".join(
                f"{ph[n]:.0f} MB" if n in ph else "" for n in names) + " |")
    slopes = [(k, window_slope(m)) for k, m in phased if window_slope(m) is not None]
    if slopes:
        rows += ["", "Steady growth inside one run (after): a least-squares line through the "
                 "peak RSS of each window of the run's second half (the windows of "
                 f"{phased[-1][1]['window']:,} videos; `scale.png`, right), per 100k videos: "
                 + "; ".join(f"{int(k):,} videos {g:+.1f} MB" for k, g in slopes) + "."]
    notes = r.get("driver_notes")
    if notes:
        rows += ["", *notes]
    return rows


def growth(d: dict[str, Any], code: str, big: int, small: int = 100_000
           ) -> dict[str, Any] | None:
    """A tree's driver peaks at ``small`` and at ``big`` videos: growth per 100k videos, the
    rise, and where a straight line through them reaches 1 GB (millions of videos; None: it
    does not rise). None when a run is missing or partial."""
    lo, hi = d.get(str(small), {}).get(code), d.get(str(big), {}).get(code)
    if not (lo and hi) or big <= small or hi.get("partial"):
        return None
    a, b = lo["peak_rss_mb"], hi["peak_rss_mb"]
    g = (b - a) / ((big - small) / 100_000)
    return {"from_mb": a, "to_mb": b, "per_100k_mb": g, "pct": b / a - 1, "small": small,
            "1gb_at_m_videos": (big + (1024 - b) / g * 100_000) / 1e6 if g > 0 else None}


def tail(d: dict[str, Any], code: str = "after") -> tuple[int, int] | None:
    """The two largest sizes the driver ran at, both past 1M videos: where flatness is
    judged (below ~300k the window's bounded caches and the indexes' in-memory rows are still
    filling, so a small run's peak understates the steady one)."""
    sizes = sorted(int(k) for k, v in d.items() if v.get(code))
    return (sizes[-2], sizes[-1]) if len(sizes) >= 2 and sizes[-2] >= 1_000_000 else None


def flatness(d: dict[str, Any]) -> str:
    """The after tree against the flatness target, from the measured peaks (not retyped)."""
    t = tail(d)
    g = growth(d, "after", t[1], t[0]) if t else None
    if not g:
        return ""
    met = g["per_100k_mb"] <= 5.0 and g["pct"] <= 0.10 and g["to_mb"] <= 1024
    at = "never" if g["1gb_at_m_videos"] is None else f"at ~{g['1gb_at_m_videos']:.0f}M videos"
    return (f"**Flat: {'met' if met else 'not met'}** (after, {t[0]:,} → {t[1]:,} videos: "
            f"{g['per_100k_mb']:+.1f} MB per 100k videos, {g['pct']:+.0%}; bar: ≤ 5 MB per "
            f"100k and ≤ 10%); at this growth a run would reach 1 GB {at} (a straight-line "
            "estimate).")


def window_slope(m: dict[str, Any]) -> float | None:
    """MB per 100k videos of a line through the peaks of the run's second half of windows
    (the first windows fill caches and pools: the endpoints mix that in)."""
    import numpy as np

    peaks = m.get("window_peak_mb") or []
    half = peaks[len(peaks) // 2:]
    if len(half) < 4:
        return None
    x = np.arange(len(half)) * m["window"] / 100_000
    return float(np.polyfit(x, np.asarray(half), 1)[0])


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = r["sizes"]
    xs = [r["runs"][k]["videos"] for k in keys]
    series = [(int(k), d["after"]) for k, d in sorted(r.get("driver", {}).items(),
                                                      key=lambda kv: int(kv[0]))
              if d.get("after", {}).get("window_peak_mb")]
    fig, axes = plt.subplots(1, 4 if series else 3, figsize=(19 if series else 14, 4))
    for code, style in (("before", "o--"), ("after", "s-")):
        have = [k for k in keys if code in r["runs"][k]]
        x = [r["runs"][k]["videos"] for k in have]
        axes[0].plot(x, [r["runs"][k][code]["status_seconds"] for k in have], style,
                     label=f"status, {code}")
        axes[1].plot(x, [r["runs"][k][code]["status_peak_rss_mb"] for k in have], style,
                     label=f"status, {code}")
        axes[1].plot(x, [r["runs"][k][code]["merge_peak_rss_mb"] for k in have], style,
                     alpha=0.5, label=f"merge, {code}")
        axes[2].plot(x, [r["runs"][k][code]["merge_seconds"] for k in have], style,
                     label=f"merge, {code}")
    axes[0].axhline(5, color="grey", lw=0.8, ls=":", label="target 5 s")
    axes[0].set_ylabel("wall s")
    axes[1].set_ylabel("peak RSS MB")
    axes[2].set_ylabel("wall s")
    for n, m in series:  # the driver's peak RSS window by window
        peaks = m["window_peak_mb"]
        axes[3].plot([(i + 1) * m["window"] for i in range(len(peaks))], peaks, ".-",
                     label=f"{n:,} videos")
    if series:
        axes[3].set_xlabel("videos through both stages")
        axes[3].set_ylabel("peak RSS MB in the window")
        axes[3].set_ylim(bottom=0)
        axes[3].set_title("driver, window by window (after)")
        axes[3].legend(fontsize=8)
    for ax, title in zip(axes, ("howtocap status", "peak RSS", "merge"), strict=False):
        ax.set_xscale("log")
        ax.set_xlabel("videos")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:,}" for x in xs])
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_200_000])
    ap.add_argument("--driver", type=int, nargs="*", default=[])
    ap.add_argument("--only", choices=["before", "after"])
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--driver-before", default=DRIVER_BEFORE)
    ap.add_argument("--generate", type=int)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    if args.generate:
        generate(args.out, args.generate)
        return
    OUT.mkdir(exist_ok=True)
    res_path = OUT / "scale.json"
    if args.report_only:
        r = json.loads(res_path.read_text())
        (OUT / "scale.md").write_text(write_md(r))
        plot(r, OUT / "scale.png")
        return
    WORK.mkdir(parents=True, exist_ok=True)
    codes = [args.only] if args.only else ["before", "after"]
    trees: dict[str, Path] = {}
    driver_trees: dict[str, Path] = {}
    for code in codes:  # a worktree only for what this invocation measures
        if args.sizes:
            trees[code] = add_worktree(args.before, WORK, "before") / "src" \
                if code == "before" else ROOT / "src"
        if args.driver:
            driver_trees[code] = add_worktree(args.driver_before, WORK, "before") / "src" \
                if code == "before" else ROOT / "src"
    r: dict[str, Any] = json.loads(res_path.read_text()) if res_path.exists() else {}
    r.update({"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}", "before": args.before, "batch": BATCH,
              "sub_lines": SUB_LINES, "cap_lines": CAP_LINES, "fail_rate": FAIL_RATE,
              "forget_rate": FORGET_RATE})
    r.setdefault("runs", {})
    r.setdefault("driver", {})

    def save(part: str, n: int, got: dict[str, Any]) -> None:
        """Merge one cell into the results file as it is now: another invocation (``--only
        before`` beside ``--only after``) may have written its own cells meanwhile."""
        nonlocal r
        now = json.loads(res_path.read_text()) if res_path.exists() else r
        now.update({k: v for k, v in r.items() if k not in ("runs", "driver")})
        now.setdefault(part, {})[str(n)] = {**now.get(part, {}).get(str(n), {}), **got}
        now["sizes"] = sorted(now.get("runs", {}), key=int)
        res_path.write_text(json.dumps(now, indent=1) + "\n")
        r = now

    try:
        for n in args.sizes:
            save("runs", n, measure_size(n, trees))
        for n in args.driver:
            save("driver", n, measure_driver(n, driver_trees, args.driver_before))
    finally:  # the before worktrees are registered in the shared .git: not left behind
        for tree in (trees.get("before"), driver_trees.get("before")):
            if tree is not None:
                remove_worktree(tree.parent)
    r["sizes"] = sorted(r["runs"], key=int)
    summarise(r)
    res_path.write_text(json.dumps(r, indent=1) + "\n")
    (OUT / "scale.md").write_text(write_md(r))
    if r["sizes"]:
        plot(r, OUT / "scale.png")
    print(write_md(r))


def summarise(r: dict[str, Any]) -> None:
    """Flat figures the docs quote (``summary.<code>_<n>.<what>``)."""
    summary: dict[str, Any] = {}
    for key, s in r["runs"].items():
        for code in ("before", "after"):
            m = s.get(code)
            if m:
                summary[f"{code}_{key}"] = {
                    "status_s": m["status_seconds"], "status_rss_mb": m["status_peak_rss_mb"],
                    "status_cpu_s": m["status_cpu_seconds"],
                    "status_inproc_s": m["status_inproc_seconds"],
                    "merge_s": m["merge_seconds"], "merge_rss_mb": m["merge_peak_rss_mb"],
                    "merge_cpu_s": m["merge_cpu_seconds"],
                    "status_correct": not m["status_mismatch"]}
        summary[f"files_per_100_{key}"] = max(
            (v for k, v in s["files_per_100_videos"].items() if k != "claims"), default=0)
    for key, d in r.get("driver", {}).items():
        for code in ("before", "after"):
            if d.get(code):
                summary[f"driver_{code}_{key}"] = {"rss_mb": d[code]["peak_rss_mb"],
                                                   "videos_per_s": d[code].get("videos_per_s"),
                                                   "window_slope_mb": window_slope(d[code])}
    d = r.get("driver", {})
    big = max((int(k) for k in d if int(k) <= 1_200_000), default=0)
    for code in ("before", "after"):
        g = growth(d, code, big)
        if g:
            summary[f"driver_{code}_growth_per_100k_mb"] = g["per_100k_mb"]
            summary[f"driver_{code}_growth_pct"] = g["pct"]
            summary[f"driver_{code}_1gb_at_m_videos"] = g["1gb_at_m_videos"]
    t = tail(d)
    g = growth(d, "after", t[1], t[0]) if t else None
    if t and g:
        summary["driver_after_tail"] = {"from_videos": t[0], "to_videos": t[1],
                                        "per_100k_mb": g["per_100k_mb"], "pct": g["pct"],
                                        "1gb_at_m_videos": g["1gb_at_m_videos"],
                                        "verdict": "met" if flatness(d).startswith(
                                            "**Flat: met") else "not met"}
    r["summary"] = summary


if __name__ == "__main__":
    main()
