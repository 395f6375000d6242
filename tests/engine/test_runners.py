"""Runners: local threads and Ray Data on a real local cluster give the same tables; a failing
video is one status line; setup runs once per worker; two processes on one run directory never
do the same video; a killed run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import LocalRunner, RayRunner, make_runner, parse_stage_resources
from howtocap.engine.stage import BaseStage, StageOutput, VideoInput, run_one
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from tests.support.stages import (
    SquareStage,
    claim_holder,
    committed,
    done_ids,
    record_table,
    setups,
    stop,
)

ITEMS = [VideoItem(f"v_{i}", None) for i in range(10)] + [VideoItem("bad_3", None)]


def test_a_stage_runs_without_any_runner(tmp_path: Path) -> None:
    stage = SquareStage(tmp_path / "log")
    res = run_one(stage, VideoInput(VideoItem("v_4", None)))
    assert res.ok and res.tables["squares"]["value"].tolist() == [16, 17]
    bad = run_one(stage, VideoInput(VideoItem("bad_1", None)))
    assert not bad.ok and bad.message == "bad_1: scripted failure" and not bad.internal
    assert setups(tmp_path / "log") == [os.getpid()]  # setup once, however many videos


def test_local_runner_threads_share_one_setup(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    summary = run_stage(rd, ITEMS, SquareStage(tmp_path / "log", delay=0.01),
                        runner=LocalRunner(4), progress=False)
    assert summary.done == 10 and summary.failed == [("bad_3", "bad_3: scripted failure")]
    assert setups(tmp_path / "log") == [os.getpid()]
    assert sorted(done_ids(tmp_path / "log")) == sorted(f"v_{i}" for i in range(10))
    assert not list((rd.root / "claims").rglob("*.lock"))  # every claim released


def test_processes_take_whole_shards_and_give_what_one_process_gives(tmp_path: Path) -> None:
    one = RunDir(tmp_path / "one", shard_size=3)
    run_stage(one, ITEMS, SquareStage(tmp_path / "log1"), progress=False)
    many = RunDir(tmp_path / "many", shard_size=3)
    summary = run_stage(many, ITEMS, SquareStage(tmp_path / "log2", delay=0.05),
                        runner=make_runner("local", processes=2), progress=False)
    assert summary.done == 10 and summary.failed == [("bad_3", "bad_3: scripted failure")]
    assert summary.claimed_elsewhere == 0 and summary.skipped == 0
    pd.testing.assert_frame_equal(one.table("squares"), many.table("squares"))
    cols = ["video_id", "stage", "status", "message", "attempts"]
    pd.testing.assert_frame_equal(one.table("status")[cols], many.table("status")[cols])
    pids = setups(tmp_path / "log2")  # the stage loaded once in each of two other processes
    assert len(pids) == len(set(pids)) == 2 and os.getpid() not in pids
    ran = dict(ln.split() for ln in (tmp_path / "log2" / "done.log").read_text().splitlines())
    shard_of = many.shard_of(list(ran))
    by_shard: dict[int, set[str]] = {}
    for pid, k in zip(ran.values(), shard_of, strict=True):
        by_shard.setdefault(int(k), set()).add(pid)
    assert all(len(p) == 1 for p in by_shard.values())  # a shard is one process's work
    assert {p for ps in by_shard.values() for p in ps} == {str(p) for p in pids}
    assert many.stats.read("square")["videos"] == 10  # written once, by this process
    assert not list((many.root / "claims").rglob("*.lock"))
    again = run_stage(many, ITEMS, SquareStage(tmp_path / "log2"),
                      runner=make_runner("local", processes=2), progress=False)
    assert again.done == 0 and again.skipped == 10 and again.failed_before == 1


def test_processes_stop_on_a_service_gone_and_a_rerun_finishes(tmp_path: Path) -> None:
    """A service gone in one process's shard: the run stops with exit-75's error, nothing
    is recorded for the video in flight, and a re-run does what is left."""
    from howtocap.errors import ServiceUnavailable
    from tests.support.stages import ITEMS as LINES
    from tests.support.stages import Lines

    rd = RunDir(tmp_path / "run", shard_size=3)
    with pytest.raises(ServiceUnavailable, match="went away"):
        run_stage(rd, LINES, Lines(down={"v_04"}), progress=False,
                  runner=make_runner("local", processes=2))
    assert "v_04" not in set(rd.table("subtitles")["video_id"])
    again = run_stage(rd, LINES, Lines(), progress=False, runner=make_runner("local", processes=2))
    assert again.done + again.skipped == 10 and again.done >= 1
    assert sorted(set(rd.table("subtitles")["video_id"])) == [v.video_id for v in LINES]


def test_processes_leave_a_stage_holding_its_callers_model_here(tmp_path: Path) -> None:
    stage = SquareStage(tmp_path / "log")
    stage._model = object()  # what a caller hands in cannot be rebuilt from settings
    rd = RunDir(tmp_path / "run", shard_size=3)
    summary = run_stage(rd, ITEMS, stage, runner=make_runner("local", processes=2),
                        progress=False)
    assert summary.done == 10 and setups(tmp_path / "log") == [os.getpid()]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """One local Ray instance for this module's Ray tests, started here the way `--runner ray`
    without an address starts one; the other processes join it by its address (what users
    on a cluster do) instead of each paying seconds of CPU to start their own."""
    env = dict(os.environ)
    ray = RayRunner()._init()  # sets RAY_AUTH_MODE=token: the drivers that join inherit it
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(env)


@pytest.mark.slow
def test_ray_equals_local_and_sets_up_once_per_actor(tmp_path: Path, ray_cluster: str) -> None:
    local = RunDir(tmp_path / "local")
    run_stage(local, ITEMS, SquareStage(tmp_path / "llog"), runner=LocalRunner(2),
              progress=False)
    ray_dir = RunDir(tmp_path / "ray")
    summary = run_stage(ray_dir, ITEMS, SquareStage(tmp_path / "rlog"),
                        runner=RayRunner(workers=2), progress=False)
    assert summary.done == 10 and summary.failed == [("bad_3", "bad_3: scripted failure")]
    pd.testing.assert_frame_equal(local.table("squares"), ray_dir.table("squares"))
    a, b = local.table("status"), ray_dir.table("status")
    cols = ["video_id", "stage", "status", "message", "warnings"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    pids = setups(tmp_path / "rlog")
    assert len(pids) == len(set(pids)) <= 2 and os.getpid() not in pids  # once per actor
    # every video ran in an actor that had set up (Ray may give one actor all the videos)
    assert {int(p) for p in pids} >= {int(ln.split()[1]) for ln in
                                      (tmp_path / "rlog" / "done.log").read_text().splitlines()}
    # a re-run has nothing left to do
    again = run_stage(ray_dir, ITEMS, SquareStage(tmp_path / "rlog"), runner=RayRunner(2),
                      progress=False)
    # (the failed video stays failed without --retry-failed)
    assert again.done == 0 and again.skipped == 10 and again.failed_before == 1


def _worker_script(run: Path, log: Path, n: int, delay: float, runner: str,
                   batch: int = 4, die_at_chunk: int = 0, ray_address: str | None = None) -> str:
    """A process running SquareStage on ``n`` videos; ``die_at_chunk``: SIGKILL itself just
    before writing its K-th chunk's status file (that chunk's table files are written);
    ``ray_address``: the Ray instance to join."""
    return textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        if {die_at_chunk}:
            from howtocap.engine import rundir as R
            real, seen = R.records_table, []
            def die(records, *a, **k):
                if records:  # a chunk's (finishing a shard builds an empty one)
                    seen.append(1)
                    if len(seen) == {die_at_chunk}:
                        os.kill(os.getpid(), signal.SIGKILL)
                return real(records, *a, **k)
            R.records_table = die
        from tests.support.stages import SquareStage
        from howtocap.io.inputs import VideoItem
        from howtocap.engine.core import run_stage
        from howtocap.engine.options import BatchConfig
        from howtocap.engine.runners import make_runner
        from howtocap.engine.rundir import RunDir
        items = [VideoItem(f"v_{{i}}", None) for i in range({n})]
        s = run_stage(RunDir({str(run)!r}), items, SquareStage({str(log)!r}, delay={delay}),
                      runner=make_runner({runner!r}, workers=1,
                                         ray_address={ray_address!r}),
                      progress=False,
                      batching=BatchConfig(batch_size={batch}))
        print("DONE", s.done, s.claimed_elsewhere, s.skipped)
    """)


def test_two_processes_on_one_run_dir_never_do_a_video_twice(tmp_path: Path) -> None:
    """Shards of 4 videos: each process claims a shard at a time, so both get work, and no
    video (hence no shard) is done by both."""
    run, log = tmp_path / "run", tmp_path / "log"
    RunDir(run, shard_size=4).record_videos(VideoItem(f"v_{i}", None) for i in range(16))
    script = _worker_script(run, log, 16, 0.1, "local")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    done = done_ids(log)
    assert sorted(done) == sorted(set(done)) and len(done) == 16  # each video exactly once
    counts = [int(o[0].split()[1]) for o in outs]
    assert sum(counts) == 16 and min(counts) > 0  # both did a share
    shards = [set(pd.read_parquet(p)["video_id"]) for p in
              sorted((run / "status" / "square").glob("shard-*.parquet"))]
    assert len(shards) == 4 and sum(len(b) for b in shards) == 16 and \
        set().union(*shards) == {f"v_{i}" for i in range(16)}  # each video in one shard
    assert not list((run / "claims").rglob("*.lock"))


def test_a_killed_process_claims_are_taken_over_at_once(tmp_path: Path) -> None:
    """Two other real processes hold the claims of v_1's and v_2's shards: the one SIGKILLed
    is taken over at once, the live one skipped until it is killed too."""
    rd = RunDir(tmp_path / "run", shard_size=1)  # a video a shard: v_k is shard k
    rd.record_videos(ITEMS[:3])
    holders = [claim_holder(rd.writer("square", k).claim_path) for k in (1, 2)]
    try:
        assert [h.stdout.readline() if h.stdout else "" for h in holders] == ["True\n"] * 2
        stop(holders[0])
        summary = run_stage(rd, ITEMS[:3], SquareStage(tmp_path / "log"), progress=False)
        assert summary.done == 2 and summary.claimed_elsewhere == 1
        assert sorted(done_ids(tmp_path / "log")) == ["v_0", "v_1"]
        stop(holders[1])
        assert run_stage(rd, ITEMS[:3], SquareStage(tmp_path / "log"), progress=False).done == 1
    finally:
        for h in holders:
            stop(h)
    assert not list((rd.root / "claims").rglob("*.lock"))


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_killed_run_resumes_to_the_same_tables(tmp_path: Path, runner: str,
                                               request: pytest.FixtureRequest) -> None:
    run, log = tmp_path / "run", tmp_path / "log"
    n = 12
    ray = request.getfixturevalue("ray_cluster") if runner == "ray" else None
    proc = subprocess.Popen([sys.executable, "-c", _worker_script(run, log, n, 0.4, runner,
                                                                  batch=2, ray_address=ray)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and committed(run, "square") < 3:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver (Ray ends a dead driver's workers)
    proc.wait()
    finished = committed(run, "square")
    assert 3 <= finished < n, "the kill must land mid-run"
    out = subprocess.run([sys.executable, "-c", _worker_script(run, log, n, 0.0, runner,
                                                               ray_address=ray)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    resumed = RunDir(run).table("squares")
    clean = RunDir(tmp_path / "clean")
    run_stage(clean, [VideoItem(f"v_{i}", None) for i in range(n)],
              SquareStage(tmp_path / "clog"), progress=False)
    pd.testing.assert_frame_equal(resumed, clean.table("squares"))
    assert (RunDir(run).table("status")["status"] == "ok").sum() == n


def test_sigkill_between_a_chunks_tables_and_its_status(tmp_path: Path) -> None:
    """A real SIGKILL after a chunk's table file and before its status file: that chunk is
    not done (its file is an orphan, ignored, then swept), the first chunk is, and the
    resumed run equals a clean one."""
    run, log, n = tmp_path / "run", tmp_path / "log", 6
    proc = subprocess.run([sys.executable, "-c", _worker_script(run, log, n, 0.0, "local",
                                                                batch=2, die_at_chunk=2)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    rd = RunDir(run)
    tables = sorted((run / "work" / "square" / "shard-00000").glob("*.squares.parquet"))
    assert len(tables) == 2 and committed(run, "square") == 2  # one orphan, one chunk
    orphan = next(p for p in tables
                  if not p.with_name(p.name.split(".")[0] + ".status.parquet").exists())
    assert len(pd.read_parquet(orphan)) == 4  # its two videos' rows were written ...
    ok = set(record_table(rd, "square").column("video_id").to_pylist())
    assert len(ok) == 2 and not ok & set(pd.read_parquet(orphan)["video_id"])  # ... not done
    assert not rd.has_table("squares")  # the shard is not finished: no table file yet
    out = subprocess.run([sys.executable, "-c", _worker_script(run, log, n, 0.0, "local",
                                                               batch=2)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split()[1:] == ["4", "0", "2"], out
    assert not orphan.exists()  # swept on resume (its writer is dead)
    clean = RunDir(tmp_path / "clean")
    run_stage(clean, [VideoItem(f"v_{i}", None) for i in range(n)],
              SquareStage(tmp_path / "clog"), progress=False)
    pd.testing.assert_frame_equal(RunDir(run).table("squares"), clean.table("squares"))


@pytest.mark.slow
def test_runner_choices_and_resources() -> None:
    assert parse_stage_resources("encoder=0.25, asr=0.5") == {"encoder": 0.25, "asr": 0.5}
    with pytest.raises(HowtocapError, match="--ray-gpus-per-stage takes KIND=GPUS"):
        parse_stage_resources("encoder")
    with pytest.raises(HowtocapError, match="unknown runner 'spark'"):
        make_runner("spark")
    assert isinstance(make_runner("ray", ray_gpus="asr=1"), RayRunner)


@pytest.mark.slow
def test_run_on_ray_equals_local_with_the_real_stages(tmp_path: Path, base_video: Path,
                                                      ray_cluster: str) -> None:
    """`howtocap run --runner ray --ray-address`: subtitles and alignment on a Ray actor of a
    running instance (the embedded encoder loaded in the actor), the LLM stage an HTTP client
    in the driver; same tables as local. One actor: each extra one only imports and loads the
    encoder again; spreading work over several actors and setting up once per actor is
    test_ray_equals_local_and_sets_up_once_per_actor's."""
    from tests.support.chat_server import chat_server
    from tests.support.cli import GOOD, add_video, run_cli

    vids = tmp_path / "videos"
    for i in range(3):
        add_video(vids, f"r{i}", base_video, GOOD.replace("eggs", f"egg{i}"))
    add_video(vids, "broken", base_video, "WEBVTT\n\nnot a cue at all\n")
    with chat_server() as srv:
        common = ["run", str(vids), "--llm-url", srv.url, "--parse-workers", "0",
                  "--quantile", "0.5", "--quiet"]
        local = run_cli(*common, "--out", str(tmp_path / "local"), timeout=600)
        ray = run_cli(*common, "--out", str(tmp_path / "ray"), "--runner", "ray",
                      "--ray-address", ray_cluster, "--workers", "1", timeout=600)
    assert local.returncode == ray.returncode == 1, ray.stderr  # "broken" fails, the rest ok
    assert "Traceback" not in ray.stderr and "broken" in ray.stderr
    for table in ("subtitles", "captions", "aligned"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "local" / table),
                                      pd.read_parquet(tmp_path / "ray" / table))
    cols = ["video_id", "stage", "status", "message"]
    a = pd.read_parquet(tmp_path / "local" / "status")[cols]
    b = pd.read_parquet(tmp_path / "ray" / "status")[cols]
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    assert len(pd.read_parquet(tmp_path / "ray" / "aligned")) > 0


class _Gate(BaseStage):
    """Each video waits for the test to open the gate; ``boom`` raises a BaseException
    (not a per-video failure: ``run_one`` lets it through)."""

    name = "gate"
    writes: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.running = 0
        self.most = 0
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def process(self, video: VideoInput) -> StageOutput:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.get_ident())
        try:
            self.gate.wait(5)
            if video.video_id == "boom":
                raise KeyboardInterrupt
            return StageOutput({})
        finally:
            with self.lock:
                self.running -= 1


def test_local_runner_keeps_2n_in_flight_and_emits_every_result() -> None:
    stage, taken, got = _Gate(), [], []

    def videos() -> Iterator[VideoInput]:
        for i in range(40):
            taken.append(i)
            yield VideoInput(VideoItem(f"v_{i}", None))

    def emit(res: Any) -> None:
        got.append(res.video_id)

    t = threading.Thread(target=LocalRunner(4).map, args=(stage, videos(), emit))
    t.start()
    time.sleep(0.3)
    assert len(taken) == 8 and stage.most == 4 and not got  # 2n taken, n running
    stage.gate.set()
    t.join(10)
    assert sorted(got) == sorted(f"v_{i}" for i in range(40)) and len(got) == 40
    assert len(stage.threads) == 4
    assert not [th for th in threading.enumerate() if th.name.startswith("howtocap-video")]


def test_local_runner_raises_what_escaped_a_worker_and_stops_its_threads() -> None:
    stage = _Gate()
    stage.gate.set()
    items = [VideoInput(VideoItem(v, None)) for v in ("a", "b", "boom", *"cdefghij")]
    with pytest.raises(KeyboardInterrupt):
        LocalRunner(3).map(stage, iter(items), lambda res: None)
    assert not [th for th in threading.enumerate() if th.name.startswith("howtocap-video")]
    # an emit that raises (a full disk) stops the run the same way
    with pytest.raises(OSError, match="disk full"):
        LocalRunner(3).map(stage, iter(items[:2] + items[3:]),
                           lambda res: (_ for _ in ()).throw(OSError("disk full")))
    assert not [th for th in threading.enumerate() if th.name.startswith("howtocap-video")]


def test_the_collector_is_tuned_while_videos_run_and_restored_after() -> None:
    """In the serial runner (and the event loop's), what lived before the run is frozen out
    of full collections and young objects are collected every 10,000 allocations; after
    the run, even one that raised, the collector is as it was, and what the caller had
    frozen stays frozen."""
    import gc

    seen: list[tuple[tuple[int, ...], int]] = []

    class Probe(BaseStage):
        name = "probe"

        def process(self, video: VideoInput) -> StageOutput:
            seen.append((gc.get_threshold(), gc.get_freeze_count()))
            if video.video_id == "boom":
                raise KeyboardInterrupt
            return StageOutput({})

    before = gc.get_threshold()
    gc.unfreeze()  # the session froze what its collection imported (tests/conftest.py)
    try:
        items = [VideoInput(VideoItem(v, None)) for v in ("a", "b")]
        LocalRunner(1).map(Probe(), iter(items), lambda res: None)
        assert [t for t, _ in seen] == [(10_000, 10, 10)] * 2 and all(f > 0 for _, f in seen)
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        with pytest.raises(KeyboardInterrupt):
            LocalRunner(1).map(Probe(), iter([VideoInput(VideoItem("boom", None))]),
                               lambda res: None)
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        # what the caller froze (a pre-forking parent's modules) is not thawed by the run
        gc.freeze()
        outer = gc.get_freeze_count()
        LocalRunner(1).map(Probe(), iter(items), lambda res: None)
        assert gc.get_threshold() == before and gc.get_freeze_count() >= outer > 0
    finally:
        gc.freeze()
