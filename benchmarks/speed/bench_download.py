"""Download benchmark: videos/s and MB/s of the download stage from a local HTTP server with
``--workers`` 1, 4 and 16, against a plain sequential GET loop (the baseline, same server, same
run); resume after a SIGKILL (how many videos were fetched again); every failure cause
produced on purpose and the cause each was reported with.

The server (``tests/support/media_server.py``, 127.0.0.1) waits ``DELAY`` seconds before answering
each request, as a remote server's latency would: without it a loopback copy is bound by the disk
and concurrency would show nothing. Other jobs share this 2-core machine: each figure is the
best of ``REPEATS``.

Run: ``.venv/bin/python benchmarks/speed/bench_download.py`` ->
``benchmarks/results/download.{json,md,png}``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import ROOT, machine, write_results

sys.path.insert(0, str(ROOT))
from tests.support.media_server import media_server  # noqa: E402

from howtocap.download.config import DownloadConfig  # noqa: E402
from howtocap.download.run import download_run  # noqa: E402
from howtocap.engine.rundir import RunDir  # noqa: E402

N_VIDEOS, DELAY, REPEATS, WORKERS = 48, 0.05, 2, (1, 4, 16)
KILL_DELAY = 0.25  # slower answers for the kill, so it lands mid-run


def make_videos(www: Path, n: int) -> int:
    """``n`` copies of one noisy 4-s 320x240 mp4 with audio (noise keeps the bitrate up)."""
    base = www / "v000.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=320x240:rate=25", "-f", "lavfi", "-i", "sine=f=440",
                    "-vf", "noise=alls=12:allf=t", "-t", "4", "-shortest", "-c:v", "libx264",
                    "-preset", "ultrafast", "-c:a", "aac", str(base)], check=True)
    data = base.read_bytes()
    for i in range(1, n):
        (www / f"v{i:03d}.mp4").write_bytes(data)
    (www / "notes.mp4").write_bytes(b"this is not a video\n" * 500)
    (www / "big.mp4").write_bytes(data + b"\0" * 8_000_000)
    return len(data)


def manifest(path: Path, rows: list[tuple[str, str]]) -> Path:
    pd.DataFrame(rows, columns=["video_id", "video_path"]).to_csv(path, index=False)
    return path


def baseline(url: str, n: int) -> float:
    """Seconds for a plain sequential GET of every file (urllib, nothing written)."""
    t0 = time.perf_counter()
    for i in range(n):
        with urllib.request.urlopen(f"{url}/v{i:03d}.mp4", timeout=30) as r:
            r.read()
    return time.perf_counter() - t0


def throughput(tmp: Path, url: str, size: int) -> dict:
    csv = manifest(tmp / "all.csv", [(f"v{i:03d}", f"{url}/v{i:03d}.mp4")
                                     for i in range(N_VIDEOS)])
    base = min(baseline(url, N_VIDEOS) for _ in range(REPEATS))
    rows = {"baseline_sequential_get": {"seconds": round(base, 3),
                                        "videos_per_s": round(N_VIDEOS / base, 2),
                                        "mb_per_s": round(N_VIDEOS * size / base / 1e6, 2)}}
    for w in WORKERS:
        best = float("inf")
        for r in range(REPEATS):
            t0 = time.perf_counter()
            items, summary = download_run([csv], tmp / f"run_w{w}_{r}",
                                          DownloadConfig(workers=w), progress=False)
            best = min(best, time.perf_counter() - t0)
            assert summary.done == N_VIDEOS and len(items) == N_VIDEOS, summary
        rows[f"workers_{w}"] = {"workers": w, "seconds": round(best, 3),
                                "videos_per_s": round(N_VIDEOS / best, 2),
                                "mb_per_s": round(N_VIDEOS * size / best / 1e6, 2),
                                "speedup_vs_1": None}
    one = rows["workers_1"]["seconds"]
    for w in WORKERS:
        rows[f"workers_{w}"]["speedup_vs_1"] = round(one / rows[f"workers_{w}"]["seconds"], 2)
    return rows


def kill_resume(tmp: Path, srv: object, url: str) -> dict:
    """SIGKILL ``howtocap download`` (4 workers) half-way, then run it again."""
    csv = manifest(tmp / "kill.csv", [(f"v{i:03d}", f"{url}/v{i:03d}.mp4")
                                      for i in range(N_VIDEOS)])
    run = tmp / "run_kill"
    cmd = [sys.executable, "-m", "howtocap.cli", "download", str(csv), "--out", str(run),
           "--workers", "4", "--quiet"]
    srv.delay = KILL_DELAY  # type: ignore[attr-defined]
    srv.requests.clear()  # type: ignore[attr-defined]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while sum(srv.requests.values()) < N_VIDEOS // 2 and proc.poll() is None:  # type: ignore
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    media = run / "cache" / "media"
    whole = len(list(media.glob("*.mp4")))
    temps = len([p for p in media.iterdir() if p.name.startswith(".")])
    # committed: an ok record in a finished shard or in a chunk of the unfinished one (what
    # a resume keeps; RunDir.done counts finished shards only)
    committed = sum(int(pc.sum(pc.equal(t.column("status"), "ok")).as_py() or 0)
                    for t in RunDir(run, create=False).records("download", ["status"]))
    before = sum(srv.requests.values())  # type: ignore[attr-defined]
    srv.delay = DELAY  # type: ignore[attr-defined]
    res = subprocess.run(cmd, capture_output=True, text=True)
    again = sum(srv.requests.values()) - before  # type: ignore[attr-defined]
    done = RunDir(run, create=False).table("downloads")
    left = [p for p in media.iterdir() if p.name.startswith(".")]
    return {"videos": N_VIDEOS, "requests_before_kill": before,
            "whole_files_at_kill": whole, "temp_files_at_kill": temps,
            "committed_at_kill": int(committed), "refetched_on_resume": again,
            "not_refetched": N_VIDEOS - again, "resume_exit": res.returncode,
            "done_after_resume": len(done), "temp_files_after_resume": len(left)}


# Each failure on purpose: (video id, URL path, the cause it must be reported with)
FAILURES = [
    ("http_404", "/missing.mp4", "not found"),
    ("http_403", "/status/403/a.mp4", "removed or private"),
    ("http_429", "/status/429/a.mp4", "rate-limited or bot check"),
    ("http_503", "/status/503/a.mp4", "server error"),
    ("hangs", "/hang/v000.mp4", "timeout"),
    ("too_large_length", "/big.mp4", "too large"),
    ("too_large_streamed", "/nolen/big.mp4", "too large"),
    ("not_a_video", "/notes.mp4", "not a video"),
    ("ytdlp_page_404", "/page/missing", "not found"),
]


def failures(tmp: Path, url: str, size: int) -> dict:
    csv = manifest(tmp / "fail.csv", [("ok", f"{url}/v000.mp4")]
                   + [(vid, url + path) for vid, path, _ in FAILURES])
    cfg = DownloadConfig(read_timeout=1.0, retries=1, backoff=0.2, max_size=size + 100_000)
    t0 = time.perf_counter()
    _, summary = download_run([csv], tmp / "run_fail", cfg, progress=False)
    seconds = time.perf_counter() - t0
    st = RunDir(tmp / "run_fail", create=False).table("status")
    st = st[st["stage"] == "download"].set_index("video_id")
    rows = []
    for vid, path, want in FAILURES:
        msg = str(st.loc[vid, "message"])
        rows.append({"video_id": vid, "url_path": path, "expected": want,
                     "reported": msg.split(":")[0], "cause": st.loc[vid, "cause"],
                     "message": msg.replace(url, "http://127.0.0.1:PORT"),
                     "ok": msg.startswith(want + ":")})
    return {"rows": rows, "matched": sum(r["ok"] for r in rows), "total": len(rows),
            "ok_video_done": bool(st.loc["ok", "status"] == "ok"),
            "seconds": round(seconds, 2), "read_timeout": cfg.read_timeout,
            "retries": cfg.retries}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = report["throughput"]
    names = ["baseline_sequential_get", *[f"workers_{w}" for w in WORKERS]]
    labels = ["sequential GET\n(baseline)", *[f"--workers {w}" for w in WORKERS]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, title in ((axes[0], "videos_per_s", "videos/s"),
                           (axes[1], "mb_per_s", "MB/s")):
        vals = [t[n][key] for n in names]
        ax.bar(labels, vals, color=["#999", "#4c72b0", "#4c72b0", "#4c72b0"])
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:g}", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"{title} ({N_VIDEOS} videos, {DELAY * 1000:.0f} ms per request)")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def lines_of(r: dict) -> list[str]:
    t, k, f = r["throughput"], r["kill_resume"], r["failures"]
    lines = [
        "# Download (`benchmarks/speed/bench_download.py`)", "",
        f"{N_VIDEOS} videos of {r['video_mb']:.2f} MB each from a local HTTP server "
        f"(`tests/support/media_server.py`, 127.0.0.1) that waits {DELAY * 1000:.0f} ms before "
        "answering each request, as a remote server's latency would (on loopback without it, "
        "the disk bounds the copy and concurrency shows nothing). Best of "
        f"{REPEATS}; {r['machine']}, shared with other jobs.", "",
        "| how | seconds | videos/s | MB/s | speedup vs --workers 1 |", "|---|---|---|---|---|",
        f"| sequential GET, nothing written (baseline) | {t['baseline_sequential_get']['seconds']}"
        f" | {t['baseline_sequential_get']['videos_per_s']} | "
        f"{t['baseline_sequential_get']['mb_per_s']} | |"]
    for w in WORKERS:
        x = t[f"workers_{w}"]
        lines.append(f"| `howtocap download --workers {w}` | {x['seconds']} | "
                     f"{x['videos_per_s']} | {x['mb_per_s']} | {x['speedup_vs_1']} |")
    lines += [
        "", "![throughput](download.png)", "",
        "## Resume after a kill", "",
        f"`howtocap download --workers 4` of {k['videos']} videos (server: "
        f"{KILL_DELAY * 1000:.0f} ms per request) SIGKILLed after {k['requests_before_kill']} "
        f"requests: {k['whole_files_at_kill']} files were whole (renamed into place), "
        f"{k['temp_files_at_kill']} temp files were left, {k['committed_at_kill']} videos "
        "were committed (a shard's finished videos are committed in chunks as they come: a "
        "kill loses the videos in flight). The same command again: "
        f"**{k['refetched_on_resume']} videos fetched again**, {k['not_refetched']} found "
        f"whole by their markers; exit {k['resume_exit']}, {k['done_after_resume']} done, "
        f"{k['temp_files_after_resume']} temp files left.", "",
        "## Every failure cause, on purpose", "",
        f"One run of {f['total']} failing inputs beside a good one (--read-timeout "
        f"{f['read_timeout']:g} s, --retries {f['retries']}): **{f['matched']}/{f['total']} "
        f"reported with the expected cause**, the good video done: {f['ok_video_done']}; "
        f"{f['seconds']} s in all.", "",
        "| input | expected | reported | status cause | message |", "|---|---|---|---|---|"]
    for row in f["rows"]:
        lines.append(f"| `{row['url_path']}` | {row['expected']} | {row['reported']} | "
                     f"{row['cause']} | {row['message']} |")
    return lines


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        www = tmp / "www"
        www.mkdir()
        size = make_videos(www, N_VIDEOS)
        with media_server(www, delay=DELAY) as srv:
            report = {"video_mb": size / 1e6, "videos": N_VIDEOS, "delay_s": DELAY,
                      "machine": machine()}
            report["throughput"] = throughput(tmp, srv.url, size)
            report["kill_resume"] = kill_resume(tmp, srv, srv.url)
            srv.delay = 0.0
            report["failures"] = failures(tmp, srv.url, size)
    write_results("download", report, lines_of(report), echo=False,
                  plot=lambda png: plot(report, png))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
