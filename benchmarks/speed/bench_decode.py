"""Decoding throughput of ``iter_frames`` at 1 fps against ``ffmpeg -vf fps=1 -f null -``.

Run: ``.venv/bin/python benchmarks/speed/bench_decode.py [--seconds 120]``. Writes
``benchmarks/results/decode.json`` and ``decode.md``.

Both decode the same generated 720p H.264 file (30 fps, B-frames, 2 s GOP; kept in the user
cache so re-runs skip the encode). Runs are interleaved and repeated; the median wall time of
each counts. ``iter_frames`` does strictly more work than the ffmpeg command (it also converts
and scales the kept frames to 224x224 RGB), so the ratio is conservative. A naive PyAV loop (no
codec threading, every frame converted to RGB) shows what the design choices buy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import av
from _harness import machine, write_results

from howtocap.bundled import cache_root
from howtocap.io.video import iter_frames, probe


def make_video(seconds: int) -> Path:
    out = cache_root() / "bench" / f"decode_720p_{seconds}s.mp4"
    if out.exists() and abs(probe(out).duration - seconds) < 1:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.mp4")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=size=1280x720:rate=30:duration={seconds}", "-c:v", "libx264",
                    "-preset", "superfast", "-bf", "2", "-g", "60", "-pix_fmt", "yuv420p",
                    str(tmp)], check=True)
    tmp.replace(out)
    return out


def run_ffmpeg(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-vf", "fps=1", "-f", "null", "-"],
                   check=True)
    return time.perf_counter() - t0


def run_ours(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = sum(1 for _ in iter_frames(path, fps=1.0, size=224))
    return time.perf_counter() - t0, n


def run_naive(path: Path) -> float:
    """Single-threaded decode converting every frame to RGB and keeping one per second."""
    t0 = time.perf_counter()
    with av.open(str(path)) as c:
        next_t = 0.5
        for frame in c.decode(video=0):
            img = frame.to_ndarray(format="rgb24")
            if frame.time is not None and frame.time >= next_t:
                next_t += 1.0
                del img
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = make_video(args.seconds)
    info = probe(path)
    run_ours(path)  # warm the page cache and the codec
    ff, ours, frames = [], [], 0
    for _ in range(args.repeats):
        ff.append(run_ffmpeg(path))
        t, frames = run_ours(path)
        ours.append(t)
    naive = run_naive(path)
    ff_s, ours_s = statistics.median(ff), statistics.median(ours)
    ratio = ff_s / ours_s
    result = {
        "video": {"seconds": info.duration, "width": info.width, "height": info.height,
                  "fps": info.fps, "codec": "h264"},
        "ffmpeg_fps1_null": {"seconds": ff_s, "runs": ff, "realtime_x": info.duration / ff_s},
        "iter_frames": {"seconds": ours_s, "runs": ours, "frames": frames,
                        "frames_per_s": frames / ours_s, "realtime_x": info.duration / ours_s,
                        "source_frames_per_s": info.duration * info.fps / ours_s},
        "naive_pyav_all_rgb_1thread": {"seconds": naive, "realtime_x": info.duration / naive},
        "throughput_ratio_vs_ffmpeg": ratio,
        "target_ratio": 0.7,
        "passes": ratio >= 0.7,
        "machine": machine(f"PyAV {av.__version__}", "shared"),
    }
    md = [f"# Decoding at 1 fps: {info.duration:.0f} s of {info.width}x{info.height} "
          f"H.264 at {info.fps:g} fps", "",
          "| decoder | wall s (median) | x real time | 1-fps frames/s |", "|---|---|---|---|",
          f"| `ffmpeg -vf fps=1 -f null -` | {ff_s:.2f} | {info.duration / ff_s:.1f} | "
          f"{frames / ff_s:.1f} |",
          f"| `iter_frames(fps=1, size=224)` | {ours_s:.2f} | {info.duration / ours_s:.1f} | "
          f"{frames / ours_s:.1f} |",
          f"| naive PyAV (1 thread, all frames to RGB) | {naive:.2f} | "
          f"{info.duration / naive:.1f} | {frames / naive:.1f} |", "",
          f"Throughput ratio iter_frames / ffmpeg: **{ratio:.2f}** (target >= 0.7: "
          f"{'met' if ratio >= 0.7 else 'NOT met'}).", ""]
    write_results("decode", result, md)


if __name__ == "__main__":
    main()
