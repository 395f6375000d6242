"""``howtocap export --format clips``: MP4 clips in WebDataset shards, from a real run directory
over small generated videos, cut by the real ffmpeg and read back with PyAV, ffprobe and plain
webdataset."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
import pandas as pd
import pytest

from howtocap.clips.config import ClipsConfig
from howtocap.clips.export import export_clips
from howtocap.clips.window import window_middle
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.io.video import decode_jpeg, frame_at
from howtocap.progress import console
from howtocap.schemas import conform
from tests.support.cli import run_cli, start_cli
from tests.support.stages import write_rows

HOWTOCAP = [sys.executable, "-m", "howtocap.cli"]
# video id -> (seconds, fps, GOP in frames, width, height, audio)
VIDEOS = {"alpha": (8.0, 10, 20, 160, 120, True), "beta": (6.0, 10, 10, 320, 180, False),
          "gamma.v2": (5.0, 8, 16, 128, 96, True)}
# (video, start, end, caption, score, kept): two captions share alpha's 3-6 window; beta's
# last window runs past the video's end, gamma's last lies after it; one row is not kept
ROWS = [("alpha", 0.5, 2.5, "open the box", 0.4, True),
        ("alpha", 3.0, 6.0, "lift the lid", 0.3, True),
        ("alpha", 3.0, 6.0, "raise the cover", 0.7, True),
        ("alpha", 6.3, 7.9, "close it again", 0.5, True),
        ("beta", 1.2, 3.4, "pour the water", 0.6, True),
        ("beta", 4.5, 7.0, "stir the tea", 0.6, True),
        ("beta", 0.0, 1.0, "a dropped caption", 0.1, False),
        ("gamma.v2", 0.7, 4.2, "fold the paper", 0.5, True),
        ("gamma.v2", 5.5, 7.0, "after the end", 0.5, True),
        ("broken", 0.0, 2.0, "anything", 0.5, True),
        ("gone", 0.0, 2.0, "anything else", 0.5, True)]


def make_video(path: Path, seconds: float, fps: int, gop: int, w: int, h: int,
               audio: bool) -> None:
    """A moving test pattern with a clock (every frame differs), H.264 with B-frames (as web
    videos have: their reordering is what makes stream copy inexact) and a fixed GOP."""
    cmd = ["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi",
           "-i", f"testsrc2=size={w}x{h}:rate={fps}"]
    if audio:
        cmd += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=22050"]
    cmd += ["-t", str(seconds), "-c:v", "libx264", "-preset", "veryfast", "-g", str(gop),
            "-keyint_min", str(gop), "-sc_threshold", "0", "-pix_fmt", "yuv420p"]
    if audio:
        cmd += ["-c:a", "aac", "-b:a", "48k"]
    subprocess.run([*cmd, str(path)], check=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clips")
    media = root / "media"
    media.mkdir()
    items = []
    for vid, spec in VIDEOS.items():
        make_video(media / f"{vid}.mp4", *spec)
        items.append(VideoItem(vid, media / f"{vid}.mp4"))
    (media / "broken.mp4").write_bytes(b"not a video at all\n" * 200)
    items += [VideoItem("broken", media / "broken.mp4"),
              VideoItem("gone", media / "gone.mp4")]
    rd = RunDir(root / "run")
    rd.record_videos(items)
    df = pd.DataFrame([{"video_id": v, "start": s, "end": e, "text": t, "orig_start": s,
                        "orig_end": e, "offset": 0.0, "score": sc, "kept": k,
                        "encoders": "x", "source": "llm", "block": 0, "model": "m",
                        "config_id": "cfg1"} for v, s, e, t, sc, k in ROWS])
    write_rows(rd, "aligned", conform(df, "aligned"))
    return rd.root


def export(run: Path, out: Path, **kw: Any) -> tuple[Any, str]:
    with console.capture() as cap:
        res = export_clips(run, out, config=ClipsConfig(**kw), progress=False)
    return res, cap.get()


@pytest.fixture(scope="module")
def exact(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    return export(run, tmp_path_factory.mktemp("exact") / "out", cut="exact", shard_size=2)


@pytest.fixture(scope="module")
def fast(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    return export(run, tmp_path_factory.mktemp("fast") / "out", cut="fast", shard_size=3)


def samples(out: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of every shard, read with plain webdataset (no howtocap code)."""
    import webdataset as wds

    meta = json.loads((out / "clips.json").read_text())
    got: dict[str, dict[str, bytes]] = {}
    for shard in meta["shards"]:
        for s in wds.WebDataset(str(out / shard), shardshuffle=False):
            assert s["__key__"] not in got, "a key appears twice"
            got[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
    return got


def ffprobe_duration(path: Path) -> float:
    res = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                          "-of", "csv=p=0", str(path)], capture_output=True, text=True,
                         check=True)
    return float(res.stdout)


def decode_all(path: Path) -> tuple[int, tuple[int, int]]:
    """Decode every frame (raises on a broken file); the count and the picture size."""
    n, size = 0, (0, 0)
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            n, size = n + 1, (frame.width, frame.height)
    return n, size


def unpack(tmp: Path, key: str, sample: dict[str, bytes]) -> Path:
    path = tmp / f"{key}.mp4"
    path.write_bytes(sample["mp4"])
    return path


def kept_windows() -> set[tuple[str, float, float]]:
    """The windows that must become clips: kept, of a readable video, not past its end."""
    return {(v, s, e) for v, s, e, _, _, k in ROWS if k and v in VIDEOS and s < VIDEOS[v][0]}


def test_exact_clips_play_and_last_their_windows(exact: tuple[Any, str], run: Path,
                                                 tmp_path: Path) -> None:
    res, _ = exact
    index = pd.read_parquet(res.out / "index.parquet")
    got = samples(res.out)
    assert sorted(got) == sorted(index["key"]) and len(got) == len(kept_windows()) == 6
    assert {(r.video_id, r.window_start, r.window_end) for r in index.itertuples()} \
        == kept_windows()
    paths = dict(zip(RunDir(run, create=False).table("videos")["video_id"],
                     RunDir(run, create=False).table("videos")["video_path"], strict=True))
    for r in index.itertuples():
        s = got[r.key]
        assert set(s) == {"mp4", "json", "txt", "jpg"}
        info = json.loads(s["json"])
        assert (info["video_id"], info["start"], info["end"], info["caption"]) \
            == (r.video_id, r.start, r.end, r.caption)
        assert info["config_id"] == r.config_id == "cfg1" and info["key"] == r.key
        assert s["txt"].decode() == r.caption
        seconds, fps = VIDEOS[r.video_id][:2]
        assert r.end == min(r.window_end, seconds)  # beta's last window cut to the video
        clip = unpack(tmp_path, r.key, s)
        n, _ = decode_all(clip)
        assert abs(ffprobe_duration(clip) - (r.end - r.start)) <= 0.1
        assert abs(n / fps - (r.end - r.start)) <= 1.5 / fps  # every frame of the window
        # the jpg is the frame at the window's middle: nearer to it than to the window's start
        assert r.middle == pytest.approx(window_middle(r.start, r.end, seconds))
        jpg = decode_jpeg(s["jpg"]).astype(float)
        mid = np.asarray(frame_at(paths[r.video_id], r.middle)).astype(float)
        first = np.asarray(frame_at(paths[r.video_id], r.start)).astype(float)
        assert np.abs(jpg - mid).mean() < 0.5 * np.abs(jpg - first).mean()
    shared = index[index["window_start"] == 3.0].iloc[0]  # two captions: the best one first
    assert shared["caption"] == "raise the cover" and shared["n_captions"] == 2
    assert json.loads(got[shared["key"]]["json"])["captions"] == ["raise the cover",
                                                                  "lift the lid"]
    assert json.loads(got[shared["key"]]["json"])["scores"] == [0.7, 0.3]


def test_layout_is_video2dataset_s(exact: tuple[Any, str]) -> None:
    """Shards ``00000.tar`` with a ``00000.parquet`` and ``00000_stats.json`` each, keys
    ``<5-digit shard><position>``, and an index that is the shards' tables joined."""
    res, _ = exact
    names = sorted(p.name for p in res.out.iterdir())
    n = len(list(res.out.glob("*_stats.json")))
    assert n == 5  # 9 planned clips (2 of skipped videos, 1 past its end) in shards of 2
    # the last holds only the missing video's clip: kept as done, not listed to read
    assert res.shards == [f"{i:05d}.tar" for i in range(4)]
    assert json.loads((res.out / "clips.json").read_text())["empty_shards"] == ["00004.tar"]
    assert names == sorted([f"{i:05d}{ext}" for i in range(n)
                            for ext in (".tar", ".parquet", "_stats.json")]
                           + ["clips.json", "index.parquet"])
    index = pd.read_parquet(res.out / "index.parquet")
    parts = pd.concat([pd.read_parquet(res.out / f"{i:05d}.parquet") for i in range(n)],
                      ignore_index=True)
    pd.testing.assert_frame_equal(index, parts)
    for r in index.itertuples():
        assert r.key[:5] == r.shard and len(r.key) == 6
        with tarfile.open(res.out / f"{r.shard}.tar") as tf:
            assert f"{r.key}.mp4" in tf.getnames()
            assert tf.getmember(f"{r.key}.mp4").size == r.mp4_bytes
    meta = json.loads((res.out / "clips.json").read_text())
    assert meta["clips"] == len(index) and meta["captions"] == 7
    stats = [json.loads((res.out / f"{i:05d}_stats.json").read_text()) for i in range(n)]
    assert sum(s["count"] for s in stats) == len(index)
    left_out = {k: why for s in stats for k, why in s["left_out"].items()}
    assert len(left_out) == 1 and "lies outside the video" in next(iter(left_out.values()))
    assert meta["shard_bytes"] == {f"{i:05d}.tar": (res.out / f"{i:05d}.tar").stat().st_size
                                   for i in range(n)}


def test_broken_and_missing_videos_are_one_line_each(exact: tuple[Any, str]) -> None:
    res, log = exact
    assert set(res.skipped) == {"broken", "gone"}
    lines = [ln for ln in log.splitlines() if ln.strip()]
    assert len(lines) == 2
    assert any(ln.startswith("skip broken:") and "broken.mp4" in ln for ln in lines)
    assert any(ln.startswith("skip gone:") and "does not exist" in ln for ln in lines)


def video_packets(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for p in c.demux(video=0) if p.size)


def test_fast_clips_copy_from_the_keyframe_and_play_the_window(fast: tuple[Any, str],
                                                               tmp_path: Path) -> None:
    """A fast clip stores the packets from the keyframe at or before the window (a decoder
    needs them) and plays from the window's start: within one GOP of the window."""
    res, _ = fast
    index = pd.read_parquet(res.out / "index.parquet")
    got = samples(res.out)
    assert len(index) == 6 and set(res.skipped) == {"broken", "gone"}
    for r in index.itertuples():
        _, fps, gop = VIDEOS[r.video_id][:3]
        lead = r.start - r.keyframe
        assert 0 <= lead < gop / fps + 1e-6 and round(r.keyframe * fps) % gop == 0
        clip = unpack(tmp_path, r.key, got[r.key])
        n, _ = decode_all(clip)
        dur = ffprobe_duration(clip)
        assert -0.1 <= dur - (r.end - r.start) <= gop / fps
        assert abs(n / fps - (r.end - r.start)) <= 0.1 + 2 / fps  # the window is what plays
        assert abs(video_packets(clip) - n - lead * fps) <= 2  # the lead is stored, not shown
    # some window does not start on a keyframe, so copying really kept a lead
    assert (index["keyframe"] < index["start"] - 0.05).any()


def test_max_side_scales_exact_clips_and_their_jpgs(run: Path, tmp_path: Path) -> None:
    res, _ = export(run, tmp_path / "small", cut="exact", max_side=64)
    got = samples(res.out)
    index = pd.read_parquet(res.out / "index.parquet")
    for r in index.itertuples():
        w, h = VIDEOS[r.video_id][3:5]
        _, (cw, ch) = decode_all(unpack(tmp_path, r.key, got[r.key]))
        assert max(cw, ch) == 64 and abs(cw / ch - w / h) < 0.1
        assert max(decode_jpeg(got[r.key]["jpg"]).shape[:2]) == 64
    with pytest.raises(HowtocapError, match="--max-side .* --cut exact"):
        export(run, tmp_path / "no", cut="fast", max_side=64)


def test_windows_stay_in_one_shot_unless_cross_shots(run: Path, tmp_path: Path) -> None:
    """A shots table with a cut at 4.0 s in alpha: its 3-6 s window is cut back to the shot
    holding its middle (4-6 s), the others are whole; ``cross_shots`` keeps 3-6 s."""
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(run, copy)
    write_rows(RunDir(copy), "shots", pd.DataFrame(
        {"video_id": ["alpha", "alpha"], "start": [0.0, 4.0], "end": [4.0, 8.0],
         "config_id": "s"}))
    rows = pd.read_parquet(copy / "aligned").query("video_id == 'alpha' and kept")
    for cross, want in ((False, (4.0, 6.0)), (True, (3.0, 6.0))):
        res, _ = export(copy, tmp_path / f"out{cross}", cut="exact", cross_shots=cross)
        index = pd.read_parquet(res.out / "index.parquet").set_index("window_start")
        assert (index.loc[3.0, "start"], index.loc[3.0, "end"]) == want
        assert abs(index.loc[3.0, "duration"] - (want[1] - want[0])) <= 0.1
        # windows inside one shot keep their times
        assert (index.loc[0.5, "start"], index.loc[0.5, "end"]) == (0.5, 2.5)
    assert len(rows) == 4


def test_rows_argument_exports_just_those_rows(run: Path, tmp_path: Path) -> None:
    """A filter (e.g. ``--drop-duplicates``) hands its rows in; nothing else is cut."""
    rows = pd.read_parquet(run / "aligned").query("video_id == 'beta' and kept")
    with console.capture():
        res = export_clips(run, tmp_path / "beta", rows=rows, progress=False)
    index = pd.read_parquet(res.out / "index.parquet")
    assert set(index["video_id"]) == {"beta"} and len(index) == 2 and res.kind == "rows"


def test_drop_duplicates_leaves_out_a_copy_s_clips(run: Path, tmp_path: Path) -> None:
    """``--drop-duplicates`` reaches the clip export: a video found to be a copy has no clip."""
    dups = run / "duplicates.parquet"
    with pytest.raises(HowtocapError, match="no duplicates table"):
        export_clips(run, tmp_path / "none", drop_duplicates=True, progress=False)
    pd.DataFrame({"video_id": ["beta"], "duplicate_of": ["alpha"], "kind": ["video"],
                  "similarity": [0.97], "seconds": [6], "start": [0.0], "end": [6.0],
                  "dup_start": [0.0], "dup_end": [6.0], "config_id": ["x"]}).to_parquet(dups)
    try:
        with console.capture():
            res = export_clips(run, tmp_path / "dropped", drop_duplicates=True, progress=False)
    finally:
        dups.unlink()
    index = pd.read_parquet(res.out / "index.parquet")
    assert "beta" not in set(index["video_id"]) and "alpha" in set(index["video_id"])


@pytest.mark.slow
def test_a_foreign_folder_and_bad_options_are_one_line(run: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    res = subprocess.run([*HOWTOCAP, "export", str(run), "--format", "clips", "--out",
                          str(tmp_path / "mine"), "--quiet"], capture_output=True, text=True,
                         env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300"})
    assert res.returncode == 2 and "notes.txt" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    res = run_cli("export", str(run), "--format", "clips", "--out", str(tmp_path / "x"),
                  "--max-side", "4", "--cut", "exact")
    assert res.returncode == 2 and "--max-side" in res.stderr and "16" in res.stderr


def _digest(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())
            if p.suffix in (".tar", ".parquet")}


@pytest.mark.slow
def test_killed_export_resumes_to_the_clean_export(run: Path, tmp_path: Path) -> None:
    """SIGKILL the CLI after two shards: the re-run keeps them, redoes the half-written one
    whole and ends with the shards, tables and keys of a clean run, each clip once (the clean
    run used 2 workers, the killed one 1: the plan does not depend on timing)."""
    clean, _ = export(run, tmp_path / "clean", cut="exact", shard_size=1)
    out = tmp_path / "cut"
    args = ["export", str(run), "--format", "clips", "--out", str(out),
            "--cut", "exact", "--shard-size", "1", "--workers", "1", "--quiet"]
    proc = start_cli(*args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None \
            and len(list(out.glob("*_stats.json"))) < 2:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the kill must land before the export ends"
    finished = {p.name[:5]: p.stat().st_mtime_ns for p in out.glob("*_stats.json")}
    planned = len(list(clean.out.glob("*_stats.json")))
    assert planned == 9 and len(clean.shards) == 6  # skipped videos' shards are empty
    assert 2 <= len(finished) < planned and not (out / "clips.json").exists()
    res = run_cli(*args, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"({len(finished)} finished earlier)" in res.stderr
    for name, mtime in finished.items():  # finished shards were not redone
        assert (out / f"{name}_stats.json").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.out.iterdir())
    assert _digest(out) == _digest(clean.out)  # byte for byte, shards and tables
    keys = list(pd.read_parquet(out / "index.parquet")["key"])
    assert len(keys) == len(set(keys)) == len(samples(out)) == 6
