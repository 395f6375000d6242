"""Clip export benchmark: ``howtocap export --format clips`` on generated 360p videos.

Measured on the same rows in one run: clips/s of ``--cut fast`` (stream copy) and ``--cut
exact`` (re-encode) with 1 and 2 workers; the baseline is the existing ``--format webdataset``
frames export (4 JPEG frames per clip) of the same rows. Every exported clip's duration is read
back by ffprobe and compared with its window: ``exact`` must be within 0.1 s, ``fast`` within
one GOP of the video it was cut from (the videos have GOPs of 1, 2 and 5 s). Also: shard sizes,
and the export process's peak memory for 4x more clips (it must stay flat: clips wait on disk,
not in memory). Other jobs share this 2-core machine, so every rate is the best of
``REPEATS`` runs.

Run: ``.venv/bin/python benchmarks/speed/bench_clips.py``
-> ``benchmarks/results/clips.{json,md,png}``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import pandas as pd
from _harness import RESULTS, best_time, machine, md_table, write_json, write_md, write_rows

from howtocap.clips.config import ClipsConfig
from howtocap.clips.export import export_clips
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.io.webdataset import export_webdataset
from howtocap.schemas import conform

FPS, W, H, SECONDS = 25, 640, 360, 60.0
GOPS = (25, 50, 125)  # frames: 1, 2 and 5 s, as web videos have
N_VIDEOS, WINDOWS, SHARD = 9, 8, 24
REPEATS = {"fast": 2, "exact": 1}  # exact is slow: one run each
HOWTOCAP = [sys.executable, "-m", "howtocap.cli"]


def make_video(path: Path, gop: int, seed: int) -> None:
    """A moving test pattern + tone, H.264/AAC 360p, fixed GOP (like a 360p web download)."""
    subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"testsrc2=size={W}x{H}:rate={FPS}", "-f", "lavfi", "-i",
                    f"sine=frequency={300 + 40 * seed}:sample_rate=44100", "-t", str(SECONDS),
                    "-c:v", "libx264", "-preset", "veryfast", "-g", str(gop), "-keyint_min",
                    str(gop), "-sc_threshold", "0", "-pix_fmt", "yuv420p", "-c:a", "aac",
                    "-b:a", "96k", str(path)], check=True)


def make_run(root: Path, videos: list[tuple[str, Path]], windows: int) -> RunDir:
    """Kept aligned captions: ``windows`` windows of 2-8 s per video at random places."""
    rng = random.Random(0)
    rd = RunDir(root)
    rd.record_videos([VideoItem(v, p) for v, p in videos])
    rows = []
    for vid, _ in videos:
        for k in range(windows):
            length = rng.uniform(2.0, 8.0)
            start = round(rng.uniform(0.0, SECONDS - length), 2)
            rows.append({"video_id": vid, "start": start, "end": round(start + length, 2),
                         "text": f"step {k} of {vid}", "orig_start": start,
                         "orig_end": start + length, "offset": 0.0, "score": 0.5, "kept": True,
                         "encoders": "x", "source": "llm", "block": 0, "model": "m"})
    write_rows(rd, "aligned", conform(pd.DataFrame(rows), "aligned"))
    return rd


def ffprobe_duration(path: Path) -> float:
    res = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                          "-of", "csv=p=0", str(path)], capture_output=True, text=True,
                         check=True)
    return float(res.stdout)


def durations(out: Path, gop_of: dict[str, float], tmp: Path) -> dict:
    """Every clip's ffprobe duration against its window (and, for fast, its video's GOP)."""
    index = pd.read_parquet(out / "index.parquet").set_index("key")
    errs, gops = [], []
    for shard in json.loads((out / "clips.json").read_text())["shards"]:
        with tarfile.open(out / shard) as tf:
            for m in tf.getmembers():
                if not m.name.endswith(".mp4"):
                    continue
                r = index.loc[m.name[:-4]]
                path = tmp / m.name
                fh = tf.extractfile(m)
                assert fh is not None
                path.write_bytes(fh.read())
                errs.append(ffprobe_duration(path) - (r["end"] - r["start"]))
                gops.append(gop_of[r["video_id"]])
                path.unlink()
    e, g = np.array(errs), np.array(gops)
    a = np.abs(e)
    lead = {}
    if index["keyframe"].notna().any():  # fast: the packets stored before the window
        gop = index["video_id"].map(gop_of)
        secs = index["start"] - index["keyframe"]
        lead = {"max_lead_s": round(float(secs.max()), 3),
                "mean_lead_s": round(float(secs.mean()), 3),
                "max_lead_in_gops": round(float((secs / gop).max()), 3)}
    return {**lead, "clips": len(errs), "max_abs_error_s": round(float(a.max()), 4),
            "mean_abs_error_s": round(float(a.mean()), 4),
            "within_0_1_s": int((a <= 0.1).sum()),
            "within_one_gop": int((a <= g + 1e-6).sum()),
            "max_error_in_gops": round(float((a / g).max()), 3),
            "errors_s": [round(e, 4) for e in errs]}


def peak_rss_mb(run: Path, out: Path) -> float:
    """Peak resident memory of one CLI export process (``--cut fast``), from ``wait4``."""
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.Popen([*HOWTOCAP, "export", str(run), "--format", "clips", "--out",
                             str(out), "--cut", "fast", "--shard-size", str(SHARD), "--quiet"],
                            env={**os.environ, "NO_COLOR": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return round(usage.ru_maxrss / 1024, 1)


def main() -> None:
    out: dict = {"machine": machine("shared with other jobs"),
                 "videos": {"n": N_VIDEOS, "seconds": SECONDS, "size": f"{W}x{H}", "fps": FPS,
                            "gops_s": [g / FPS for g in GOPS]},
                 "repeats": REPEATS}
    with tempfile.TemporaryDirectory(prefix="bench-clips-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "media").mkdir()
        videos, gop_of = [], {}
        for i in range(N_VIDEOS):
            vid, gop = f"v{i:02d}", GOPS[i % len(GOPS)]
            make_video(tmp / "media" / f"{vid}.mp4", gop, i)
            videos.append((vid, tmp / "media" / f"{vid}.mp4"))
            gop_of[vid] = gop / FPS
        out["videos"]["mb"] = round(sum(p.stat().st_size for _, p in videos) / 1e6, 2)
        rd = make_run(tmp / "run", videos, WINDOWS)
        rows = rd.table("aligned")
        n_clips = len(rows)
        out["clips"] = n_clips
        out["window_seconds"] = round(float((rows["end"] - rows["start"]).sum()), 1)

        def timed(name: str, fn, repeats: int) -> float:  # noqa: ANN001 - a closure
            secs, _ = best_time(fn, repeats)
            print(f"{name}: {secs:.2f} s", file=sys.stderr)
            return secs

        modes: dict = {}
        for cut in ("fast", "exact"):
            for workers in (1, 2):
                dest = tmp / f"{cut}{workers}"

                def run(cut: str = cut, workers: int = workers, dest: Path = dest) -> None:
                    shutil.rmtree(dest, ignore_errors=True)
                    export_clips(rd.root, dest, config=ClipsConfig(
                        cut=cut, workers=workers, shard_size=SHARD), progress=False)

                secs = timed(f"{cut} w{workers}", run, REPEATS[cut])
                modes[f"{cut}_w{workers}"] = {"cut": cut, "workers": workers,
                                              "seconds": round(secs, 3),
                                              "clips_per_s": round(n_clips / secs, 2)}
            meta = json.loads((dest / "clips.json").read_text())
            sizes = list(meta["shard_bytes"].values())
            modes[f"{cut}_w2"]["shards"] = {
                "n": len(sizes), "clips_per_shard": SHARD,
                "mb": [round(b / 1e6, 2) for b in sizes],
                "mean_mb": round(float(np.mean(sizes)) / 1e6, 2),
                "mb_per_clip": round(sum(sizes) / 1e6 / n_clips, 3),
                "mb_per_window_minute": round(sum(sizes) / 1e6 / out["window_seconds"] * 60,
                                              2)}
            out[f"durations_{cut}"] = durations(dest, gop_of, tmp)
            print(json.dumps({k: v for k, v in out[f"durations_{cut}"].items()
                              if k != "errors_s"}), file=sys.stderr)
        out["modes"] = modes

        def baseline() -> None:
            shutil.rmtree(tmp / "wds", ignore_errors=True)
            export_webdataset(rd.root, tmp / "wds", frames_per_clip=4, image_size=224,
                              shard_size=SHARD, progress=False)

        secs = timed("webdataset frames", baseline, REPEATS["fast"])
        out["baseline_webdataset_frames"] = {
            "seconds": round(secs, 3), "clips_per_s": round(n_clips / secs, 2),
            "mb": round(sum(p.stat().st_size for p in (tmp / "wds").glob("*.tar")) / 1e6, 2)}
        for m in modes.values():
            m["vs_webdataset_frames"] = round(m["clips_per_s"]
                                              / out["baseline_webdataset_frames"]["clips_per_s"],
                                              2)

        # memory: the same export over 4x the clips (same videos, more windows each)
        big = make_run(tmp / "run4", videos, 4 * WINDOWS)
        out["memory"] = {"clips": [n_clips, 4 * n_clips],
                         "peak_rss_mb": [peak_rss_mb(rd.root, tmp / "m1"),
                                         peak_rss_mb(big.root, tmp / "m4")]}
        out["memory"]["ratio"] = round(out["memory"]["peak_rss_mb"][1]
                                       / out["memory"]["peak_rss_mb"][0], 3)
        print(json.dumps(out["memory"]), file=sys.stderr)

    write_json("clips", out)
    write_md("clips", report(out))
    plot(out)


def report(out: dict) -> list[str]:
    b = out["baseline_webdataset_frames"]
    md = ["# Clip export benchmark", "", f"Machine: {out['machine']}", "",
          f"{out['videos']['n']} generated videos ({out['videos']['seconds']:.0f} s each, "
          f"{out['videos']['size']}, {out['videos']['fps']} fps, H.264 + AAC, GOPs of "
          f"{', '.join(f'{g:g}' for g in out['videos']['gops_s'])} s; "
          f"{out['videos']['mb']} MB), {out['clips']} windows of 2-8 s "
          f"({out['window_seconds']} s in all); best of {out['repeats']['fast']} runs "
          f"(fast, baseline) or {out['repeats']['exact']} (exact).", "",
          "## Throughput", "",
          *md_table(["export", "workers", "clips/s", "vs webdataset frames"],
                    [*([f"`--format clips --cut {m['cut']}`", m["workers"], m["clips_per_s"],
                        f"{m['vs_webdataset_frames']}x"] for m in out["modes"].values()),
                     ["`--format webdataset` (4 JPEG frames, baseline)", 1, b["clips_per_s"],
                      "1x"]]),
          "", "## Durations (ffprobe, every clip)", "",
          *md_table(["cut", "clips", "max abs error (s)", "mean abs error (s)", "within 0.1 s",
                     "within one GOP", "max error in GOPs"],
                    [[cut, d["clips"], d["max_abs_error_s"], d["mean_abs_error_s"],
                      d["within_0_1_s"], d["within_one_gop"], d["max_error_in_gops"]]
                     for cut, d in ((c, out[f"durations_{c}"]) for c in ("fast", "exact"))])]
    f = out["durations_fast"]
    md += ["", f"fast clips also store the packets from the keyframe before the window (hidden "
               f"by an MP4 edit list): {f['mean_lead_s']} s on average, at most "
               f"{f['max_lead_s']} s ({f['max_lead_in_gops']} GOPs)."]
    shards = [(cut, out["modes"][f"{cut}_w2"]["shards"]) for cut in ("fast", "exact")]
    md += ["", "## Shards", "",
           *md_table(["cut", "shards", "mean MB", "MB per clip", "MB per minute of windows"],
                     [*([cut, f"{s['n']} of {s['clips_per_shard']} clips", s["mean_mb"],
                         s["mb_per_clip"], s["mb_per_window_minute"]] for cut, s in shards),
                      ["webdataset frames", "", "", round(b["mb"] / out["clips"], 3), ""]])]
    mem = out["memory"]
    md += ["", "## Memory", "", f"Peak RSS of the export process (`--cut fast`): "
           f"{mem['peak_rss_mb'][0]} MB for {mem['clips'][0]} clips, {mem['peak_rss_mb'][1]} "
           f"MB for {mem['clips'][1]} ({mem['ratio']}x)."]
    return md


def plot(out: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    names = [f"{m['cut']}\n{m['workers']} worker{'s' if m['workers'] > 1 else ''}"
             for m in out["modes"].values()] + ["webdataset\nframes"]
    rates = [m["clips_per_s"] for m in out["modes"].values()] + \
        [out["baseline_webdataset_frames"]["clips_per_s"]]
    ax1.bar(names, rates, color=["#4c72b0", "#4c72b0", "#dd8452", "#dd8452", "#999999"])
    ax1.set_ylabel("clips/s")
    ax1.set_title(f"export of {out['clips']} clips (360p)")
    rng = np.random.default_rng(0)
    for x, (cut, color) in enumerate((("fast", "#4c72b0"), ("exact", "#dd8452"))):
        errs = out[f"durations_{cut}"]["errors_s"]
        ax2.scatter(x + rng.uniform(-0.15, 0.15, len(errs)), errs, s=12, color=color,
                    alpha=0.7)
    ax2.axhline(0.1, color="#dd8452", ls=":", lw=1)
    ax2.axhline(-0.1, color="#dd8452", ls=":", lw=1)
    ax2.text(1.45, 0.1, "±0.1 s", va="bottom", ha="right", fontsize=8)
    gop = min(out["videos"]["gops_s"])
    ax2.axhline(gop, color="#4c72b0", ls=":", lw=1)
    ax2.text(-0.45, gop, f"shortest GOP ({gop:g} s)", va="bottom", fontsize=8)
    ax2.set_xticks([0, 1], ["--cut fast", "--cut exact"])
    ax2.set_xlim(-0.5, 1.5)
    ax2.set_ylabel("clip duration (ffprobe) - window (s)")
    ax2.set_title("every clip")
    fig.tight_layout()
    fig.savefig(RESULTS / "clips.png", dpi=110)


if __name__ == "__main__":
    main()
