"""Kill and resume: SIGKILL a multi-video ``run`` (caption + align) followed by a WebDataset
``export`` at random moments spread over every stage, resume, and compare every table and the
exported shards with an uninterrupted run; some resumes first meet deliberately truncated or
bit-flipped files, which must be detected and recomputed.

The uninterrupted run is watched (its run directory polled every few ms) to learn how long
each stage runs. Each killed run is watched too, the stages taken in turn: once it enters the
stage, it is killed after a random part of that stage's duration, so kills land at the start
(before any commit), in subtitles, mid-caption, align, the align filter and the export alike
(``kills_by_step``: where each landed, read back from the killed run's files).

Each run is a forked child of this process (a real process, killed with a real SIGKILL; the
parent imports torch and the pipeline before forking, so a child skips the ~20 s of imports
a fresh interpreter pays on this loaded machine). The LLM is
the in-process fake OpenAI server of ``tests/support/chat_server.py`` (deterministic replies), the
encoder a tiny randomly initialised CLIP (``howtocap.train.tiny``), the videos copies of one
generated sample with different subtitles.

    python benchmarks/robustness/bench_kill.py [--kills 20] [--videos 6] [--seed 0] [--shard-size 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
sys.path.insert(0, str(HERE.parent))  # tests.support.chat_server

import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tests.support.chat_server import chat_server  # noqa: E402

TABLES = ("subtitles", "captions", "aligned")


def vtt(i: int) -> str:
    words = ["eggs", "flour", "onions", "pears", "rice", "beans", "nuts", "milk"]
    w = words[i % len(words)]
    return (f"WEBVTT\n\n00:00:00.500 --> 00:00:02.000\nfirst we take two {w} number {i} and "
            f"put them into the bowl\n\n00:00:02.500 --> 00:00:03.800\nthen we whisk the {w} "
            "with a fork until smooth\n")


def make_inputs(work: Path, n: int) -> tuple[Path, str]:
    """``n`` videos (one generated sample, copied, each with its own subtitles) and a tiny
    CLIP folder, made in a subprocess so this process never starts torch before forking."""
    code = (
        "import sys; from pathlib import Path\n"
        "from howtocap.samples import DEFAULT_STEPS, make_narrated_video\n"
        "from howtocap.train.tiny import make_tiny_clip\n"
        "w = Path(sys.argv[1])\n"
        "v = make_narrated_video(w / 'base', 'base', DEFAULT_STEPS[:2], seconds_per_step=2.0,"
        " fps=5, size=64, audio=False, subtitles=None).video_path\n"
        "print(v); print(make_tiny_clip(w / 'tiny_clip'))\n")
    out = subprocess.run([sys.executable, "-c", code, str(work)], check=True,
                         capture_output=True, text=True).stdout.split()
    base, enc = Path(out[-2]), out[-1]
    vids = work / "videos"
    vids.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        shutil.copy(base, vids / f"v{i:02d}.mp4")
        (vids / f"v{i:02d}.vtt").write_text(vtt(i))
    return vids, enc


BATCH = [2, 2]  # videos per committed chunk, videos per shard of the forked runs
EXPORT = "webdataset"  # the export's folder inside the run directory
# every caption a sample (not only the aligned ones kept): an export long enough to kill
EXPORT_KW = {"what": "captions", "image_size": 64, "frames_per_clip": 4, "shard_size": 2,
             "progress": False}


def child_run(vids: Path, out: Path, url: str, enc: str, report: Path | None) -> None:
    """The forked child: one `run` (resumes whatever ``out`` holds); never returns."""
    code = 1
    try:
        import torch

        torch.set_num_threads(1)
        from howtocap.atomic import CorruptPartWarning
        from howtocap.caption.config import CaptionRunConfig
        from howtocap.engine.options import BatchConfig
        from howtocap.io.webdataset import export_webdataset
        from howtocap.llm import LLMOptions
        from howtocap.pipeline.run import run_pipeline

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CorruptPartWarning)
            run_pipeline([vids], out, caption=CaptionRunConfig(
                llm=LLMOptions(url=url, concurrency=1)), encoders=[enc], progress=False,
                batching=BatchConfig(batch_size=BATCH[0], shard_size=BATCH[1]))
            started(out).touch()  # where() tells the export from here on
            export_webdataset(out, out / EXPORT, **EXPORT_KW)
        if report is not None:
            report.write_text(json.dumps([str(w.message) for w in caught
                                          if issubclass(w.category, CorruptPartWarning)]))
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported through the exit code
        sys.stderr.write(f"child failed: {type(exc).__name__}: {exc}\n")
    finally:
        os._exit(code)


def start(vids: Path, out: Path, url: str, enc: str, report: Path | None = None) -> int:
    pid = os.fork()
    if pid == 0:
        child_run(vids, out, url, enc, report)
    return pid


def wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


STEPS = ("start", "subtitles", "caption", "align", "align filter", "export")


def started(out: Path) -> Path:
    """The bench's own mark, beside the run directory, that the run is done and its export
    began (the export's folder appears only once its clips are read)."""
    return out.with_name(out.name + ".exporting")


def drop(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    started(out).unlink(missing_ok=True)


def where(out: Path, shards: int) -> str:
    """Which stage the run was in, from its files: the export once it began; the
    filter once the ``shards`` align shards are finished; align once its settings are
    recorded (before its first shard); else the newest stage with committed work; "start"
    before any (the videos recorded, the settings checked, the models set up)."""
    if started(out).exists():
        return "export"
    if (out / "aligned").exists():
        return "align filter"
    for stage in ("align", "caption", "subtitles"):
        status, work = out / "status" / stage, out / "work" / stage
        if status.exists() or work.exists():  # a cheap look first: the clean run is polled
            if stage == "align" and not work.exists() and \
                    len(list(status.glob("shard-*.parquet"))) == shards:
                return "align filter"
            return stage
        if stage == "align" and (out / "config" / "align.json").exists():
            return stage
    return "start"


def kill_in(pid: int, out: Path, shards: int, step: str, offset: float) -> tuple[float, int]:
    """Watch the run until it enters ``step`` (or passes it), then SIGKILL it ``offset``
    seconds later: drawn against the run's own progress, not the clean run's clock, which
    varies with the machine's load. Returns (seconds from the start, exit code)."""
    t0 = time.perf_counter()
    while STEPS.index(where(out, shards)) < STEPS.index(step):  # before the step: look again
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:  # ended (reaped here) before the step
            return time.perf_counter() - t0, os.waitstatus_to_exitcode(status)
        time.sleep(0.002)
    time.sleep(offset)
    at = time.perf_counter() - t0
    os.kill(pid, signal.SIGKILL)
    return at, wait(pid)


def timeline(pid: int, out: Path, shards: int) -> dict[str, list[float]]:
    """Poll the run directory while ``pid`` runs: each step's first and last moment seen
    (seconds from the start)."""
    t0 = time.perf_counter()
    seen: dict[str, list[float]] = {}
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        t = time.perf_counter() - t0
        step = where(out, shards)
        seen.setdefault(step, [t, t])[1] = t
        if done:
            return seen
        time.sleep(0.005)


def corrupt(out: Path, rng: random.Random) -> list[str]:
    """Truncate one committed table file and flip a byte inside another's data page (files
    of finished shards and of committed chunks)."""
    done = [p for t in ("subtitles", "captions")
            for p in [*sorted((out / t).glob("shard-*.parquet")),
                      *sorted((out / "work").glob(f"*/shard-*/*.{t}.parquet"))]]
    if len(done) < 2:
        return []
    a, b = rng.sample(done, 2)
    a.write_bytes(a.read_bytes()[: a.stat().st_size // 2])
    data = bytearray(b.read_bytes())
    col = pq.read_metadata(b).row_group(0).column(1)
    data[col.data_page_offset + col.total_compressed_size - 2] ^= 0xFF
    b.write_bytes(bytes(data))
    return [str(a.relative_to(out)), str(b.relative_to(out))]


def tables(out: Path) -> dict[str, Any]:
    """The run's tables, and the export: each shard's members with a hash of their bytes
    (a tar's own headers hold write times), its index and its meta.json without its date."""
    got: dict[str, Any] = {t: pd.read_parquet(out / t) for t in TABLES}
    shards = {}
    for tar in sorted((out / EXPORT).glob("*.tar")):
        with tarfile.open(tar) as tf:
            shards[tar.name] = [(m.name, hashlib.sha1(tf.extractfile(m).read()).hexdigest())
                                for m in tf.getmembers() if m.isfile()]
    meta = json.loads((out / EXPORT / "meta.json").read_text())
    for varies in ("created", "source"):  # the date, and the run directory's own path
        meta.pop(varies, None)
    got["export"] = {"shards": shards, "meta": meta,
                     "index": pd.read_parquet(out / EXPORT / "index.parquet").to_dict("list"),
                     "left": sorted(p.name for p in (out / EXPORT).iterdir())}
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--videos", type=int, default=6)
    ap.add_argument("--corrupt-every", type=int, default=4, help="corrupt parts before every "
                    "Nth resume")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=2, help="videos per committed chunk: "
                    "small, so kills land between chunks and inside them")
    ap.add_argument("--shard-size", type=int, default=2, help="videos per shard: small, so "
                    "a run has several shards, finished and unfinished")
    ap.add_argument("--work", type=Path, default=HERE / "work" / "kill")
    args = ap.parse_args()
    BATCH[:] = [args.batch_size, args.shard_size]  # the forked runs inherit it
    rng = random.Random(args.seed)
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    load_before = os.getloadavg()
    vids, enc = make_inputs(args.work, args.videos)
    shards = math.ceil(args.videos / args.shard_size)
    # Import (never run) torch and the pipeline here, once: forked children share the
    # modules, so each run pays its own work, not ~20 s of imports on a loaded machine.
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import howtocap.encoders.hf  # noqa: F401
    import howtocap.pipeline.run  # noqa: F401
    trials: list[dict[str, Any]] = []
    missed: list[dict[str, Any]] = []  # draws the run outlived: not counted as kills
    with chat_server(delay=0.05) as srv:
        # the uninterrupted run, twice: the first pays one-off costs (hashing the encoder's
        # weights, the OS file cache), the second's duration is where kills are drawn from
        clean = args.work / "clean"
        for _ in range(2):
            drop(clean)
            t0, asked = time.perf_counter(), srv.requests
            spans = timeline(start(vids, clean, srv.url, enc), clean, shards)
            clean_s = time.perf_counter() - t0
            clean_requests = srv.requests - asked  # LLM requests of an uninterrupted run
        assert (clean / "aligned").exists(), "the clean run failed"
        steps_seen = [s for s in STEPS if s in spans]
        want = tables(clean)
        i = tries = 0
        while i < args.kills and tries < 2 * args.kills:
            tries += 1
            out = args.work / f"killed{i:02d}"
            aim = steps_seen[i % len(steps_seen)]  # each stage in turn
            lo, hi = spans[aim]
            asked = srv.requests
            pid = start(vids, out, srv.url, enc)
            at, code = kill_in(pid, out, shards, aim, rng.uniform(0, hi - lo))
            if code != -signal.SIGKILL:  # it ended before the kill: draw again
                missed.append({"step": aim, "at": round(at, 3), "exit": code})
                print(f"draw at {at:.2f}s ({missed[-1]['step']}): the run ended first "
                      f"(exit {code})", flush=True)
                drop(out)
                continue
            step = where(out, shards)
            injected = corrupt(out, rng) if (i + 1) % args.corrupt_every == 0 else []
            report = args.work / f"detected{i:02d}.json"
            t1 = time.perf_counter()
            code = wait(start(vids, out, srv.url, enc, report))
            resume_s = time.perf_counter() - t1
            # finished work the kill cost: LLM requests answered before the kill whose
            # results were in a batch not yet committed, so the resumed run asked again
            redone = srv.requests - asked - clean_requests
            detected = json.loads(report.read_text()) if report.exists() else []
            equal, why = code == 0, ""
            if equal:
                got = tables(out)
                for name in TABLES:
                    try:
                        pd.testing.assert_frame_equal(got[name], want[name])
                    except AssertionError as exc:  # what differs, for the results file
                        equal, why = False, f"{name}: {' '.join(str(exc).split())[:300]}"
                if equal and got["export"] != want["export"]:
                    diff = [k for k in want["export"] if got["export"][k] != want["export"][k]]
                    equal, why = False, f"export: {', '.join(diff)} differ"
            temp_left = [str(p) for p in out.rglob("*.tmp")]
            trials.append({"kill_at_s": round(at, 3), "step": step,
                           "resume_exit": code, "resume_s": round(resume_s, 2),
                           "requests_redone": redone,
                           "equal": equal and not temp_left, "temp_files_left": temp_left,
                           "injected": injected, "differs": why,
                           "detected": sum(any(Path(p).name in d for d in detected)
                                           for p in injected)})
            print(f"kill {i:2d} at {at:5.2f}s ({step}): {redone} requests redone, resume "
                  f"exit {code}, tables "
                  f"{'equal' if equal else 'DIFFER'}"
                  + (f", corrupt parts {len(injected)} -> detected "
                     f"{trials[-1]['detected']}" if injected else ""), flush=True)
            if equal:  # a run that differs is kept for a look (args.work/killedNN)
                drop(out)
            i += 1
    n_equal = sum(t["equal"] for t in trials)
    injected = sum(len(t["injected"]) for t in trials)
    detected = sum(t["detected"] for t in trials)
    steps = {step: sum(t["step"] == step for t in trials) for step in STEPS}  # 0s too
    per_video = clean_requests / args.videos
    redone_all = [t["requests_redone"] for t in trials]
    res = {"kills": len(trials), "draws": tries, "videos": args.videos, "seed": args.seed,
           "batch_size": args.batch_size, "shard_size": args.shard_size,
           "clean_requests": clean_requests,
           "spans_s": {k: [round(v[0], 3), round(v[1], 3)] for k, v in spans.items()},
           "requests_redone_mean": round(sum(redone_all) / max(1, len(trials)), 2),
           "requests_redone_max": max(redone_all, default=0),
           "videos_redone_mean": round(sum(redone_all) / max(1, len(trials)) / per_video, 2),
           "videos_redone_max": round(max(redone_all, default=0) / per_video, 2),
           "clean_run_s": round(clean_s, 2), "equal_after_resume": n_equal,
           "corrupt_parts_injected": injected, "corrupt_parts_detected": detected,
           "kills_by_step": steps, "missed_draws": missed,
           "rows": {t: len(want[t]) for t in TABLES},
           "export_samples": len(want["export"]["index"]["key"])
           if "key" in want["export"]["index"] else None,
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
           "cpus": os.cpu_count(), "trials": trials}
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "kill.json").write_text(json.dumps(res, indent=2) + "\n")
    lines = [
        "# Kill and resume (`benchmarks/robustness/bench_kill.py`)", "",
        f"A {args.videos}-video `run` (subtitles -> LLM captions -> align scores -> filter; "
        "then `export --format webdataset` of the run; "
        f"fake OpenAI server, tiny random CLIP encoder; {args.shard_size} videos a shard, "
        f"results committed {args.batch_size} videos a chunk) SIGKILLed at "
        f"{args.kills} random moments (of its {clean_s:.1f} s: the stages in turn, each "
        "kill a random part of the stage's duration after the run entered it), then resumed "
        "with the same "
        "call. Every resumed run's `subtitles`, `captions` and `aligned` tables are compared "
        "with an uninterrupted run's (pandas `assert_frame_equal`: same rows, order, values, "
        "dtypes), and its export too (the same files; in each tar the same members with the "
        "same bytes; the same index and `meta.json` but for its date and source path).", "",
        f"- **Tables identical to the uninterrupted run: {n_equal}/{len(trials)}** "
        f"({tries - len(trials)} drawn moments fell after a run had finished and were drawn "
        "again)",
        f"- Corrupt parts injected before every {args.corrupt_every}th resume (one truncated, "
        f"one with a flipped byte inside a data page): **{detected}/{injected} detected and "
        "recomputed** (a warning names each file)",
        f"- **Finished work a kill cost**: the resumed run asked the LLM again "
        f"{res['requests_redone_mean']:.2f} requests on average, at most "
        f"{res['requests_redone_max']} ({res['videos_redone_mean']:.2f} and "
        f"{res['videos_redone_max']:.2f} videos' worth, of {args.videos}; an uninterrupted run "
        f"asks {clean_requests}): the answers of videos whose chunk was not committed yet. "
        "A kill loses at most the chunk in flight of each shard being worked on: up to "
        "`--batch-size` videos or `--batch-seconds` of work each.",
        f"- Left-over temp files after resume: "
        f"{sum(len(t['temp_files_left']) for t in trials)}",
        "- Where the kills landed: " + ", ".join(f"{k} {v}" for k, v in steps.items()),
        f"- Load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after on "
        f"{os.cpu_count()} CPUs shared with other jobs: the times below are inflated by it.",
        "", "| # | kill at (s) | step | LLM requests redone | resume (s) | "
        "corrupt parts -> detected | equal |",
        "|---|---|---|---:|---|---|---|"]
    for i, t in enumerate(trials):
        lines.append(f"| {i} | {t['kill_at_s']:.2f} | {t['step']} | {t['requests_redone']} | "
                     f"{t['resume_s']:.1f} | "
                     f"{len(t['injected'])} -> {t['detected']} | "
                     f"{'yes' if t['equal'] else '**no**'} |")
    lines += ["", "What this shows and does not: a chunk's files are written temp file + "
              "fsync + rename before its status file, and a shard's final table files before "
              "its status file, so a kill leaves each chunk and each shard committed or absent "
              "(never half). A truncated file is caught on resume by its missing Parquet "
              "footer, a flipped byte by the page checksums when it is read; its shard is "
              "redone. Not covered: power loss on file systems that ignore fsync."]
    (results / "kill.md").write_text("\n".join(lines) + "\n")
    print(f"{n_equal}/{len(trials)} equal; corrupt parts {detected}/{injected} detected")


if __name__ == "__main__":
    main()
