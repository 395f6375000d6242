"""The run directory a shard at a time (``engine/rundir.py``): a SIGKILL mid-shard resumes to
the tables of an uninterrupted run without redoing committed chunks; a shard is worked on by one
process (its claim); ``--retry-failed``, ``forget`` and a corrupt file rewrite only their shard;
the newest record of a video wins across chunks and runs (failures, attempts, ``--redo``);
``--shard K/N`` splits by shard number; a run directory of the old layout is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.atomic import CorruptPartWarning
from howtocap.engine import claims
from howtocap.engine.core import (
    SettingsChanged,
    Shard,
    prepare_stages,
    run_stage,
)
from howtocap.engine.options import BatchConfig
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import OldLayout, RunDir
from howtocap.engine.stage import BATCH_SECONDS, BATCH_SIZE, StageOutput, VideoInput
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.io.inputs import VideoItem
from tests.support.cli import run_cli
from tests.support.stages import (
    ITEMS,
    Lines,
    SquareStage,
    claim_holder,
    done_ids,
    record_table,
    rows,
    status_records,
    stop,
)

ROOT = Path(__file__).resolve().parents[2]


def files(root: Path, *folders: str) -> dict[str, tuple[bytes, int]]:
    """Every file under these folders of the run: its bytes and mtime (untouched or not)."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for f in folders for p in sorted((root / f).rglob("*")) if p.is_file()}


def status(rd: RunDir, stage: str) -> dict[str, StatusRecord]:
    return {r.video_id: r for r in status_records(rd, stage)}


def clean_table(rd: RunDir, name: str) -> pd.DataFrame:
    return rd.table(name).sort_values(["video_id", "start"]).reset_index(drop=True)


# -- SIGKILL mid-shard, two processes, claims ---------------------------------------------------

def _script(run: Path, log: Path, n: int, delay: float, *, shard_size: int = 4,
            batch: int = 2, barrier: Path | None = None) -> str:
    """A process running SquareStage on ``n`` videos of a run directory made with
    ``shard_size``, committing chunks of ``batch``; with ``barrier``, it says it is ready
    (``<barrier>.<pid>``) and starts once ``barrier`` exists (two processes start together)."""
    return textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from tests.support.stages import SquareStage
        from howtocap.io.inputs import VideoItem
        from howtocap.engine.core import run_stage
        from howtocap.engine.options import BatchConfig
        from howtocap.engine.rundir import RunDir
        barrier = {str(barrier) if barrier else None!r}
        if barrier:
            Path(f"{{barrier}}.{{os.getpid()}}").touch()
            while not Path(barrier).exists():
                time.sleep(0.01)
        items = [VideoItem(f"v_{{i:03d}}", None) for i in range({n})]
        s = run_stage(RunDir({str(run)!r}, shard_size={shard_size}), items,
                      SquareStage({str(log)!r}, delay={delay}), progress=False,
                      batching=BatchConfig(batch_size={batch}, batch_seconds=600.0))
        print("DONE", s.done, s.claimed_elsewhere, s.skipped, os.getpid())
    """)


def _mid_shard(run: Path) -> bool:
    """A shard finished and another with a committed chunk but not finished. The chunks are
    looked at before the finished shards: a shard finishing between the two looks is then
    never taken for an unfinished one (a count of both, ``committed``, was such a race)."""
    try:
        chunks = {p.parent.name
                  for p in (run / "work" / "square").glob("shard-*/*.status.parquet")}
    except FileNotFoundError:  # a shard's work folder removed as it finished, mid-glob
        return False
    done = {p.name for p in (run / "status" / "square").glob("shard-*.parquet")}
    return bool(done) and any(f"{c}.parquet" not in done for c in chunks)


def _committed_ids(run: Path) -> set[str]:
    """Videos whose result is on disk: in finished shards' status files and in chunks."""
    rd = RunDir(run, create=False)
    return set(record_table(rd, "square", ["status"]).column("video_id").to_pylist())


def test_a_sigkill_mid_shard_resumes_to_the_uninterrupted_tables(tmp_path: Path) -> None:
    """Shards of 4 videos, chunks of 2: killed once the first shard and a chunk of the
    second are committed. The re-run takes over the dead process's claim, does only the
    videos not committed, and ends with the tables and records of a run never killed, each
    video once, no temp file, work folder or claim left."""
    run, n = tmp_path / "run", 12
    # 0.4 s a video: the kill (polled every 5 ms) lands well before the next chunk of 2 is
    # committed, even with other tests on the same cores (at 0.15 s it sometimes finished
    # the second shard first)
    proc = subprocess.Popen([sys.executable, "-c", _script(run, tmp_path / "log1", n, 0.4)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not _mid_shard(run):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    chunks = list((run / "work" / "square").glob("shard-*/*.status.parquet"))
    assert chunks, "the kill must land inside a shard with committed chunks"
    assert list((run / "claims" / "square").glob("*.lock"))  # the dead process's claim
    before = _committed_ids(run)
    assert 6 <= len(before) < n and (run / "status" / "square" / "shard-00000.parquet").exists()

    out = subprocess.run([sys.executable, "-c", _script(run, tmp_path / "log2", n, 0.0)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    redone = done_ids(tmp_path / "log2")
    assert not set(redone) & before  # committed chunks are not redone
    assert sorted(redone) == sorted({f"v_{i:03d}" for i in range(n)} - before)
    assert out.stdout.split()[1:4] == [str(n - len(before)), "0", str(len(before))]

    clean = tmp_path / "clean"
    assert subprocess.run([sys.executable, "-c", _script(clean, tmp_path / "log3", n, 0.0)],
                          capture_output=True, timeout=300).returncode == 0
    got, want = RunDir(run, create=False), RunDir(clean, create=False)
    pd.testing.assert_frame_equal(got.table("squares"), want.table("squares"))
    assert got.table("squares")["video_id"].value_counts().eq(2).all()  # each video once
    cols = ["video_id", "status", "attempts", "config_id"]
    pd.testing.assert_frame_equal(got.table("status")[cols], want.table("status")[cols])
    assert sorted(p.name for p in (run / "status" / "square").iterdir()) == \
        [f"shard-{k:05d}.parquet" for k in range(3)]
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
    assert not (run / "work").exists() or not any((run / "work").rglob("*.parquet"))
    assert not list(run.glob("claims/**/*.lock"))


def test_a_live_holders_shard_is_skipped_and_a_killed_ones_taken_at_once(tmp_path: Path
                                                                          ) -> None:
    """Another live process holding a shard's claim: the shard is skipped, and ``claim``
    says no at once; SIGKILLed, its claim is free at once (the kernel drops the lock), its
    lock file left behind is simply taken."""
    items = [VideoItem(f"v_{i:03d}", None) for i in range(12)]
    rd = RunDir(tmp_path / "run", shard_size=4)
    rd.record_videos(items)
    lock = rd.writer("square", 1).claim_path
    holder = claim_holder(lock)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "True\n"
        t0 = time.monotonic()
        assert not rd.writer("square", 1).claim()
        assert time.monotonic() - t0 < 1.0  # non-blocking
        s = run_stage(rd, items, SquareStage(tmp_path / "log"), progress=False)
        assert (s.done, s.claimed_elsewhere) == (8, 4)
        assert sorted(done_ids(tmp_path / "log")) == \
            [f"v_{i:03d}" for i in [*range(4), *range(8, 12)]]
        assert not rd.shard_path("status/square", 1).exists() and lock.exists()
    finally:
        stop(holder)  # SIGKILL
    assert holder.returncode == -signal.SIGKILL and lock.exists()  # left behind, unlocked
    s = run_stage(rd, items, SquareStage(tmp_path / "log"), progress=False)
    assert (s.done, s.claimed_elsewhere, s.skipped) == (4, 0, 8)
    done = done_ids(tmp_path / "log")
    assert sorted(done) == sorted(set(done)) == [f"v_{i:03d}" for i in range(12)]
    assert not list(rd.root.glob("claims/**/*.lock"))


def test_of_many_processes_racing_for_one_shard_exactly_one_wins(tmp_path: Path) -> None:
    """Eight processes claim the same shard at once (each holds what it got until all have
    answered): one gets it; once it releases, the file is gone and the shard is free."""
    path, go = tmp_path / "claims" / "s" / "shard-00000.lock", tmp_path / "go"
    procs = [claim_holder(path, go) for _ in range(8)]
    try:
        go.touch()
        got = [p.stdout.readline() if p.stdout else "" for p in procs]
        assert sorted(got) == ["False\n"] * 7 + ["True\n"], got
        winner = procs[got.index("True\n")]
        assert winner.stdin is not None and winner.stdout is not None
        winner.stdin.write("release\n")
        winner.stdin.flush()
        assert winner.stdout.readline() == "released\n"
        assert not path.exists() and not (tmp_path / "claims").exists()  # folders too
        assert claims.claim(path) and path.exists()
        claims.release(path)
        assert not path.exists()
    finally:
        for p in procs:
            stop(p)


def test_a_claim_is_this_process_s_until_released(tmp_path: Path) -> None:
    """Claimed again in the process that holds it (``forget`` while it is held): yes, not a
    wait for itself; another process: no; a release of a claim not held removes nothing."""
    path = tmp_path / "claims" / "s" / "shard-00000.lock"
    assert claims.claim(path) and claims.claim(tmp_path / "claims" / "s" / ".." / "s" /
                                                path.name)
    other = claim_holder(path)
    try:
        assert other.stdout is not None and other.stdout.readline() == "False\n"
        assert other.stdin is not None
        other.stdin.write("release\n")  # not its claim: the file stays
        other.stdin.flush()
        assert other.stdout.readline() == "released\n" and path.exists()
    finally:
        stop(other)
    claims.release(path)
    assert not path.exists()


def test_two_processes_on_one_run_dir_never_do_the_same_shard(tmp_path: Path) -> None:
    """Two real processes started together on 8 shards of 3: each video is done exactly once,
    each shard by one process, and both did some."""
    run, log, n = tmp_path / "run", tmp_path / "log", 24
    go = tmp_path / "go"
    script = _script(run, log, n, 0.1, shard_size=3, batch=1, barrier=go)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    lines = [ln.split() for ln in (log / "done.log").read_text().splitlines()]
    ids = [v for v, _ in lines]
    assert sorted(ids) == [f"v_{i:03d}" for i in range(n)]  # each video exactly once
    rd = RunDir(run, create=False)
    by_shard: dict[int, set[str]] = {}
    for (_, pid), k in zip(lines, rd.shard_of(ids).tolist(), strict=True):
        by_shard.setdefault(k, set()).add(pid)
    assert sorted(by_shard) == list(range(8)) and all(len(p) == 1 for p in by_shard.values())
    assert len(set().union(*by_shard.values())) == 2  # both processes did shards
    assert sum(int(o[0].split()[1]) for o in outs) == n
    assert (rd.table("status")["status"] == "ok").sum() == n
    assert not list(run.glob("claims/**/*.lock"))


# -- which files a re-run rewrites --------------------------------------------------------------

class Fixed(SquareStage):
    """SquareStage whose "bad" video now works (its input was fixed)."""

    def process(self, video: VideoInput) -> Any:
        if "bad" in video.video_id:
            video = VideoInput(VideoItem(video.video_id.replace("bad", "ok"), None))
            out = super().process(video)
            df = out.tables["squares"]
            out.tables["squares"] = df.assign(video_id=df["video_id"].str.replace("ok", "bad"))
            return out
        return super().process(video)


def test_retry_failed_rewrites_only_the_shard_of_the_failed_video(tmp_path: Path) -> None:
    items = [VideoItem(f"v_{i:03d}", None) for i in range(12) if i != 6]
    items.insert(6, VideoItem("v_006bad_6", None))  # in id order: the 7th, in shard 1
    rd = RunDir(tmp_path / "run", shard_size=4)
    s = run_stage(rd, items, SquareStage(tmp_path / "log"), progress=False,
                  batching=BatchConfig(batch_size=2))
    assert s.done == 11 and [v for v, _ in s.failed] == ["v_006bad_6"]
    (k,) = rd.shard_of(["v_006bad_6"]).tolist()
    assert k == 1 and rd.shard_count() == 3
    before = files(rd.root, "squares", "status", "videos.parquet")
    time.sleep(0.01)
    # a plain re-run leaves the failure alone: not a file rewritten
    s = run_stage(rd, items, SquareStage(tmp_path / "log"), progress=False)
    assert (s.done, s.failed_before, s.skipped) == (0, 1, 11)
    assert files(rd.root, "squares", "status") == {p: v for p, v in before.items()
                                                    if not p.startswith("videos")}
    # --retry-failed: fails again; only shard 1's files are rewritten
    s = run_stage(rd, items, SquareStage(tmp_path / "log"), progress=False, retry_failed=True)
    assert [v for v, _ in s.failed] == ["v_006bad_6"] and s.skipped == 11
    assert status(rd, "square")["v_006bad_6"].attempts == 2
    after = files(rd.root, "squares", "status")
    changed = {p for p in after if after[p] != before.get(p)}
    assert "status/square/shard-00001.parquet" in changed
    assert changed <= {"status/square/shard-00001.parquet", "squares/shard-00001.parquet"}
    # fixed: it succeeds, and its rows join shard 1's table file alone
    s = run_stage(rd, items, Fixed(tmp_path / "log"), progress=False, retry_failed=True)
    assert s.done == 1 and status(rd, "square")["v_006bad_6"].status == "ok"
    again = files(rd.root, "squares", "status")
    assert {p for p in again if again[p] != after.get(p)} == {
        "status/square/shard-00001.parquet", "squares/shard-00001.parquet"}
    shard1 = pd.read_parquet(rd.shard_path("squares", 1))
    assert shard1["video_id"].tolist() == [v for v in ("v_004", "v_005", "v_006bad_6", "v_007")
                                           for _ in range(2)]


def test_forget_and_a_corrupt_file_redo_only_their_shard(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run", shard_size=4)
    run_stage(rd, ITEMS, Lines(), progress=False)
    want = clean_table(rd, "subtitles")
    before = files(rd.root, "subtitles", "status")
    time.sleep(0.01)
    rd.forget("lines", ["v_05"])
    after = files(rd.root, "subtitles", "status")
    assert {p for p in after if after[p] != before[p]} == {
        "subtitles/shard-00001.parquet", "status/lines/shard-00001.parquet"}
    assert "v_05" not in set(rd.table("subtitles")["video_id"])
    assert "v_05" not in status(rd, "lines") and len(status(rd, "lines")) == 9
    s = run_stage(rd, ITEMS, Lines(), progress=False)
    assert (s.done, s.skipped) == (1, 9)
    pd.testing.assert_frame_equal(clean_table(rd, "subtitles"), want)
    # a torn table file: found when read, dropped with the shard's status (the warning
    # names it), and that shard alone is redone
    torn = rd.shard_path("subtitles", 2)
    torn.write_bytes(torn.read_bytes()[:-40])
    again = RunDir(rd.root)
    with pytest.warns(CorruptPartWarning, match=torn.name):
        assert set(again.table("subtitles")["video_id"]) == {f"v_0{i}" for i in range(8)}
    assert not torn.exists() and not again.shard_path("status/lines", 2).exists()
    assert again.done("lines", ["v_07", "v_08"]) == [True, False]
    before = files(rd.root, "subtitles", "status")
    s = run_stage(again, ITEMS, Lines(), progress=False)
    assert (s.done, s.skipped) == (2, 8)  # shard 2 holds v_08, v_09
    pd.testing.assert_frame_equal(clean_table(again, "subtitles"), want)
    after = files(rd.root, "subtitles", "status")
    assert {p for p in after if after[p] != before.get(p)} == {
        "subtitles/shard-00002.parquet", "status/lines/shard-00002.parquet"}


def test_a_sigkill_between_a_shards_tables_and_its_status_file(tmp_path: Path) -> None:
    """A real SIGKILL when shard 1's table file is written whole and its status file is
    not: the shard is not finished, its chunks are still there, and the re-run finishes it
    from them without redoing a video, to the tables of an uninterrupted run."""
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from howtocap.engine.core import run_stage
        from howtocap.engine.options import BatchConfig
        from howtocap.engine import rundir
        from howtocap.engine.rundir import RunDir
        from tests.support.stages import ITEMS, Lines
        real, seen = rundir.atomic_write_parquet, []
        def die(data, path, **options):
            if path.parent.name == "lines" and path.parent.parent.name == "status":
                seen.append(path.name)  # a shard's status file: the shard is finished
                if len(seen) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(data, path, **options)
        rundir.atomic_write_parquet = die
        run_stage(RunDir({str(run)!r}, shard_size=4), ITEMS, Lines(), progress=False,
                  batching=BatchConfig(batch_size=2))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == -signal.SIGKILL, out.stderr
    rd = RunDir(run)
    assert rd.shard_path("subtitles", 1).exists() and not rd.shard_path("status/lines", 1).exists()
    assert len(rd.writer("lines", 1).chunk_ids()) == 2
    assert rd.done("lines", ["v_03", "v_04"]) == [True, False]
    s = run_stage(rd, ITEMS, Lines(), progress=False, batching=BatchConfig(batch_size=2))
    assert (s.done, s.skipped) == (2, 8)  # shard 2's videos; shard 1's were committed
    clean = RunDir(tmp_path / "clean", shard_size=4)
    run_stage(clean, ITEMS, Lines(), progress=False)
    pd.testing.assert_frame_equal(rd.table("subtitles"), clean.table("subtitles"))
    assert not rd.writer("lines", 1).chunk_ids()


def test_a_sigkill_inside_forget_leaves_the_video_to_redo(tmp_path: Path) -> None:
    """``forget`` rewrites a finished shard without the video: a real SIGKILL right after
    its table file is rewritten (before anything else) must not leave the video recorded
    as done without its rows; the re-run redoes it, to the tables of before."""
    rd = RunDir(tmp_path / "run", shard_size=4)
    run_stage(rd, ITEMS, Lines(), progress=False)
    want = clean_table(rd, "subtitles")
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import howtocap.engine.rundir as rundir_mod
        real = rundir_mod._write_rows
        def write_then_die(path, table, data):
            real(path, table, data)
            os.kill(os.getpid(), signal.SIGKILL)
        rundir_mod._write_rows = write_then_die
        rundir_mod.RunDir({str(rd.root)!r}).forget("lines", ["v_05"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    again = RunDir(rd.root)
    assert "v_05" not in set(again.table("subtitles")["video_id"])  # its rows went ...
    assert "v_05" not in status(again, "lines")  # ... and so did its record
    s = run_stage(again, ITEMS, Lines(), progress=False)
    assert (s.done, s.skipped) == (1, 9)
    pd.testing.assert_frame_equal(clean_table(again, "subtitles"), want)


# -- records: the newest wins across chunks and runs --------------------------------------------

def test_newest_record_wins_across_chunks_and_runs(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run", shard_size=4)
    s = run_stage(rd, ITEMS, Lines(fail={"v_01", "v_07"}), progress=False,
                  batching=BatchConfig(batch_size=3))
    assert s.done == 8 and len(s.failed) == 2
    # a plain re-run leaves the failures alone; --retry-failed tries them again
    s = run_stage(rd, ITEMS, Lines(), progress=False, batching=BatchConfig(batch_size=3))
    assert (s.done, s.failed_before) == (0, 2)
    s = run_stage(rd, ITEMS, Lines(fail={"v_07"}), progress=False,
                  batching=BatchConfig(batch_size=3), retry_failed=True, max_attempts=3)
    assert s.done == 1 and [v for v, _ in s.failed] == ["v_07"]
    recs = status(rd, "lines")
    assert [recs[v].attempts for v in ("v_01", "v_07")] == [2, 2]
    assert recs["v_07"].cause == "bad input" and "scripted failure" in recs["v_07"].message
    assert "v_07" not in set(rd.table("subtitles")["video_id"])
    s = run_stage(rd, ITEMS, Lines(fail={"v_07"}), progress=False, retry_failed=True,
                  max_attempts=2)
    assert (s.done, s.gave_up) == (0, 1)  # failed twice: left alone
    # other settings: refused, then --redo clears every shard and recomputes
    with pytest.raises(SettingsChanged, match="offset"):
        run_stage(rd, ITEMS, Lines(offset=10.0), progress=False)
    prepare_stages(rd, [Lines(offset=10.0)], redo=True)
    assert not rd.has_table("subtitles") and not rd.table_files("status")
    s = run_stage(rd, ITEMS, Lines(offset=10.0), progress=False, batching=BatchConfig(batch_size=4))
    assert s.done == 10
    texts = set(rd.table("subtitles")["text"])
    assert "v_03 c 13.0" in texts and "v_03 c 3" not in texts


def test_chunk_records_of_an_unfinished_shard_count_and_are_kept(tmp_path: Path) -> None:
    """A run stopped by a service (no record for the video in flight): the unfinished
    shard's chunks count as done, ``--batch-seconds 0`` commits every result as a chunk, and
    the resumed run finishes the shard from its chunks."""
    for seconds, chunks in ((0.0, 3), (600.0, 1)):
        rd = RunDir(tmp_path / f"run{seconds}")
        with pytest.raises(ServiceUnavailable):
            run_stage(rd, ITEMS[:5], Lines(down={"v_03"}), progress=False,
                      batching=BatchConfig(batch_size=1000, batch_seconds=seconds))
        w = rd.writer("lines", 0)
        assert len(w.chunk_ids()) == chunks and not rd.shard_path("status/lines", 0).exists()
        assert sorted(status(rd, "lines")) == ["v_00", "v_01", "v_02"]
        assert rd.done("lines", ["v_00"]) == [False]  # not a finished shard yet
        s = run_stage(rd, ITEMS[:5], Lines(), progress=False)
        assert (s.done, s.skipped) == (2, 3) and not w.chunk_ids()
        assert rd.done("lines", [v.video_id for v in ITEMS[:5]]) == [True] * 5
        assert sorted(set(rd.table("subtitles")["video_id"])) == [f"v_0{i}" for i in range(5)]


def test_a_chunk_without_its_status_file_is_not_done_and_goes(tmp_path: Path) -> None:
    """A kill between a chunk's table file and its status file leaves a table file nobody
    reads: its videos are redone, and finishing the shard removes it."""
    rd = RunDir(tmp_path / "run")
    with pytest.raises(ServiceUnavailable):
        run_stage(rd, ITEMS[:4], Lines(down={"v_02"}), progress=False,
                  batching=BatchConfig(batch_size=1))
    w = rd.writer("lines", 0)
    orphan = w.work / "00000000000000000001-1-000001.subtitles.parquet"
    rows("v_03").to_parquet(orphan, index=False)
    assert sorted(status(rd, "lines")) == ["v_00", "v_01"]
    s = run_stage(rd, ITEMS[:4], Lines(), progress=False)
    assert (s.done, s.skipped) == (2, 2) and not orphan.exists()
    assert rd.table("subtitles")["video_id"].value_counts().to_dict() == {
        v.video_id: 3 for v in ITEMS[:4]}


def test_chunks_are_in_commit_order_whatever_the_clock(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock stepped back (or another host's, after a takeover) between two chunks: the
    later chunk's record of a video still wins, in ``records`` and in the finished shard."""
    import howtocap.engine.rundir as rundir_mod

    ticks = iter(range(10**12, 0, -10**9))  # every reading earlier than the one before
    monkeypatch.setattr(rundir_mod.time, "time_ns", lambda: next(ticks))
    rd = RunDir(tmp_path / "run")
    rd.record_videos(ITEMS[:2])
    w = rd.writer("lines", 0, ("subtitles",))
    w.commit([StatusRecord("v_00", "lines", "error", cause="service")], {})
    w.commit([StatusRecord("v_00", "lines", "ok"), StatusRecord("v_01", "lines", "ok")],
             {"subtitles": pd.concat([rows("v_00"), rows("v_01")])})
    again = rd.writer("lines", 0, ("subtitles",))  # another process, later: numbered after
    again.commit([StatusRecord("v_01", "lines", "error", cause="bad input")], {})
    assert {r.video_id: r.status for r in status_records(rd, "lines")} == {
        "v_00": "ok", "v_01": "error"}
    again.finish()
    assert {r.video_id: r.status for r in status_records(rd, "lines")} == {
        "v_00": "ok", "v_01": "error"}
    assert set(rd.table("subtitles")["video_id"]) == {"v_00"}


def test_a_video_given_twice_is_done_once(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run", shard_size=2)
    items = [ITEMS[1], ITEMS[2], ITEMS[1], ITEMS[3], ITEMS[2]]
    s = run_stage(rd, items, Lines(), progress=False)
    assert s.done == 3
    assert rd.table("subtitles")["video_id"].value_counts().to_dict() == {
        "v_01": 3, "v_02": 3, "v_03": 3}
    s = run_stage(rd, items, Lines(), progress=False)
    assert (s.done, s.skipped) == (0, 3)


class SomeEmpty(Lines):
    """``Lines`` whose videos in ``empty`` have no rows at all (every caption rejected, say)."""

    def __init__(self, empty: set[str]) -> None:
        super().__init__()
        self.empty = empty

    def process(self, video: VideoInput) -> StageOutput:
        if video.video_id in self.empty:
            return StageOutput({"subtitles": rows(video.video_id).iloc[:0]})
        return super().process(video)


def test_videos_without_rows_are_done_and_a_shard_of_none_has_no_file(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run", shard_size=2)
    s = run_stage(rd, ITEMS[:6], SomeEmpty({"v_00", "v_02", "v_03"}), progress=False,
                  batching=BatchConfig(batch_size=1))
    assert s.done == 6 and all(rd.done("lines", [v.video_id for v in ITEMS[:6]]))
    got = rd.table("subtitles")
    assert len(got) == 3 * 3 and {"v_00", "v_02", "v_03"}.isdisjoint(got["video_id"])
    assert [p.name for p in rd.table_files("subtitles")] == ["shard-00000.parquet",
                                                             "shard-00002.parquet"]
    assert len(pd.read_parquet(rd.root / "subtitles")) == 9  # read as a folder


def test_shard_files_are_grouped_by_video_in_id_order(tmp_path: Path) -> None:
    """A chunk's rows are written with their videos in id order, each video's rows in their
    own order, whatever order the chunks came in; the shard's file likewise."""
    rd = RunDir(tmp_path / "run", shard_size=4)
    items = [VideoItem(f"v_{i:02d}", None) for i in (3, 1, 2, 0)]
    rd.record_videos(items)
    w = rd.writer("lines", 0, ("subtitles",))
    for chunk in (["v_03", "v_01"], ["v_02", "v_00"]):
        w.commit([StatusRecord(v, "lines", "ok") for v in chunk],
                 {"subtitles": pd.concat([rows(v) for v in chunk])})
    w.finish()
    got = pd.read_parquet(rd.shard_path("subtitles", 0))
    assert got["video_id"].tolist() == [f"v_0{i}" for i in range(4) for _ in range(3)]
    assert got["text"].tolist() == [f"v_0{i} {k}" for i in range(4)
                                    for k in (f"c {i}.0", "a", "b")]
    assert pd.read_parquet(rd.shard_path("status/lines", 0))["video_id"].tolist() == \
        [f"v_0{i}" for i in range(4)]


# -- numbering, --shard -------------------------------------------------------------------------

def test_shard_k_of_n_keeps_the_shards_k_mod_n(tmp_path: Path) -> None:
    items = [VideoItem(f"v_{i:02d}", None) for i in range(20)]
    rd = RunDir(tmp_path / "run", shard_size=3)  # 7 shards
    got: dict[int, set[int]] = {}
    for k in range(3):
        s = run_stage(rd, items, Lines(), progress=False, shard=Shard.parse(f"{k}/3"))
        mine = {p for p in range(7) if p % 3 == k}
        got[k] = {int(p.stem.split("-")[1]) for p in (rd.root / "status" / "lines").iterdir()}
        got[k] -= set().union(*(got[j] for j in range(k)))
        assert got[k] == mine
        assert s.done == sum(min(3, 20 - 3 * p) for p in mine)
    ok = rd.table("status")
    assert sorted(ok["video_id"]) == [v.video_id for v in items]
    assert rd.shard_of(["v_05", "v_06", "v_19", "nope"]).tolist() == [1, 2, 6, -1]
    assert Shard(1, 3).owns(4) and not Shard(1, 3).owns(5)
    for bad in ("3/3", "x", "1/0"):
        with pytest.raises(HowtocapError, match="--shard"):
            Shard.parse(bad)


def test_videos_are_numbered_once_new_ones_appended_in_the_order_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``videos.parquet``: a video's number never changes; videos added later come after,
    in the order first given; recorded a chunk at a time, the same table as at once; a
    video given twice keeps its first place and its last path; an empty path never erases
    one recorded before; a row group per shard."""
    import pyarrow.parquet as pq

    import howtocap.engine.rundir as rundir_mod

    first = [VideoItem(f"v_{i:02d}", None) for i in (5, 1, 9, 3, 7)]
    then = [VideoItem("v_02", "/b/v_02.mp4"), VideoItem("v_01", "/a/v_01.mp4"),
            VideoItem("v_00", None), VideoItem("v_09", None), VideoItem("v_02", "/c/v_02.mp4")]
    tables = []
    for chunk in (10**6, 2):
        monkeypatch.setattr(rundir_mod, "VIDEO_CHUNK", chunk)
        rd = RunDir(tmp_path / f"run{chunk}", shard_size=2)
        assert rd.record_videos(iter(first)) == 5
        assert rd.record_videos(iter(then)) == 7
        got = pq.read_table(rd.table_path("videos")).to_pandas()
        assert got["video_id"].tolist() == ["v_05", "v_01", "v_09", "v_03", "v_07",
                                            "v_02", "v_00"]
        assert got["video_path"].tolist() == ["", "/a/v_01.mp4", "", "", "", "/c/v_02.mp4",
                                              ""]
        assert pq.ParquetFile(rd.table_path("videos")).num_row_groups == 4
        assert rd.shard_videos(3)["video_id"].to_pylist() == ["v_00"]
        assert rd.shard_of(["v_00", "v_05", "v_03"]).tolist() == [3, 0, 1]
        assert (rd.shard_count(), rd.video_count()) == (4, 7)
        tables.append(got)
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert RunDir(tmp_path / "run2", shard_size=50).shard_size == 2  # fixed when made


def test_shard_lookup_survives_hash_collisions(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids of equal hash are told apart by reading them back: with every id of one hash the
    run's shards and tables are those of a run without collisions."""
    import howtocap.engine.rundir as rundir_mod

    items = [VideoItem(f"v_{i:02d}", None) for i in range(10)]
    clean = RunDir(tmp_path / "clean", shard_size=3)
    run_stage(clean, items, Lines(fail={"v_04"}), progress=False)
    ids = [it.video_id for it in items] + ["nope"]
    want = clean.shard_of(ids).tolist()
    monkeypatch.setattr(rundir_mod, "hash", lambda s: 5, raising=False)
    rd = RunDir(tmp_path / "run", shard_size=3)
    s = run_stage(rd, items, Lines(fail={"v_04"}), progress=False)
    assert s.done == 9
    assert rd.shard_of(ids).tolist() == want == \
        [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, -1]
    assert rd.done("lines", ids) == [i not in (4, 10) for i in range(11)]
    pd.testing.assert_frame_equal(rd.table("subtitles"), clean.table("subtitles"))


@pytest.mark.parametrize("chunks", [1, 7])
def test_a_shards_records_are_each_videos_newest(tmp_path: Path, chunks: int) -> None:
    """Each video's newest record (chunks in commit order), against a dict of last
    records, on ids repeated at random across the chunks."""
    import numpy as np

    rng = np.random.default_rng(3)
    ids = [f"v{int(i):04d}" for i in rng.integers(0, 400, 2_000)]
    rd = RunDir(tmp_path / "run", shard_size=1000)
    w = rd.writer("lines", 0, ())
    want: dict[str, str] = {}
    for c, part in enumerate(np.array_split(np.arange(len(ids)), chunks)):
        recs = {ids[i]: f"{c}-{i}" for i in part.tolist()}  # within a chunk: one each
        w.commit([StatusRecord(v, "lines", "ok", message=m) for v, m in recs.items()], {})
        want.update(recs)
    got = w.records(["message"])
    assert dict(zip(got.column("video_id").to_pylist(), got.column("message").to_pylist(),
                    strict=True)) == want and got.num_rows == len(want)
    assert rd.writer("lines", 1).records().num_rows == 0


def test_batch_flags_give_the_defaults_and_refuse_nonsense() -> None:
    from pydantic import ValidationError

    from howtocap.engine.options import BatchConfig

    got = BatchConfig()
    assert (got.batch_size, got.batch_seconds, got.shard_size) == (BATCH_SIZE, BATCH_SECONDS, None)
    assert BatchConfig(batch_seconds=0).batch_seconds == 0.0
    for bad in ({"batch_size": 0}, {"shard_size": 0}, {"batch_seconds": -1.0}):
        with pytest.raises(ValidationError):
            BatchConfig(**bad)


# -- the old layout -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_directory_of_the_old_layout_is_one_line(tmp_path: Path) -> None:
    old = tmp_path / "old"
    (old / "parts" / "status" / "caption").mkdir(parents=True)
    (old / "parts" / "status" / "caption" / "v1.json").write_text("{}")
    (old / "captions.parquet").write_bytes(b"PAR1")
    before = sorted(p for p in old.rglob("*"))
    with pytest.raises(OldLayout, match=r"howtocap 0\.1\.x") as exc:
        RunDir(old)
    assert str(old) in str(exc.value) and "\n" not in str(exc.value)
    sub = tmp_path / "c.json"
    sub.write_text('{"v1": {"start": [0], "end": [2], "text": ["crack the eggs"]}}')
    for args in (["status", str(old)],
                 ["caption", "--subtitles", str(sub), "--out", str(old), "--llm-url",
                  "http://127.0.0.1:9", "--quiet"]):
        res = run_cli(*args)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "0.1.x" in lines[0] and str(old) in lines[0] and "parts/" in lines[0]
        assert "Traceback" not in res.stderr and res.stdout == ""
    assert sorted(p for p in old.rglob("*")) == before  # nothing written into it


def test_a_kill_while_a_one_chunk_shard_is_linked_into_place_finishes_on_resume(
        tmp_path: Path) -> None:
    """A shard done in one chunk has its files linked into place, the status file last: a
    kill after the table files (before the status file) leaves the chunk whole, and the
    next finish gives the shard its rows (renaming the chunk's files away lost them)."""
    from howtocap.engine import rundir as rundir_mod

    rd = RunDir(tmp_path / "run", shard_size=4)
    rd.record_videos(VideoItem(f"v_{i}", None) for i in range(3))
    w = rd.writer("square", 0, ("squares",))
    df = pd.DataFrame({"video_id": ["v_0", "v_0", "v_1"], "start": [0.0, 1.0, 0.0],
                       "value": [1, 2, 3]})
    w.commit([StatusRecord(v, "square", "ok") for v in ("v_0", "v_1", "v_2")],
             {"squares": df})
    real = rundir_mod._link

    def killed(src: Path, dst: Path) -> None:
        if dst.name.endswith(".parquet") and dst.parent.parent.name == "status":
            raise SystemExit("killed")  # before the status file: the kill
        real(src, dst)

    rundir_mod._link = killed
    try:
        with pytest.raises(SystemExit):
            w.finish()
    finally:
        rundir_mod._link = real
    assert not rd.shard_path("status/square", 0).exists() and w.chunk_ids()
    rd.writer("square", 0, ("squares",)).finish()  # the resumed run finishes the shard
    got = rd.table("squares")
    assert got["video_id"].tolist() == ["v_0", "v_0", "v_1"]
    assert got["value"].tolist() == [1, 2, 3]
    assert rd.done("square", ["v_0", "v_1", "v_2"]) == [True, True, True]
    assert not (tmp_path / "run" / "work").exists()


def test_a_claim_survives_another_worker_removing_the_empty_claims_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers remove the claims folder when they release its last lock; one that does so
    between another's mkdir and its open made that open fail (seen with ``--processes 2``):
    the claim is asked again."""
    path = tmp_path / "claims" / "caption" / "shard-00001.lock"
    real_open = os.open
    removed: list[Path] = []

    def open_after_rmdir(p: Any, *args: Any) -> int:
        if not removed:  # the other worker's release, just before our open
            removed.append(path.parent)
            path.parent.rmdir()
        return real_open(p, *args)

    monkeypatch.setattr(claims.os, "open", open_after_rmdir)
    assert claims.claim(path) and removed and path.exists()
    claims.release(path)


def test_a_lock_file_released_between_open_and_lock_is_not_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder (a real process) releases, unlinking the file, just after our open and
    before our lock: the lock we then get is of a file no longer in the folder, so the claim
    is asked again and holds the new file, which another process then cannot take."""
    path = tmp_path / "claims" / "s" / "shard-00000.lock"
    holder = claim_holder(path)
    real_open = os.open
    opened: list[int] = []

    def open_then_released(p: Any, *args: Any) -> int:
        fd = real_open(p, *args)
        if not opened and holder.stdin and holder.stdout:  # the holder releases right now
            holder.stdin.write("release\n")
            holder.stdin.flush()
            assert holder.stdout.readline() == "released\n"
        opened.append(fd)
        return fd

    try:
        assert holder.stdout is not None and holder.stdout.readline() == "True\n"
        monkeypatch.setattr(claims.os, "open", open_then_released)
        assert claims.claim(path) and len(opened) == 2
        monkeypatch.undo()
        other = claim_holder(path)
        assert other.stdout is not None and other.stdout.readline() == "False\n"
        stop(other)
    finally:
        stop(holder)
    claims.release(path)
    assert not path.exists()


def test_a_file_system_without_locks_or_space_is_one_line_naming_the_lock_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lustre mounted without ``-o flock`` answers ENOSYS, a full disk ENOSPC: one line each."""
    import errno

    from howtocap.atomic import DiskFull

    path = tmp_path / "claims" / "s" / "shard-00000.lock"

    def refused(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(claims.fcntl, "flock", refused)
    with pytest.raises(HowtocapError, match="no file lock") as got:
        claims.claim(path)
    assert str(path) in str(got.value) and "\n" not in str(got.value)
    monkeypatch.undo()

    def full(*args: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(claims.os, "open", full)
    with pytest.raises(DiskFull, match=str(path)):
        claims.claim(path)
