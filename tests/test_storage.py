"""Crash and storage safety: SIGKILL at several points then resume equals a clean run; a
truncated or corrupt part is detected and recomputed; a full disk stops the run in one line
and leaves no half-written file."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from tests.chat_server import chat_server
from tests.stage_support import committed
from tests.test_caption_pipeline import GOOD, HOWTOCAP, add_video, run_cli

from howtocap.atomic import CorruptPartWarning, DiskFull, looks_complete, read_parquet
from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.engine.rundir import RunDir
from howtocap.llm import LLMOptions


def videos(tmp_path: Path, base: Path, n: int) -> Path:
    folder = tmp_path / "videos"
    for i in range(n):
        add_video(folder, f"v{i:02d}", base, GOOD.replace("eggs", f"egg{i}"))
    return folder


def tables(run: Path, names: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    return {t: pd.read_parquet(run / f"{t}.parquet") for t in names}


def no_temp_files(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.name.endswith(".tmp")]


def test_sweep_removes_dead_writers_temp_files_at_every_run_dir_depth(tmp_path: Path) -> None:
    """A kill can land while a per-video status file (parts/status/<stage>/) is being written:
    the next run must sweep that temp file, but never a live writer's."""
    from howtocap.atomic import HOST as host
    from howtocap.atomic import sweep_temp_files

    dead = subprocess.Popen(["true"])
    dead.wait()
    folders = [tmp_path, tmp_path / "parts", tmp_path / "parts" / "captions",
               tmp_path / "parts" / "status" / "caption"]
    stale, live = [], []
    for i, folder in enumerate(folders):
        folder.mkdir(parents=True, exist_ok=True)
        stale.append(folder / f".v{i}.json.{host}~{dead.pid}.abc123.tmp")
        live.append(folder / f".w{i}.json.{host}~{os.getpid()}.abc123.tmp")
    for p in stale + live:
        p.write_text("{")
    assert sweep_temp_files(tmp_path) == len(stale)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in live)


def test_sigkill_at_several_points_then_resume_equals_clean_run(tmp_path: Path,
                                                                 base_video: Path) -> None:
    from howtocap.train.tiny import make_tiny_clip

    enc = make_tiny_clip(tmp_path / "tiny_clip")  # "hf:<folder>"
    vids = videos(tmp_path, base_video, 5)
    with chat_server(delay=0.15) as srv:
        args = ["run", str(vids), "--llm-url", srv.url, "--concurrency", "1", "--encoder",
                enc, "--quiet", "--batch-size", "2"]
        clean = tmp_path / "clean"
        assert run_cli(*args, "--out", str(clean)).returncode == 0
        want = tables(clean, ("subtitles", "captions", "aligned"))
        assert len(want["aligned"]) and want["aligned"]["config_id"].nunique() == 1
        # kill while captioning and while aligning (benchmarks/robustness/bench_kill.py: 20
        # moments), batches of 2 videos: the kill lands after one batch, in the middle of the next
        for i, (stage, count) in enumerate([("caption", 2), ("align", 2)]):
            run = tmp_path / f"killed{i}"
            proc = subprocess.Popen([*HOWTOCAP, *args, "--out", str(run)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and \
                    committed(run, stage) < count:
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert committed(run, stage) < 5, "the kill must land mid-stage"
            res = run_cli(*args, "--out", str(run))
            assert res.returncode == 0, res.stderr
            got = tables(run, ("subtitles", "captions", "aligned"))
            for name, df in want.items():
                pd.testing.assert_frame_equal(got[name], df, obj=f"{name} after kill {i}")
            assert not no_temp_files(run)


def test_corrupt_parts_are_detected_and_recomputed(tmp_path: Path, base_video: Path) -> None:
    vids, out = videos(tmp_path, base_video, 4), tmp_path / "run"
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2))
        caption_run([vids], out, cfg, progress=False)
        want = tables(out, ("subtitles", "captions"))
        rd = RunDir(out, create=False)
        # the batch files holding v01's captions and v02's subtitles (one batch each here)
        truncated = rd.batch_part_path("captions", rd.status("caption", "v01").batch)
        truncated.write_bytes(truncated.read_bytes()[:-40])  # torn: footer gone
        flipped = rd.batch_part_path("subtitles", rd.status("subtitles", "v02").batch)
        data = bytearray(flipped.read_bytes())
        col = pq.read_metadata(flipped).row_group(0).column(1)  # "start"
        at = col.data_page_offset + col.total_compressed_size - 2  # a page's payload
        data[at] ^= 0xFF  # same size, footer intact: only the page checksum can tell
        flipped.write_bytes(bytes(data))
        assert not looks_complete(truncated) and looks_complete(flipped)
        with pytest.raises(Exception, match="corrupt or truncated"):
            read_parquet(flipped)
        n = srv.requests
        with pytest.warns(CorruptPartWarning) as caught:
            subs, caps = caption_run([vids], out, cfg, progress=False)
        named = " ".join(str(w.message) for w in caught)
        assert truncated.name in named and flipped.name in named
        assert caps.done >= 1 and srv.requests > n  # v01's captions were asked for again
        for name, df in tables(out, ("subtitles", "captions")).items():
            pd.testing.assert_frame_equal(df, want[name])
        # redone into new batches (the old files were dropped, nothing merged them twice)
        assert not truncated.exists() and not flipped.exists()
        for stage, table in (("caption", "captions"), ("subtitles", "subtitles")):
            path = rd.batch_part_path(table, rd.status(stage, "v01").batch)
            assert looks_complete(path) and len(read_parquet(path))


@contextlib.contextmanager
def small_disk(tmp_path: Path, size_kb: int) -> Iterator[Path | None]:
    """A size-limited tmpfs when this process may mount one (root), else None."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_stops_in_one_line_and_leaves_no_half_written_file(
        tmp_path: Path, base_video: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vids = videos(tmp_path, base_video, 8)
    with chat_server() as srv, small_disk(tmp_path, 256) as disk:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=1))
        clean = tmp_path / "clean"
        caption_run([vids], clean, cfg, progress=False)
        if disk is not None:  # a real ENOSPC: fill the file system to ~40 KB from full
            out = disk / "run"
            filler = disk / "filler"
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            filler.write_bytes(b"\0" * max(0, free - 40_000))
        else:  # not root: the write fails as a full disk would, after part of the bytes
            import howtocap.atomic as atomic_mod

            out, filler = tmp_path / "run", None
            calls = {"n": 0}
            real = atomic_mod._fsync_file

            def fail_later(name: str) -> None:
                calls["n"] += 1
                if calls["n"] > 25:
                    raise OSError(errno.ENOSPC, "No space left on device", name)
                real(name)

            monkeypatch.setattr(atomic_mod, "_fsync_file", fail_later)
        with pytest.raises(DiskFull) as exc:
            caption_run([vids], out, cfg, progress=False)
        msg = str(exc.value)
        assert "no space left on device" in msg and "\n" not in msg and "resume" in msg
        assert not no_temp_files(out)
        rd = RunDir(out, create=False)
        # whatever is on disk is whole, and every "ok" record has its whole part
        for part in out.rglob("*.parquet"):
            assert looks_complete(part) and read_parquet(part) is not None, part
        for stage, table in (("subtitles", "subtitles"), ("caption", "captions")):
            for rec in rd.status_records(stage):
                assert rec.status == "ok" and rd.is_done(stage, rec.video_id, table)
        # space again: the same command resumes to the tables of an uninterrupted run
        if filler is not None:
            filler.unlink()
        else:
            monkeypatch.undo()
        caption_run([vids], out, cfg, progress=False)
        for name, df in tables(clean, ("subtitles", "captions")).items():
            pd.testing.assert_frame_equal(tables(out, (name,))[name], df)


def test_full_disk_is_one_line_on_the_command_line(tmp_path: Path, base_video: Path) -> None:
    vids = videos(tmp_path, base_video, 3)
    with chat_server() as srv, small_disk(tmp_path, 64) as disk:
        if disk is None:
            pytest.skip("needs root to mount a small tmpfs (the in-process test covers it)")
        (disk / "filler").write_bytes(b"\0" * (os.statvfs(disk).f_bavail
                                               * os.statvfs(disk).f_frsize - 8_000))
        res = run_cli("caption", str(vids), "--out", str(disk / "run"), "--llm-url", srv.url,
                      "--quiet")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no space left on device" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_a_forked_writer_signs_its_temp_files_with_its_own_pid(tmp_path: Path) -> None:
    """A child forked after import (multiprocessing, bench_kill's runs) killed mid-write: its
    temp file must name the child, so the resume sweep (parent still alive) removes it."""
    import signal

    from howtocap.atomic import atomic_write, sweep_temp_files

    target = tmp_path / "parts" / "captions" / "v00.parquet"
    pid = os.fork()
    if pid == 0:  # the child: start a write and never finish it
        def stall(tmp: str) -> None:
            Path(tmp).write_bytes(b"PAR1 half")
            os.kill(os.getpid(), signal.SIGKILL)

        atomic_write(target, stall)
        os._exit(1)
    os.waitpid(pid, 0)
    (left,) = target.parent.glob(".v00.parquet.*.tmp")
    assert f"~{pid}." in left.name
    assert sweep_temp_files(tmp_path) == 1 and not left.exists()


def test_temp_files_of_a_killed_writer_are_swept_on_resume(tmp_path: Path,
                                                           base_video: Path) -> None:
    from howtocap.atomic import HOST as host

    vids, out = videos(tmp_path, base_video, 2), tmp_path / "run"
    dead = subprocess.Popen(["true"])
    dead.wait()
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=1))
        caption_run([vids], out, cfg, progress=False)
        left = out / "parts" / "captions" / f".v00.parquet.{host}~{dead.pid}.k1ll3d.tmp"
        other = out / f".captions.parquet.another-host~{dead.pid}.x.tmp"  # maybe alive there
        left.write_bytes(b"PAR1 half a file")
        other.write_bytes(b"PAR1")
        caption_run([vids], out, cfg, progress=False)
    assert not left.exists() and other.exists()


@pytest.mark.parametrize("writer", ["merge level", "index spill", "videos spill"])
def test_a_full_disk_in_a_scratch_file_is_one_line_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    """A merge's level files, a stage index's spilled rows and ``record_videos``' sorted runs
    are written outside ``atomic_write`` (under ``cache/``): a full disk there is the same
    one-line ``DiskFull`` naming what was asked for, not an ``OSError`` traceback."""
    import errno as errno_mod

    import howtocap.engine.merge as merge_mod
    import howtocap.engine.records as records_mod
    import howtocap.engine.rundir as rundir_mod
    from howtocap.engine.records import StatusRecord
    from howtocap.io.inputs import VideoItem

    monkeypatch.setattr(merge_mod, "MERGE_FAN_IN", 2)
    monkeypatch.setattr(records_mod, "SPILL_ROWS", 3)
    monkeypatch.setattr(rundir_mod, "VIDEO_CHUNK", 4)
    rd = RunDir(tmp_path / "run")
    ids = [f"v{i:02d}" for i in range(12)]
    for lo in range(0, len(ids), 3):  # four batches of three videos
        recs = [StatusRecord(v, "lines", "ok") for v in ids[lo:lo + 3]]
        df = pd.DataFrame({"video_id": ids[lo:lo + 3], "start": 0.0, "end": 1.0,
                           "text": "a line", "source": "asr"})
        rd.commit_batch("lines", ["subtitles"], recs, {"subtitles": df})
    rd.drop_caches()
    with small_disk(tmp_path, 256) as disk:
        if disk is not None:  # a real ENOSPC: the run's cache on a full file system
            import shutil

            shutil.rmtree(rd.root / "cache", ignore_errors=True)  # scratch only, so far
            (disk / "cache").mkdir()
            (rd.root / "cache").symlink_to(disk / "cache")
            (disk / "filler").write_bytes(b"\0" * (os.statvfs(disk).f_bavail
                                                   * os.statvfs(disk).f_frsize))
        else:  # not root: each scratch writer fails as a full disk would
            def full(*_: object, **__: object) -> None:
                raise OSError(errno_mod.ENOSPC, "No space left on device")

            monkeypatch.setattr(merge_mod, "_merge_into", full)
            monkeypatch.setattr(records_mod, "_SpilledRows", full)
            monkeypatch.setattr(rundir_mod, "_fold_videos", full)
        with pytest.raises(DiskFull) as exc:
            if writer == "merge level":
                rd.merge_streaming("subtitles")
            elif writer == "index spill":
                rd.done("lines", ids)
            else:
                rd.record_videos(VideoItem(v, None) for v in ids)
        msg = str(exc.value)
        assert "no space left on device" in msg and "\n" not in msg, msg
        assert not rd.table_path("subtitles").exists()
