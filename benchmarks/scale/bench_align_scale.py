"""``align`` on a run of many videos with cached embeddings (issue #22's align target): the
captions/s of our own overhead, before and after, in the same run.

Run: .venv/bin/python benchmarks/scale/bench_align_scale.py [--videos 1000 10000 --base REV]
     -> benchmarks/results/align_scale.{json,md,png}

The run directory is made the way the real code writes one: ``RunDir.record_videos``, the
captions committed in batches of 1,000 videos through the engine's shard writer (a tree
before shards: ``RunDir.commit_batch``) with the real
``captions`` schema and ``caption`` status records (HowTo100M-like: 5-10 min videos, 30-50
captions each, a few rejected fillers and channel chatter lines), and per video a frame-
embedding cache file written through ``encoders.cache.save`` at the path ``cache_path`` gives
for the video's ``content_key`` (random unit vectors at 1 fps, 384-d like the default encoder).
The video files are tiny stand-ins: nothing is decoded (the stub's ``encode_images`` raises).

The text encoder is a stub (``StubEncoder``: a fixed random unit vector per text, chosen by
its CRC32). The real embedded encoder encodes ~800 texts/s on these 2 cores
(``encoders.json``), i.e. ~50 ms of a 40-caption video, several times all of align's own
overhead, and it is a model's cost, not the driver's.

Each measurement is its own child process, ``align_run`` with the default filter, on a fresh
copy of the run directory (the cache folder is shared, read only) with the "before" tree
(``--base``, a git worktree under benchmarks/work/) or this tree first on ``PYTHONPATH``; the
two versions run back to back on the same inputs and their ``aligned.parquet`` are compared
(scores, z and offsets to 1e-6). A third child per version profiles the smallest size
(cProfile; its wall time is not used). BLAS runs on one thread in every child
(``ONE_THREAD``), the same for both trees. A measured run is stopped after ``BUDGET_S`` per
10k videos (20 min; the machine is shared) and reported as not run; ``--before-max`` skips
the base commit above a size. CPU seconds are reported beside wall time (other jobs load the
cores; CPU time is the steadier figure).

The memory series (``--memory-videos``, default 300k, 100k and 10k: the sizes the docs quote;
the 300k run takes ~35 min and its 64-d frame cache ~17 GB of disk) measures peak RSS at a
``--small-dim`` stub (64-d: the 384-d frame cache of 100k videos would be 33 GB), the base
commit only up to ``--memory-before-max``; each run's RSS is sampled every 2 s against the
videos align has committed (``Tracer``), which splits it into the scoring and the reduce step
(``phases``). The report gives the growth per 10k videos, the extrapolation to 1.2M videos
from the two largest runs and issue #22's target (<= 1 GB at any size).
``--memory-only FILE`` runs it alone (it can run beside the main series) and
``--add-memory FILE [FILE ...]`` adds it to the results; ``--memory-versions before`` /
``after`` runs one version, so the two can run side by side (each size's
``aligned.parquet`` is kept under benchmarks/work/, and the two versions' are compared when
their files are added together). ``--base`` is the memory series' base too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import RESULTS as OUT
from _harness import (
    ROOT,
    WORK,
    add_worktree,
    load_results,
    machine,
    remove_worktree,
    write_json,
    write_md,
)

HERE = Path(__file__).resolve().parent  # scale/: the child imports StubEncoder from here
WORK = WORK / "align_scale"
BASE = "49d531a"  # main before align was streamed (9d6059c: before its overhead was cut)
DIM = 384  # the default encoder's; the memory series uses ``--small-dim`` (the frame cache is
# 0.33 MB a video at 384-d: 100k videos would be 33 GB of disk), said in the report
TARGET_MB = 1000  # issue #22: peak memory flat in the number of videos, <= 1 GB at any size
BATCH = 1000  # videos per committed caption batch (the engine's default batch size)
# BLAS on one thread in both trees: align's products are small (40 captions x 7k clips), and
# on 2 cores shared with other jobs OpenBLAS's second thread made them ~3x slower (spinning)
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class StubEncoder:
    """The encoder interface align uses, without a model: texts map to fixed random unit
    vectors (so the same text always scores the same in both trees), frames come only from
    the cache, and clips pool as every encoder's default (``window_means``)."""

    image_size = 224
    pooling = "mean"

    def __init__(self, table_size: int = 4096, seed: int = 7, dim: int = DIM) -> None:
        self.dim = dim
        self.name = f"stub-{dim}"
        v = np.random.default_rng(seed).standard_normal((table_size, dim))
        self._table = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    @property
    def frame_encoder(self) -> StubEncoder:
        return self

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        idx = np.fromiter((zlib.crc32(t.encode()) for t in texts), dtype=np.int64,
                          count=len(texts))
        return self._table[idx % len(self._table)]

    def encode_images(self, frames: np.ndarray, batch_size: int = 64) -> np.ndarray:
        raise RuntimeError("the benchmark's frames must all come from the cache")

    def pool_clips(self, frame_emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   renormalize: bool = True) -> np.ndarray:
        from howtocap.encoders.windows import window_means

        return window_means(frame_emb, np.asarray(lo), np.asarray(hi), renormalize)


VERBS = ["add", "cut", "stir", "pour", "mix", "fold", "sand", "drill", "screw", "paint",
         "wipe", "press", "place", "remove", "attach", "measure", "heat", "whisk", "roll",
         "trim"]
NOUNS = ["onions", "flour", "the board", "the hinge", "butter", "the dough", "a screw",
         "the panel", "garlic", "the sauce", "the edge", "the frame", "eggs", "the pipe",
         "sugar", "the fabric", "the lid", "tomatoes", "the wire", "the brush"]
PLACES = ["into the bowl", "onto the tray", "with a knife", "on the table", "in the pan",
          "along the line", "with the drill", "by hand", "into the corner", "over the top"]
CHATTER = ["don't forget to subscribe to my channel", "thanks for watching this video",
           "leave a comment down below"]


def video_file(folder: Path, i: int) -> Path:
    return folder / f"v{i:06d}.mp4"


def synthesize(root: Path, videos: Path, cache: Path, n: int, seed: int = 0,
               dim: int = DIM) -> dict[str, Any]:
    """A captioned run of ``n`` videos (the first ``n`` of a fixed sequence, so a smaller run
    is a prefix of a larger one) whose frames are all in ``cache`` (shared between sizes)."""
    from howtocap.encoders.cache import FrameEmbeddings, cache_path, content_key, save
    from howtocap.engine.rundir import RunDir

    try:
        from howtocap.engine.records import StatusRecord
    except ImportError:  # a tree before shards (``--base``)
        from howtocap.engine.rundir import StatusRecord  # type: ignore[attr-defined,no-redef]
    from howtocap.io.inputs import VideoItem
    from howtocap.schemas import conform

    videos.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True)
    (root / "cache").symlink_to(cache, target_is_directory=True)
    rd = RunDir(root)
    enc = StubEncoder(dim=dim)
    items = []
    captions = 0
    t0 = time.perf_counter()
    for lo in range(0, n, BATCH):
        frames: list[dict[str, Any]] = []
        records = []
        for i in range(lo, min(n, lo + BATCH)):
            rng = np.random.default_rng([seed, i])
            path = video_file(videos, i)
            if not path.exists():
                path.write_bytes(f"synthetic video {i}\n".encode() * 8)
            vid = f"v{i:06d}"
            items.append(VideoItem(vid, path))
            duration = float(rng.uniform(300, 600))
            k = int(rng.integers(30, 51))
            starts = np.sort(rng.uniform(0, duration - 4, k)).round(2)
            texts = [f"{VERBS[a]} {NOUNS[b]} {PLACES[c]}" for a, b, c in
                     zip(rng.integers(0, len(VERBS), k), rng.integers(0, len(NOUNS), k),
                         rng.integers(0, len(PLACES), k), strict=True)]
            for j in np.flatnonzero(rng.random(k) < 0.03):
                texts[j] = CHATTER[int(j) % len(CHATTER)]
            rejected = np.where(rng.random(k) < 0.05, "filler", "").tolist()
            frames.append({"video_id": [vid] * k, "start": starts,
                           "end": starts + rng.uniform(2, 10, k).round(2), "text": texts,
                           "source": ["llm"] * k, "block": np.arange(k) // 8,
                           "model": ["synthetic"] * k, "config_id": [""] * k,
                           "rejected": rejected})
            records.append(StatusRecord(vid, "caption", "ok", config_id="",
                                        metrics={"captions": float(k)}))
            captions += k
            fe_path = cache_path(cache, enc.name, content_key(path), 1.0)
            if not fe_path.exists():
                emb = rng.standard_normal((int(np.ceil(duration)), dim))
                emb /= np.linalg.norm(emb, axis=1, keepdims=True)
                save(fe_path, FrameEmbeddings(emb=emb.astype(np.float16), fps=1.0,
                                              duration=round(duration, 6), partial=False,
                                              encoder=enc.name, key=content_key(path)))
        import pandas as pd

        df = conform(pd.concat([pd.DataFrame(f) for f in frames], ignore_index=True),
                     "captions")
        if hasattr(rd, "commit_batch"):  # the layout before shards (a --base tree)
            rd.commit_batch("caption", ("captions",), records, {"captions": df})
            continue
        rd.record_videos(items[lo:])  # numbered in id order: a batch fills its shards
        shard = rd.shard_of([r.video_id for r in records])
        for k in sorted(set(shard.tolist())):
            mine = [r for r, kk in zip(records, shard, strict=True) if kk == k]
            w = rd.writer("caption", k, ("captions",))
            w.commit(mine, {"captions": df[df["video_id"].isin([r.video_id for r in mine])]})
            w.finish()
    rd.record_videos(items)
    return {"videos": n, "captions": captions, "seconds": round(time.perf_counter() - t0, 1)}


CHILD = r"""
import cProfile, io, json, pstats, resource, sys, time
from pathlib import Path
sys.path.insert(0, {bench!r})
from bench_align_scale import StubEncoder
from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run
from howtocap.engine.rundir import RunDir
run, profile = sys.argv[1], sys.argv[2] == "1"
PARTS = {parts!r}
enc = StubEncoder(dim=int(sys.argv[3]))
rd = RunDir(run, create=False)
prof = cProfile.Profile() if profile else None
t0 = time.perf_counter()
if prof:
    prof.enable()
summary = align_run(rd, [], AlignConfig(), encoders=[enc], progress=False)
if prof:
    prof.disable()
wall = time.perf_counter() - t0
top = {{}}
if prof:
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(25)
        top[key] = s.getvalue()
    named = {{}}
    for (file, _, func), (_, _, _, ct, _) in pstats.Stats(prof).stats.items():
        name = f"{{Path(file).parent.name}}/{{Path(file).stem}}.{{func}}"
        if name in PARTS:
            named[name] = named.get(name, 0.0) + ct
    top["seconds"] = named
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"wall_s": wall, "done": summary.done, "failed": len(summary.failed),
                  "rss_mb": use.ru_maxrss / 1024, "cpu_s": use.ru_utime + use.ru_stime,
                  "profile": top}}))
"""


# Where align's time goes, by cumulative seconds under cProfile (nested: run_stage holds the
# per-video work, process one video, align_video its scoring, reference_z the null z)
PARTS = {"align/run.align_run": "align_run, in all",
         "engine/core.run_stage": "the per-video stage (engine: select, claim, commit)",
         "align/stage.process": "one video (stage.process)",
         "encoders/cache.frame_embeddings_multi": "reading the frame cache",
         "align/filter.align_video": "scoring (align_video)",
         "align/filter.reference_z": "the null z (reference_z, both halves)",
         "engine/core.commit_batch": "committing batches (engine)",
         "align/run.finish_align": "the reduce step (merge, filter, report)",
         "align/report.write_align_report": "the HTML report",
         "align/run.clip_bank": "the reference clip bank",
         "align/run._forget_changed_videos": "caption fingerprints"}


COSTS = r"""
import gc, json, sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from howtocap.align import stream
from howtocap.align.videos import RunVideos
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
rd = RunDir(sys.argv[1], create=False)

def held(make):
    gc.collect()
    tracemalloc.start()
    a0 = pa.total_allocated_bytes()
    obj = make()
    gc.collect()
    cur, peak = tracemalloc.get_traced_memory()
    a1 = pa.total_allocated_bytes()
    tracemalloc.stop()
    return obj, round((cur + a1 - a0) / 2**20, 2), round(peak / 2**20, 2)

def item_list():
    out = []
    for rb in stream.open_parquet(rd.table_path("videos")).iter_batches(
            batch_size=65536, columns=["video_id", "video_path"]):
        for vid, vp in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist()):
            out.append(VideoItem(vid, Path(vp) if vp else None))
    return out

res = {}
items, res["item_list_mb"], res["item_list_peak_mb"] = held(item_list)
res["videos"] = len(items)
del items
vs, res["run_videos_mb"], res["run_videos_peak_mb"] = held(
    lambda: RunVideos.read(rd.table_path("videos")))
some = vs.id_list(list(range(min(100, len(vs)))))

def index():
    rd.newest_of("caption", some, ("status",))
    return rd._indexes["caption"]

_, res["caption_index_mb"], res["caption_index_peak_mb"] = held(index)
print(json.dumps(res))
"""


def driver_costs(template: Path) -> dict[str, Any]:
    """What align's driver holds per video, measured apart (tracemalloc and Arrow's
    allocator) on a run template: the list of ``VideoItem`` s the driver held before,
    ``RunVideos`` now, and the caption stage's record index (``StageIndex``, engine)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", COSTS, str(template)], env=env, cwd=ROOT,
                         text=True, capture_output=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def fresh_copy(template: Path, dest: Path) -> None:
    """The template run without any align output; its cache folder stays the shared one."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(template, dest, symlinks=True)


BUDGET_S = 1200  # a measured run of 10k videos at most (the machine is shared; more videos,
# more time): longer ones are stopped


def template_of(n: int, dim: int = DIM) -> Path:
    return WORK / (f"template-{n}" if dim == DIM else f"template-{n}-d{dim}")


def _rss_mb(pid: int) -> float | None:
    """The resident set of a running process (Linux ``/proc``), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Tracer:
    """Samples a child's RSS against the videos align has committed (the rows of the run's
    align batch manifests, read once per new file) while it runs."""

    def __init__(self, run: Path) -> None:
        self.folder = run / "parts" / "batches" / "align"
        self.seen: dict[str, int] = {}
        self.samples: list[list[float]] = []
        self.t0 = time.perf_counter()

    def videos_done(self) -> int:
        import pyarrow.parquet as pq

        for f in self.folder.glob("*.parquet") if self.folder.is_dir() else []:
            if f.name not in self.seen:
                try:
                    self.seen[f.name] = pq.ParquetFile(f).metadata.num_rows
                except OSError:  # renamed into place between the glob and the read
                    continue
        return sum(self.seen.values())

    def sample(self, pid: int) -> None:
        rss = _rss_mb(pid)
        if rss:  # 0 between fork and exec
            self.samples.append([round(time.perf_counter() - self.t0, 1),
                                 self.videos_done(), round(rss, 1)])


def child(tree: Path, run: Path, profile: bool, dim: int = DIM, budget: float = 0,
          every_s: float = 0) -> dict[str, Any] | None:
    """One align run in its own process; None when it went over its budget (``BUDGET_S``
    per 10k videos). ``every_s``: sample the child's RSS against videos done that often
    (``Tracer``), kept in the row's ``trace`` as ``[seconds, videos done, RSS MB]``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), **ONE_THREAD}
    code = CHILD.replace("{bench!r}", repr(str(HERE))).replace(
        "{parts!r}", repr(sorted(PARTS))).replace("{{", "{").replace("}}", "}")
    tracer = Tracer(run)
    limit = time.perf_counter() + (budget or BUDGET_S)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, str(run),
                                 "1" if profile else "0", str(dim)],
                                env=env, cwd=ROOT, text=True, stdout=out, stderr=err)
        while proc.poll() is None:
            if time.perf_counter() > limit:
                proc.kill()
                proc.wait()
                return None
            if every_s:
                tracer.sample(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=every_s or 1.0)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"child failed ({tree}):\n{err.read()[-3000:]}")
        row = json.loads(out.read().strip().splitlines()[-1])
    if every_s:
        row["trace"] = tracer.samples
    return row


def compare(a: Path, b: Path) -> dict[str, Any]:
    """The two versions' aligned tables (``aligned.parquet`` or the ``aligned/`` folder of
    shard files, or the run directories holding them): same rows, same text columns,
    numbers to 1e-6."""
    import pandas as pd

    a, b = (p if not p.is_dir() or p.name == "aligned" else p / "aligned"
            if (p / "aligned").is_dir() else p / "aligned.parquet" for p in (a, b))
    x, y = pd.read_parquet(a), pd.read_parquet(b)
    out: dict[str, Any] = {"rows": len(x), "same_columns": list(x.columns) == list(y.columns),
                           "same_rows": len(x) == len(y)}
    if not (out["same_columns"] and out["same_rows"]):
        out["equal"] = False
        return out
    diff = 0.0
    exact = True
    for c in x.columns:
        if pd.api.types.is_float_dtype(x[c]):
            u, v = x[c].to_numpy(float), y[c].to_numpy(float)
            if not np.array_equal(np.isnan(u), np.isnan(v)):
                exact = False
            both = ~np.isnan(u) & ~np.isnan(v)
            diff = max(diff, float(np.abs(u[both] - v[both]).max()) if both.any() else 0.0)
        elif not x[c].equals(y[c]):
            exact = False
    out["max_abs_diff"] = diff
    out["equal"] = bool(exact and diff <= 1e-6)
    return out


def plot(rows: list[dict[str, Any]], path: Path,
         memory_rows: Sequence[dict[str, Any]] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traced = sorted((r for r in memory_rows if r["version"] == "after" and r.get("trace")),
                    key=lambda r: r["videos"])
    fig, axes = plt.subplots(1, 3 if traced else 2, figsize=(14 if traced else 9, 3.5))
    for version, style in (("before", "o--"), ("after", "s-")):
        rs = sorted((r for r in rows if r["version"] == version), key=lambda r: r["videos"])
        xs = [r["videos"] for r in rs]
        axes[0].plot(xs, [r["captions_per_s"] for r in rs], style, label=version)
        axes[1].plot(xs, [r["rss_mb"] for r in rs], style, label=f"{version}, {DIM}-d")
        ms = sorted((r for r in memory_rows if r["version"] == version),
                    key=lambda r: r["videos"])
        if ms:
            axes[1].plot([r["videos"] for r in ms], [r["rss_mb"] for r in ms],
                         style[0] + ":", label=f"{version}, {ms[0]['dim']}-d")
    axes[1].axhline(TARGET_MB, color="tab:red", linestyle="--", label="target (#22)")
    for r in traced:  # RSS over each run's own time, the sizes on one axis
        t = r["trace"]
        axes[2].plot([s[0] / t[-1][0] for s in t], [s[2] for s in t],
                     label=f"{r['videos']:,} videos, {r['dim']}-d")
        done = next((s[0] / t[-1][0] for s in t if s[1] >= r["videos"]), None)
        if done is not None:
            axes[2].axvline(done, color=axes[2].lines[-1].get_color(), lw=0.6, ls=":")
    if traced:
        axes[2].axhline(TARGET_MB, color="tab:red", linestyle="--")
        axes[2].set_xlabel("share of the run's time (dotted: scoring done, reduce step)")
        axes[2].set_ylabel("RSS, MB (after)")
        axes[2].set_ylim(bottom=0)
        axes[2].legend()
    for ax, label in zip(axes[:2], ("captions / s (higher is better)", "peak RSS, MB"),
                         strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("videos in the run")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle("align over cached embeddings: our own overhead")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def top_lines(text: str, n: int = 12) -> list[str]:
    """The table lines of a pstats dump (header kept), shortened for the report."""
    lines = text.splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip().startswith("ncalls")), 0)
    return [s.rstrip() for s in lines[start:start + n + 1]]


def profile(trees: dict[str, Path], n: int) -> dict[str, Any]:
    """One profiled child per version on the ``n``-video run: the top entries and the
    seconds of the ``PARTS`` (cumulative, so nested)."""
    out: dict[str, Any] = {}
    for version, tree in trees.items():
        run = WORK / f"run-{version}"
        fresh_copy(WORK / f"template-{n}", run)
        done = child(tree, run, profile=True, dim=DIM)
        if done is None:
            raise SystemExit(f"the profiled {version} run went over {BUDGET_S} s")
        prof = done["profile"]
        out[version] = {"tottime": top_lines(prof["tottime"]),
                        "cumulative": top_lines(prof["cumulative"]),
                        "seconds": {PARTS[k]: round(v, 2)
                                    for k, v in sorted(prof.get("seconds", {}).items(),
                                                       key=lambda kv: -kv[1])}}
    return out


def kept_table(version: str, dim: int, n: int) -> Path:
    """Where a run's aligned.parquet is kept for a comparison made later (``--add-memory``
    of two ``--memory-versions`` runs)."""
    return WORK / f"aligned-{version}-d{dim}-{n}.parquet"


def series(trees: dict[str, Path], sizes: Sequence[int], dim: int, before_max: int,
           equal: dict[str, Any], key: str = "") -> list[dict[str, Any]]:
    """Both versions (those of ``trees``) back to back at every size (the base commit up to
    ``before_max`` videos), each run's aligned.parquet compared into ``equal`` (under
    ``key`` + size) and kept (``kept_table``)."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for n in sizes:  # in the order given (the largest first, when it matters most)
        for version, tree in trees.items():  # back to back on the same inputs
            if version == "before" and n > before_max:
                continue
            run = WORK / (f"run-{version}" if dim == DIM else f"run-{version}-d{dim}")
            fresh_copy(template_of(n, dim), run)
            budget = BUDGET_S * max(1.0, n / 10_000)
            row = child(tree, run, profile=False, dim=dim, budget=budget,
                        every_s=0 if dim == DIM else 2.0)
            if row is None:
                print(f"{version:6s} {n:6,d} videos: over {budget:.0f} s, stopped", flush=True)
                continue
            row.pop("profile")
            if dim != DIM:
                shutil.copyfile(run / "aligned.parquet", kept_table(version, dim, n))
            st = pd.read_parquet(run / "aligned.parquet", columns=["video_id"])
            row.update(version=version, videos=n, captions=len(st), dim=dim,
                       captions_per_s=len(st) / row["wall_s"],
                       captions_per_cpu_s=len(st) / row["cpu_s"],
                       ms_per_video=1000 * row["wall_s"] / n, load_avg=os.getloadavg()[0])
            rows.append(row)
            print(f"{version:6s} {n:6,d} videos {dim}-d {row['captions_per_s']:8.0f} "
                  f"captions/s {row['captions_per_cpu_s']:8.0f} per CPU s "
                  f"{row['rss_mb']:6.0f} MB", flush=True)
        if {r["version"] for r in rows if r["videos"] == n} == {"before", "after"}:
            tail = "" if dim == DIM else f"-d{dim}"
            equal[f"{key}{n}"] = compare(WORK / f"run-before{tail}", WORK / f"run-after{tail}")
            print(f"  aligned.parquet before vs after: {equal[f'{key}{n}']}", flush=True)
    return rows


def compare_kept(rows: Sequence[dict[str, Any]], equal: dict[str, Any]) -> None:
    """The two versions' kept aligned.parquet of each size both measured (the memory
    series run a version at a time) compared into ``equal``, where not compared yet."""
    for n in sorted({r["videos"] for r in rows}):
        got = {r["version"]: r for r in rows if r["videos"] == n}
        if set(got) != {"before", "after"}:
            continue
        dim = got["after"]["dim"]
        a, b = kept_table("before", dim, n), kept_table("after", dim, n)
        if f"d{dim}-{n}" not in equal and a.exists() and b.exists():
            equal[f"d{dim}-{n}"] = compare(a, b)
            print(f"  {n:,} videos, aligned.parquet before vs after: "
                  f"{equal[f'd{dim}-{n}']}", flush=True)


def growth(rows: list[dict[str, Any]], version: str, largest_two: bool = False
           ) -> float | None:
    """Peak RSS growth per 10k videos of ``version``: between its smallest and largest run,
    or (``largest_two``) its two largest, where the windows have long stopped filling."""
    rs = sorted((r for r in rows if r["version"] == version), key=lambda r: r["videos"])
    if len(rs) < 2:
        return None
    a, b = (rs[-2], rs[-1]) if largest_two else (rs[0], rs[-1])
    return round(1e4 * (b["rss_mb"] - a["rss_mb"]) / (b["videos"] - a["videos"]), 1)


def phases(row: dict[str, Any]) -> dict[str, Any]:
    """A traced run's RSS by phase: while it scored (fewer videos committed than the run
    has), the peak of each tenth of its videos and the least-squares growth per 10k videos
    over its last nine tenths (the first fills the windows); after (the reduce step: merge,
    filter, report). Samples every 2 s, so peaks are what a sample saw (``rss_mb`` is the
    process's true peak)."""
    n, trace = row["videos"], row.get("trace") or []
    scoring = [(d, m) for _, d, m in trace if d < n]
    after = [m for _, d, m in trace if d >= n]
    out: dict[str, Any] = {"scoring_peak_mb": round(max((m for _, m in scoring), default=0)),
                           "reduce_peak_mb": round(max(after, default=0))}
    tenths = [max((m for d, m in scoring if k * n // 10 <= d < (k + 1) * n // 10),
                  default=None) for k in range(10)]
    out["scoring_tenths_mb"] = [None if m is None else round(m) for m in tenths]
    late = [(d, m) for d, m in scoring if d >= n // 10]
    if n >= 100_000 and len({d for d, _ in late}) >= 3:
        slope = np.polyfit([d for d, _ in late], [m for _, m in late], 1)[0]
        out["scoring_growth_per_10k_mb"] = round(float(slope) * 1e4, 1)
    return out


def memory(args: argparse.Namespace, trees: dict[str, Path], main: list[dict[str, Any]],
           equal: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS against the number of videos: the main sizes (384-d) and the memory series
    (``--memory-videos`` at ``--small-dim``), growth per 10k videos, the target."""
    rows = series(trees, args.memory_videos, args.small_dim, args.memory_before_max, equal,
                  key=f"d{args.small_dim}-")
    return finish_memory(args, rows, main)


def finish_memory(args: argparse.Namespace, rows: list[dict[str, Any]],
                  main: list[dict[str, Any]]) -> dict[str, Any]:
    """The memory section from the series' rows and the main (384-d) rows: peaks, growth,
    each traced run's phases (``phases``) and the extrapolation to 1.2M videos from the two
    largest runs."""
    out: dict[str, Any] = {"dim": args.small_dim, "base": args.base,
                           "videos": sorted({r["videos"] for r in rows}),
                           "rows": rows, "target_mb": TARGET_MB}
    for version in ("before", "after"):
        got = {str(r["videos"]): round(r["rss_mb"]) for r in rows if r["version"] == version}
        out[f"{version}_rss_mb"] = got
        out[f"{version}_growth_per_10k_mb"] = growth(rows, version)
        out[f"{version}_growth_per_10k_mb_384d"] = growth(
            [r for r in main if r["videos"] in (min(args.videos), max(args.videos))], version)
    out["after_phases"] = {str(r["videos"]): phases(r) for r in rows
                           if r["version"] == "after" and r.get("trace")}
    largest = max((r for r in rows if r["version"] == "after"), key=lambda r: r["videos"],
                  default=None)
    late = growth(rows, "after", largest_two=True)
    if largest is not None and late is not None:
        out["after_largest_mb"] = round(largest["rss_mb"])
        out["after_growth_per_10k_mb_largest_two"] = late
        out["after_at_1_2m_mb"] = round(largest["rss_mb"] + max(0.0, late)
                                        * (1.2e6 - largest["videos"]) / 1e4)
    return out


def summarize(rows: list[dict[str, Any]], videos: Sequence[int]) -> dict[str, Any]:
    """Per size, both versions' figures (captions/s, ms and CPU, peak RSS)."""

    def get(version: str, n: int) -> dict[str, Any]:
        return next((r for r in rows if (r["version"], r["videos"]) == (version, n)),
                    {"captions_per_s": math.nan, "ms_per_video": math.nan, "rss_mb": math.nan})

    def fig(x: float, nd: int) -> float | None:
        return None if math.isnan(x) else round(x, nd)

    return {str(n): {"before_captions_per_s": fig(get("before", n)["captions_per_s"], 0),
                        "after_captions_per_s": fig(get("after", n)["captions_per_s"], 0),
                        "speedup": fig(get("after", n)["captions_per_s"]
                                       / get("before", n)["captions_per_s"], 2),
                        "before_ms_per_video": fig(get("before", n)["ms_per_video"], 2),
                        "after_ms_per_video": fig(get("after", n)["ms_per_video"], 2),
                        "before_rss_mb": fig(get("before", n)["rss_mb"], 0),
                        "after_rss_mb": fig(get("after", n)["rss_mb"], 0),
                        # CPU seconds: steadier than wall time on shared cores
                        "before_captions_per_cpu_s": fig(get("before", n).get(
                            "captions_per_cpu_s", math.nan), 0),
                        "after_captions_per_cpu_s": fig(get("after", n).get(
                            "captions_per_cpu_s", math.nan), 0),
                        "after_cpu_ms_per_video": fig(1000 * get("after", n).get(
                            "cpu_s", math.nan) / n, 2)}
               for n in videos}


def measure(args: argparse.Namespace, trees: dict[str, Path]) -> dict[str, Any]:
    """Both versions back to back at every size, the tables compared, then the memory series
    and the profiles."""
    load0 = os.getloadavg()
    equal: dict[str, Any] = {}
    rows = series(trees, args.videos, DIM, args.before_max, equal)
    mem = None
    if args.memory_from:  # the memory series, measured by a ``--memory-only`` run
        got = json.loads(Path(args.memory_from).read_text())
        equal.update(got["equal"])
        mem = finish_memory(args, got["rows"], rows)
    elif args.memory_videos:
        mem = memory(args, trees, rows, equal)
    n0 = min(args.videos)
    profiles = profile(trees, n0)
    load1 = os.getloadavg()

    summary = summarize(rows, args.videos)
    cache = WORK / "cache"
    sizes = [q.stat().st_size for q in cache.rglob("*.npz")]
    files_per_video = len(sizes) / max(args.videos)
    return {"machine": machine(),
            "load_avg": [round(load0[0], 2), round(load1[0], 2)], "base": args.base,
            "videos": sorted(args.videos), "largest": summary[str(max(args.videos))],
            "summary": summary, "equal": equal, "rows": rows,
            "cache": {"files_per_video": files_per_video, "encoders": 1,
                      "files_at_1_2m_videos_m": round(1.2 * files_per_video, 2),
                      "bytes_per_video_mb": round(sum(sizes) / max(1, len(sizes)) / 2**20, 3),
                      "tb_at_1_2m_videos": round(1.2e6 * sum(sizes) / max(1, len(sizes))
                                                 / 1e12, 2)},
            "blas_threads": 1, "before_max": args.before_max, "profile_videos": n0,
            "memory": mem,
            "profile": profiles,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def write_reports(result: dict[str, Any]) -> None:
    """align_scale.{json,md,png} from the measurements (the md and plot only from the json)."""
    write_json("align_scale", result)
    rows, equal, n0 = result["rows"], result["equal"], result["profile_videos"]

    def get(version: str, n: int) -> dict[str, Any]:
        return next(r for r in rows if (r["version"], r["videos"]) == (version, n))

    def cpu(r: dict[str, Any] | None) -> str:
        return f"{r['captions_per_cpu_s']:,.0f}" if r and "captions_per_cpu_s" in r else "–"

    load0, load1 = result["load_avg"]
    lines = ["# align over cached embeddings: our own overhead (issue #22)", "",
             f"{result['machine']}; load average {load0:.1f} → {load1:.1f} (three other "
             f"engineers' jobs add time); BLAS on one thread; before = commit "
             f"{result['base']}, after = this tree, back to back in one run on the same run "
             "directory; a stub text encoder and frames from the cache, so nothing but "
             "align's own code is timed. How to read: benchmarks/scale/bench_align_scale.py "
             "docstring.", "",
             "| videos | captions | before captions/s | after captions/s | speedup | "
             "before ms/video | after ms/video | before peak RSS | after peak RSS | "
             "aligned.parquet equal |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for n in result["videos"]:
        a = get("after", n)
        b = next((r for r in rows if (r["version"], r["videos"]) == ("before", n)), None)
        eq = equal.get(str(n))
        if b is None or eq is None:
            lines.append(f"| {n:,} | {a['captions']:,} | not run | {a['captions_per_s']:,.0f} "
                         f"| – | not run | {a['ms_per_video']:.2f} | not run | "
                         f"{a['rss_mb']:.0f} MB | – |")
            continue
        lines.append(f"| {n:,} | {a['captions']:,} | {b['captions_per_s']:,.0f} | "
                     f"{a['captions_per_s']:,.0f} | "
                     f"{a['captions_per_s'] / b['captions_per_s']:.2f}x | "
                     f"{b['ms_per_video']:.2f} | {a['ms_per_video']:.2f} | "
                     f"{b['rss_mb']:.0f} MB | {a['rss_mb']:.0f} MB | "
                     f"{'yes' if eq['equal'] else 'NO'} "
                     f"(max diff {eq.get('max_abs_diff', float('nan')):.1e}) |")
    if any(str(n) not in equal for n in result["videos"]):
        lines += ["", f"Not run: the base commit above {result['before_max']:,} videos, or a "
                  f"run stopped at the {BUDGET_S // 60}-minute budget of one measured run on "
                  "this shared machine."]
    def before_row(n: int) -> dict[str, Any] | None:
        return next((r for r in rows if (r["version"], r["videos"]) == ("before", n)), None)

    lines += ["", "Captions per CPU second of the align process (steadier than wall time on "
              "shared cores), before → after: " + "; ".join(
                  f"{n:,} videos {cpu(before_row(n))} → {cpu(get('after', n))}"
                  for n in result["videos"]) + "."]
    mem = result.get("memory")
    if mem:
        lines += memory_lines(result, mem)
    c = result["cache"]
    lines += ["", f"The frame cache: {c['files_per_video']:g} file per video and encoder "
              f"({c['bytes_per_video_mb']:.2f} MB at {DIM}-d float16), so "
              f"{c['files_at_1_2m_videos_m']:g}M files ({c['tb_at_1_2m_videos']:g} TB) at "
              "1.2M videos per encoder.", "",
              f"## Where the time goes ({n0:,} videos, cProfile, cumulative seconds)", "",
              "| part | before s | after s |", "|---|---:|---:|"]
    prof = result["profile"]
    for part in prof["after"]["seconds"]:
        lines.append(f"| {part} | {prof['before']['seconds'].get(part, float('nan')):.1f} | "
                     f"{prof['after']['seconds'][part]:.1f} |")
    lines.append("")
    for version in ("before", "after"):
        lines += [f"### Top entries, {version}, by own time", "", "```",
                  *prof[version]["tottime"], "```", "",
                  f"### Top entries, {version}, by cumulative time", "", "```",
                  *prof[version]["cumulative"], "```", ""]
    write_md("align_scale", lines, echo=False)
    plot(rows, OUT / "align_scale.png", (result.get("memory") or {}).get("rows", ()))
    print("\n".join(lines[:14]))


def memory_lines(result: dict[str, Any], mem: dict[str, Any]) -> list[str]:
    """The report's memory section: peak RSS per size, growth per 10k videos, the target."""
    lines = ["", "## Peak memory against the number of videos", "",
             "Peak RSS of the whole align process (`ru_maxrss`). The "
             f"{' and '.join(f'{n:,}' for n in result['videos'])}-video runs above use "
             f"{DIM}-d frames; the memory series below uses a {mem['dim']}-d stub "
             f"(frame cache {mem['dim'] * 2 * 450 / 1e3:.0f} KB a video instead of "
             f"{DIM * 2 * 450 / 1e6:.2f} MB, so {max(mem['videos']):,} videos fit on disk); "
             "the dimension changes the per-video frames and the reference clip bank, not "
             "what grows with the run."
             + (f" Before = commit {mem['base']} here (each version measured in its own "
                "process)." if "base" in mem else ""),
             "",
             "| videos | stub dim | captions | before peak RSS | after peak RSS | "
             "after captions/s | after captions per CPU s | load average |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted((r for r in mem["rows"] if r["version"] == "after"),
                    key=lambda r: r["videos"]):
        b = next((x for x in mem["rows"] if (x["version"], x["videos"]) ==
                  ("before", r["videos"])), None)
        before = f"{b['rss_mb']:.0f} MB" if b else "not run"
        lines.append(f"| {r['videos']:,} | {r['dim']} | {r['captions']:,} | {before} | "
                     f"{r['rss_mb']:.0f} MB | {r['captions_per_s']:,.0f} | "
                     f"{r['captions_per_cpu_s']:,.0f} | {r['load_avg']:.1f} |")

    def g(x: float | None) -> str:
        return "–" if x is None else f"{x:+.1f} MB"

    skipped = [r for r in mem["rows"] if r["version"] == "after" and str(r["videos"])
               not in mem["before_rss_mb"]]
    same_base = mem.get("base", result["base"]) == result["base"]  # else the 384-d rows'
    # base is another commit: its growth says nothing of this series' base
    grow = mem["before_growth_per_10k_mb"] or (mem["before_growth_per_10k_mb_384d"]
                                               if same_base else None)
    anchor = {str(r["videos"]): r["rss_mb"] for r in result["rows"] if r["version"] == "before"}
    if skipped and grow is None:
        lines += ["", "Not run: the base commit at " + ", ".join(
            f"{r['videos']:,} videos" for r in skipped) + " (the time of these shared cores "
            "went to the after run)."]
    if skipped and grow is not None and (mem["before_rss_mb"] or anchor):
        n0, rss0 = max((int(k), v) for k, v in (mem["before_rss_mb"] or anchor).items())
        lines += ["", "Not run: the base commit at " + ", ".join(
            f"{r['videos']:,} videos (≈{rss0 + grow * (r['videos'] - n0) / 1e4:,.0f} MB at "
            "its growth per 10k videos, and hours on these shared cores)" for r in skipped)
            + "."]

    if "driver_mb" in mem:
        c = mem["driver_mb"]
        lines += ["", f"What the driver holds per video, measured apart on the "
                  f"{c['videos']:,}-video run (tracemalloc and Arrow's allocator): the list of "
                  f"`VideoItem`s it held before {c['item_list_mb']:.1f} MB "
                  f"(peak {c['item_list_peak_mb']:.1f} MB while read), the compact "
                  f"`RunVideos` now {c['run_videos_mb']:.1f} MB (peak "
                  f"{c['run_videos_peak_mb']:.1f} MB while read); the caption stage's record "
                  f"index (`StageIndex`, engine/records.py) {c['caption_index_mb']:.1f} MB "
                  f"(peak {c['caption_index_peak_mb']:.1f} MB while built), and the align "
                  "stage's is of the same kind."]
    ph = mem.get("after_phases") or {}
    if ph:
        lines += ["", "RSS while it runs (after; `/proc/PID/status` every 2 s against the "
                  "videos align has committed, read from its batch manifests): the peak while "
                  "it scores, the peak of the reduce step after it (merge, filter, report), the "
                  "peak of each tenth of the videos while it scores, and the least-squares "
                  "growth per 10k videos over the last nine tenths of the scoring (the first "
                  "fills the windows).", "",
                  "| videos | scoring peak | reduce-step peak | peak of each tenth of the "
                  "videos, MB | growth while scoring, per 10k videos |",
                  "|---:|---:|---:|---|---:|"]
        for n, p in sorted(ph.items(), key=lambda kv: int(kv[0])):
            tenths = " ".join("–" if m is None else f"{m}" for m in p["scoring_tenths_mb"])
            lines.append(f"| {int(n):,} | {p['scoring_peak_mb']} MB | {p['reduce_peak_mb']} MB"
                         f" | {tenths} | {g(p.get('scoring_growth_per_10k_mb'))} |")
    lines += ["", f"Growth per 10k videos: after {g(mem['after_growth_per_10k_mb'])} "
              f"({mem['dim']}-d series, smallest → largest), "
              f"{g(mem.get('after_growth_per_10k_mb_largest_two'))} (its two largest runs), "
              f"{g(mem['after_growth_per_10k_mb_384d'])} ({DIM}-d, "
              f"{min(result['videos']):,} → {max(result['videos']):,}); before "
              f"{g(mem['before_growth_per_10k_mb'])} ({mem['dim']}-d series), "
              f"{g(mem['before_growth_per_10k_mb_384d'])} ({DIM}-d, commit {result['base']}).",
              "",
              f"Target (issue #22): peak memory flat in the number of videos, ≤ "
              f"{mem['target_mb']:,} MB at any size."
              + (f" After: {mem['after_largest_mb']:,} MB at {max(mem['videos']):,} videos; "
                 "at the growth between the two largest runs, "
                 f"≈{mem['after_at_1_2m_mb']:,} MB at 1.2M videos (extrapolated, not run)."
                 if "after_at_1_2m_mb" in mem else "")]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--keep", action="store_true", help="keep benchmarks/work/align_scale")
    ap.add_argument("--before-max", type=int, default=10_000,
                    help="run the base commit only up to this many videos")
    ap.add_argument("--memory-videos", type=int, nargs="*", default=[300_000, 100_000, 10_000],
                    help="the peak-memory series (after, and before up to "
                         "--memory-before-max), at --small-dim")
    ap.add_argument("--small-dim", type=int, default=64,
                    help="the stub's dimension in the memory series")
    ap.add_argument("--memory-before-max", type=int, default=10_000,
                    help="run the base commit in the memory series only up to this size")
    ap.add_argument("--make-only", action="store_true", help="only build the run templates")
    ap.add_argument("--memory-only", metavar="FILE",
                    help="run only the memory series, its rows and comparisons into FILE")
    ap.add_argument("--memory-from", metavar="FILE",
                    help="take the memory series from a --memory-only run's FILE")
    ap.add_argument("--add-memory", metavar="FILE", nargs="+",
                    help="add --memory-only runs' FILEs to the existing align_scale.json")
    ap.add_argument("--memory-versions", nargs="+", choices=["before", "after"],
                    default=["before", "after"],
                    help="the versions --memory-only runs (one each: side by side)")
    ap.add_argument("--profile-only", action="store_true",
                    help="re-run only the profiles into the existing align_scale.json")
    args = ap.parse_args()
    if args.add_memory:  # the memory series measured apart, added to the main results
        result = load_results("align_scale")
        got: dict[str, Any] = {"rows": [], "equal": {}}
        for f in args.add_memory:  # one file, or one per version (--memory-versions)
            one = json.loads(Path(f).read_text())
            got["rows"] += one["rows"]
            got["equal"].update(one["equal"])
        compare_kept(got["rows"], got["equal"])
        costs = driver_costs(template_of(max(r["videos"] for r in got["rows"]),
                                         args.small_dim))
        result["equal"] = {k: v for k, v in result["equal"].items() if not k.startswith("d")}
        result["equal"].update(got["equal"])
        result["memory"] = finish_memory(args, got["rows"], result["rows"])
        result["memory"]["driver_mb"] = costs
        result["summary"] = summarize(result["rows"], result["videos"])
        result["largest"] = result["summary"][str(max(result["videos"]))]
        write_reports(result)
        return
    sys.path[:0] = [str(ROOT / "src")]
    WORK.mkdir(parents=True, exist_ok=True)
    cache, videos = WORK / "cache", WORK / "videos"
    cache.mkdir(exist_ok=True)
    for n, dim in sorted({*((n, DIM) for n in args.videos),
                          *((n, args.small_dim) for n in args.memory_videos)}):
        template = template_of(n, dim)
        if not (template / "videos.parquet").exists():
            shutil.rmtree(template, ignore_errors=True)
            made = synthesize(template, videos, cache if dim == DIM else WORK / f"cache-{dim}",
                              n, dim=dim)
            print(f"made a run of {n:,} videos at {dim}-d: {made}", flush=True)
    if args.make_only:
        return
    trees = {"before": add_worktree(args.base, WORK), "after": ROOT}
    if args.memory_only:  # the base worktree stays for the main run
        equal: dict[str, Any] = {}
        rows = series({v: trees[v] for v in args.memory_versions}, args.memory_videos,
                      args.small_dim, args.memory_before_max, equal, key=f"d{args.small_dim}-")
        Path(args.memory_only).write_text(json.dumps({"rows": rows, "equal": equal},
                                                     indent=2) + "\n")
        return
    try:
        if args.profile_only:
            result = load_results("align_scale")
            result["profile"] = profile(trees, result["profile_videos"])
        else:
            result = measure(args, trees)
    finally:
        remove_worktree(trees["before"])
    write_reports(result)
    if not args.keep:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
