"""Crash and storage safety: SIGKILL at several points then resume equals a clean run; a
truncated or corrupt shard file is detected and its shard recomputed; a full disk stops the run
in one line, leaves no half-written file and loses no committed chunk."""

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

from howtocap.atomic import CorruptPartWarning, DiskFull, open_parquet
from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.engine.rundir import RunDir
from howtocap.llm import LLMOptions
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, add_video, run_cli, start_cli
from tests.support.stages import committed, status_records


def videos(tmp_path: Path, base: Path, n: int) -> Path:
    folder = tmp_path / "videos"
    for i in range(n):
        add_video(folder, f"v{i:02d}", base, GOOD.replace("eggs", f"egg{i}"))
    return folder


def tables(run: Path, names: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    rd = RunDir(run, create=False)
    return {t: rd.table(t) for t in names}


def no_temp_files(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.name.endswith(".tmp")]


def test_sweep_removes_dead_writers_temp_files_at_every_run_dir_depth(tmp_path: Path) -> None:
    """A kill can land while a chunk (work/<stage>/<shard>/) or a shard's status file
    (status/<stage>/) is being written: the next run must sweep that temp file, but never a
    live writer's."""
    from howtocap.atomic import HOST as host
    from howtocap.atomic import sweep_temp_files

    dead = subprocess.Popen(["true"])
    dead.wait()
    folders = [tmp_path, tmp_path / "captions", tmp_path / "status" / "caption",
               tmp_path / "work" / "caption" / "shard-00000",
               tmp_path / "cache" / "frames" / "hf_tiny"]  # a frame cached mid-align
    stale, live = [], []
    for i, folder in enumerate(folders):
        folder.mkdir(parents=True, exist_ok=True)
        stale.append(folder / f".v{i}.json.{host}~{dead.pid}.abc123.tmp")
        live.append(folder / f".w{i}.json.{host}~{os.getpid()}.abc123.tmp")
    for p in stale + live:
        p.write_text("{")
    kept = tmp_path / "index" / f".x.faiss.{host}~{dead.pid}.abc123.tmp"  # index/: not ours
    kept.parent.mkdir()
    kept.write_text("{")
    assert sweep_temp_files(tmp_path) == len(stale)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in [*live, kept])


@pytest.mark.slow
def test_sigkill_at_several_points_then_resume_equals_clean_run(
        tmp_path: Path, base_video: Path, tiny_clip: str) -> None:
    enc = tiny_clip  # "hf:<folder>", made once per session
    vids = videos(tmp_path, base_video, 5)
    with chat_server(delay=0.15) as srv:
        args = ["run", str(vids), "--llm-url", srv.url, "--parse-workers", "0",
                "--concurrency", "1", "--encoder", enc, "--quiet", "--batch-size", "2"]
        clean = tmp_path / "clean"
        assert run_cli(*args, "--out", str(clean)).returncode == 0
        want = tables(clean, ("subtitles", "captions", "aligned"))
        assert len(want["aligned"]) and want["aligned"]["config_id"].nunique() == 1
        # kill while captioning, then (the run started again on the same folder) while
        # aligning (benchmarks/robustness/bench_kill.py: 20 moments), batches of 2 videos: each
        # kill lands after one batch of its stage, in the middle of the next. One folder for
        # both kills: the run killed mid-align is itself a resume of the caption kill, and the
        # final resume must still give the clean run's tables (a duplicate or lost row left by
        # either resume shows there), at one full pipeline pass less than two folders.
        run = tmp_path / "killed"
        for stage in ("caption", "align"):
            proc = start_cli(*args, "--out", str(run))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and \
                    committed(run, stage) < 2:
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert committed(run, stage) < 5, f"the kill must land mid-{stage}"
        res = run_cli(*args, "--out", str(run))
        assert res.returncode == 0, res.stderr
        got = tables(run, ("subtitles", "captions", "aligned"))
        for name, df in want.items():
            pd.testing.assert_frame_equal(got[name], df, obj=f"{name} after the kills")
        assert not no_temp_files(run)


@pytest.mark.slow
def test_corrupt_shard_files_are_detected_and_recomputed(tmp_path: Path,
                                                         base_video: Path) -> None:
    """Shards of 2 videos, a video of shards 0 and 2 left to caption: the torn captions file
    of shard 0 (its footer gone, found when the shard is finished) and the subtitles file of
    shard 2 with one flipped byte (only the page checksum tells, found when captioning reads
    it) are named in warnings, dropped with their shards' records, and redone in the same
    run, to the tables of before; shard 1 is not touched."""
    from howtocap.engine.options import BatchConfig

    vids, out = videos(tmp_path, base_video, 6), tmp_path / "run"
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2), parse_workers=0)
        caption_run([vids], out, cfg, progress=False, batching=BatchConfig(shard_size=2))
        want = tables(out, ("subtitles", "captions"))
        rd = RunDir(out, create=False)
        k_cap, k_sub = rd.shard_of(["v01", "v05"]).tolist()
        assert (k_cap, k_sub, rd.shard_count()) == (0, 2, 3)
        rd.forget("caption", ["v00", "v04"])
        truncated = rd.shard_path("captions", k_cap)
        truncated.write_bytes(truncated.read_bytes()[:-40])  # torn: footer gone
        flipped = rd.shard_path("subtitles", k_sub)
        data = bytearray(flipped.read_bytes())
        col = pq.read_metadata(flipped).row_group(0).column(1)  # "start"
        at = col.data_page_offset + col.total_compressed_size - 2  # a page's payload
        data[at] ^= 0xFF  # same size, footer intact: only the page checksum can tell
        flipped.write_bytes(bytes(data))
        assert pq.read_metadata(flipped).num_rows  # its footer reads: only checksums tell
        with pytest.raises(OSError, match="(?i)checksum"):
            open_parquet(flipped).read()
        untouched = {p: p.stat().st_mtime_ns for p in
                     (rd.shard_path("captions", 1), rd.shard_path("subtitles", 1))}
        n = srv.requests
        with pytest.warns(CorruptPartWarning) as caught:
            subs, caps = caption_run([vids], out, cfg, progress=False)
        named = " ".join(str(w.message) for w in caught)
        assert str(truncated) in named and str(flipped) in named
        assert caps.done == 3 and srv.requests > n  # v00, v04, and v01 of the torn file
        assert subs.done == 2  # shard 2's subtitles, and no other shard's
        for name, df in tables(out, ("subtitles", "captions")).items():
            pd.testing.assert_frame_equal(df, want[name])
        for path in (truncated, flipped):  # redone whole
            assert len(open_parquet(path).read())
        assert {p: p.stat().st_mtime_ns for p in untouched} == untouched


@pytest.mark.slow
def test_a_corrupt_captions_file_is_redone_by_a_rerun_with_nothing_else_to_do(
        tmp_path: Path) -> None:
    """A re-run of a finished caption run whose captions shard file is torn: the run must
    end with the captions of before (not without that shard's)."""
    from howtocap.engine.options import BatchConfig
    from tests.support.windows import QuickLLM, config, write_source

    src, out = tmp_path / "c.json", tmp_path / "run"
    write_source(src, 8)
    caption_run(None, out, config(src), llm=QuickLLM(), progress=False,
                batching=BatchConfig(shard_size=2))
    rd = RunDir(out, create=False)
    want = rd.table("captions")
    torn = rd.shard_path("captions", 0)
    torn.write_bytes(torn.read_bytes()[:-40])
    with pytest.warns(CorruptPartWarning, match="shard-00000"):
        caption_run(None, out, config(src), llm=QuickLLM(), progress=False)
    pd.testing.assert_frame_equal(RunDir(out, create=False).table("captions"), want)


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


@pytest.mark.slow
def test_full_disk_stops_in_one_line_and_leaves_no_half_written_file(
        tmp_path: Path, base_video: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vids = videos(tmp_path, base_video, 8)
    with chat_server() as srv, small_disk(tmp_path, 256) as disk:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=1), parse_workers=0)
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
            real = atomic_mod._fsync

            def fail_later(name: str, *flags: int) -> None:
                calls["n"] += not flags  # a file's fsync (a folder's passes flags)
                if calls["n"] > 25:
                    raise OSError(errno.ENOSPC, "No space left on device", name)
                real(name, *flags)

            monkeypatch.setattr(atomic_mod, "_fsync", fail_later)
        with pytest.raises(DiskFull) as exc:
            caption_run([vids], out, cfg, progress=False)
        msg = str(exc.value)
        assert "no space left on device" in msg and "\n" not in msg and "resume" in msg
        assert not no_temp_files(out)
        rd = RunDir(out, create=False)
        # whatever is on disk is whole; no video recorded as failed for want of space; the
        # ok records of finished shards have their whole table files
        for part in out.rglob("*.parquet"):
            assert open_parquet(part).read() is not None, part
        for stage, table in (("subtitles", "subtitles"), ("caption", "captions")):
            recs = status_records(rd, stage)
            assert all(r.status == "ok" for r in recs)
            fin = [r.video_id for r in recs if rd.shard_path(
                f"status/{stage}", int(rd.shard_of([r.video_id])[0])).exists()]
            assert all(rd.done(stage, fin, table))
        # space again: the same command resumes to the tables of an uninterrupted run
        if filler is not None:
            filler.unlink()
        else:
            monkeypatch.undo()
        caption_run([vids], out, cfg, progress=False)
        for name, df in tables(clean, ("subtitles", "captions")).items():
            pd.testing.assert_frame_equal(tables(out, (name,))[name], df)


@pytest.mark.slow
def test_full_disk_is_one_line_on_the_command_line(tmp_path: Path, base_video: Path) -> None:
    vids = videos(tmp_path, base_video, 3)
    with chat_server() as srv, small_disk(tmp_path, 64) as disk:
        if disk is None:
            pytest.skip("needs root to mount a small tmpfs (the in-process test covers it)")
        (disk / "filler").write_bytes(b"\0" * (os.statvfs(disk).f_bavail
                                               * os.statvfs(disk).f_frsize - 8_000))
        res = run_cli("caption", str(vids), "--out", str(disk / "run"), "--llm-url", srv.url,
                      "--parse-workers", "0", "--quiet")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no space left on device" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_a_forked_writer_signs_its_temp_files_with_its_own_pid(tmp_path: Path) -> None:
    """A child forked after import (multiprocessing, bench_kill's runs) killed mid-write: its
    temp file must name the child, so the resume sweep (parent still alive) removes it."""
    import signal

    from howtocap.atomic import atomic_write, sweep_temp_files

    target = tmp_path / "work" / "caption" / "shard-00000" / "1-2-3.captions.parquet"
    pid = os.fork()
    if pid == 0:  # the child: start a write and never finish it
        def stall(tmp: str) -> None:
            Path(tmp).write_bytes(b"PAR1 half")
            os.kill(os.getpid(), signal.SIGKILL)

        atomic_write(target, stall)
        os._exit(1)
    os.waitpid(pid, 0)
    (left,) = target.parent.glob(".1-2-3.captions.parquet.*.tmp")
    assert f"~{pid}." in left.name
    assert sweep_temp_files(tmp_path) == 1 and not left.exists()


@pytest.mark.slow
def test_temp_files_of_a_killed_writer_are_swept_on_resume(tmp_path: Path,
                                                           base_video: Path) -> None:
    from howtocap.atomic import HOST as host

    vids, out = videos(tmp_path, base_video, 2), tmp_path / "run"
    dead = subprocess.Popen(["true"])
    dead.wait()
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=1), parse_workers=0)
        caption_run([vids], out, cfg, progress=False)
        left = out / "captions" / f".shard-00000.parquet.{host}~{dead.pid}.k1ll3d.tmp"
        other = out / f".videos.parquet.another-host~{dead.pid}.x.tmp"  # maybe alive there
        left.write_bytes(b"PAR1 half a file")
        other.write_bytes(b"PAR1")
        caption_run([vids], out, cfg, progress=False)
    assert not left.exists() and other.exists()


def test_a_full_disk_while_a_shard_is_finished_loses_no_chunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard's final files are written from its chunks, which stay until its status file
    is in place: a full disk there is one line, every committed video stays committed, and
    the resumed run finishes the shard without redoing any video."""
    import howtocap.atomic as atomic_mod
    from howtocap.engine.core import run_stage
    from howtocap.engine.options import BatchConfig
    from tests.support.stages import ITEMS, Lines

    real = atomic_mod._fsync

    def full(name: str, *flags: int) -> None:
        if f"{os.sep}status{os.sep}" in str(name):  # the shard's status file: written last
            raise OSError(errno.ENOSPC, "No space left on device", name)
        real(name, *flags)

    monkeypatch.setattr(atomic_mod, "_fsync", full)
    rd = RunDir(tmp_path / "run")
    with pytest.raises(DiskFull) as exc:
        run_stage(rd, ITEMS[:6], Lines(), progress=False, batching=BatchConfig(batch_size=2))
    msg = str(exc.value)
    assert "no space left on device" in msg and "\n" not in msg
    assert str(rd.shard_path("status/lines", 0)) in msg
    assert len(rd.writer("lines", 0).chunk_ids()) == 3 and not no_temp_files(rd.root)
    assert sorted(r.video_id for r in status_records(rd, "lines")) == \
        [it.video_id for it in ITEMS[:6]]
    assert not list(rd.root.glob("claims/**/*.lock"))  # its claim went back
    monkeypatch.undo()
    s = run_stage(rd, ITEMS[:6], Lines(), progress=False)
    assert (s.done, s.skipped) == (0, 6) and rd.shard_path("status/lines", 0).exists()
    assert len(rd.table("subtitles")) == 6 * 3 and not rd.writer("lines", 0).chunk_ids()


@pytest.mark.slow
def test_a_torn_subtitles_file_and_a_corrupt_captions_file_of_one_shard_are_redone_at_once(
        tmp_path: Path, base_video: Path) -> None:
    """A finished shard whose subtitles file is torn and whose captions file has a flipped
    byte: the torn file keeps the shard out of the first pass, so its captions file is first
    checked in the second; one re-run still ends with the tables of before (bench_kill found
    a run that stopped after two passes with the shard's captions gone)."""
    from howtocap.engine.options import BatchConfig

    vids, out = videos(tmp_path, base_video, 4), tmp_path / "run"
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2), parse_workers=0)
        caption_run([vids], out, cfg, progress=False, batching=BatchConfig(shard_size=2))
        want = tables(out, ("subtitles", "captions"))
        rd = RunDir(out, create=False)
        torn = rd.shard_path("subtitles", 1)
        torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
        flipped = rd.shard_path("captions", 1)
        data = bytearray(flipped.read_bytes())
        col = pq.read_metadata(flipped).row_group(0).column(1)
        data[col.data_page_offset + col.total_compressed_size - 2] ^= 0xFF
        flipped.write_bytes(bytes(data))
        with pytest.warns(CorruptPartWarning) as caught:
            caption_run([vids], out, cfg, progress=False)
        named = " ".join(str(w.message) for w in caught)
        assert str(torn) in named and str(flipped) in named
        for name, df in tables(out, ("subtitles", "captions")).items():
            pd.testing.assert_frame_equal(df, want[name])
