"""`howtocap status`: counts, failures by cause, throughput; `--retry-failed` and attempts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from tests.chat_server import chat_server
from tests.test_caption_pipeline import GOOD, add_video, run_cli, vtt

from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.engine.rundir import RunDir
from howtocap.llm import LLMOptions
from howtocap.pipeline.run import run_status


def batch(tmp_path: Path, base: Path) -> Path:
    folder = tmp_path / "videos"
    add_video(folder, "good_a", base, GOOD)
    add_video(folder, "good_b", base, GOOD.replace("eggs", "onions"))
    add_video(folder, "broken_subs", base, "WEBVTT\n\n00:0x:01.000 --> banana\nhello\n")
    add_video(folder, "noparse", base, vtt([(0.0, 2.0, "NOPARSE please")]))
    return folder


def test_status_counts_causes_and_throughput(tmp_path: Path, base_video: Path) -> None:
    vids, out = batch(tmp_path, base_video), tmp_path / "run"
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2))
        t0 = time.monotonic()
        caption_run([vids], out, cfg, progress=False)
        elapsed = time.monotonic() - t0  # the stages' wall times lie within this
    info = run_status(out)
    assert info["videos"] == 4
    stages = {s["stage"]: s for s in info["stages"]}
    assert list(stages) == ["subtitles", "caption"]
    sub, cap = stages["subtitles"], stages["caption"]
    assert (sub["done"], sub["failed"], sub["pending"]) == (3, 1, 0)
    assert sub["failures"] == {"bad input": {"count": 1, "examples": ["broken_subs"]}}
    assert (cap["done"], cap["failed"], cap["pending"]) == (2, 1, 0)
    assert cap["failures"] == {"model output": {"count": 1, "examples": ["noparse"]}}
    assert cap["failed_attempts"] == {"1": 1}
    # throughput from the recorded wall time and the stages' counts
    t, wall = cap["throughput"], cap["wall_seconds"]
    assert 0 < wall <= elapsed + 1e-3 and 0 < sub["wall_seconds"] <= elapsed + 1e-3
    def tol(w: float) -> float:  # wall_seconds is shown to the ms: a fast stage's rate moves
        return 0.01 + 0.0005 / w

    assert t["videos_per_s"] == pytest.approx(3 / wall, rel=tol(wall))  # 2 done + 1 failed
    n_captions = len(pd.read_parquet(out / "captions"))
    assert n_captions > 0 and t["captions_per_s"] == pytest.approx(n_captions / wall, rel=tol(wall))
    # audio: the subtitles of good_a, good_b (end at 3.8 s) and noparse (2.0 s); not broken_subs
    assert sub["throughput"]["audio_hours_per_hour"] == pytest.approx(
        (3.8 + 3.8 + 2.0) / sub["wall_seconds"], rel=tol(sub["wall_seconds"]))
    table = pd.read_parquet(out / "status").set_index(["stage", "video_id"])
    assert table.loc[("caption", "noparse"), "cause"] == "model output"
    assert table.loc[("subtitles", "broken_subs"), "cause"] == "bad input"
    assert table.loc[("caption", "good_a"), "config_id"] != ""

    res = run_cli("status", str(out), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["stages"] == info["stages"]
    res = run_cli("status", str(out))
    assert res.returncode == 0 and "model output" in res.stdout and "noparse" in res.stdout
    res = run_cli("status", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "not a run directory" in res.stderr


def test_retry_failed_and_max_attempts(tmp_path: Path, base_video: Path) -> None:
    vids, out = batch(tmp_path, base_video), tmp_path / "run"
    rd = RunDir(out, create=False)
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2))
        caption_run([vids], out, cfg, progress=False)
        n = srv.requests
        # a plain re-run leaves failed videos failed: no LLM request, nothing redone
        subs, caps = caption_run([vids], out, cfg, progress=False)
        assert srv.requests == n
        assert (subs.failed_before, caps.failed_before) == (1, 1)
        assert caps.done == 0 and not caps.failed
        assert rd.status("caption", "noparse").attempts == 1
        # --retry-failed tries them again and counts the attempts
        for attempt in (2, 3):
            subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                     max_attempts=3)
            assert [v for v, _ in caps.failed] == ["noparse"]
            assert rd.status("caption", "noparse").attempts == attempt
            assert rd.status("subtitles", "broken_subs").attempts == attempt
            assert rd.status("caption", "good_a").attempts == 1  # done once, never redone
        # a permanently broken input is not retried forever
        n = srv.requests
        subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                 max_attempts=3)
        assert srv.requests == n and caps.gave_up == 1 and subs.gave_up == 1
        assert rd.status("caption", "noparse").attempts == 3
        # a fixed input with a higher cap succeeds and stops counting as failed
        add_video(vids, "broken_subs", base_video, GOOD.replace("eggs", "pears"))
        subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                 max_attempts=5)
        assert subs.done == 1 and rd.status("subtitles", "broken_subs").status == "ok"
        assert "broken_subs" in set(pd.read_parquet(out / "captions")["video_id"])
    stages = {s["stage"]: s for s in run_status(out)["stages"]}
    assert stages["subtitles"]["failed"] == 0 and stages["caption"]["failed"] == 1
    assert stages["caption"]["failed_attempts"] == {"4": 1}


def _colliding_ids(prefix: str) -> tuple[str, str]:
    """Two distinct ids of equal ``short_hashes`` (32 bits: ~10 pairs among 300,000 ids; the
    hash is this process's, as status's is)."""
    import numpy as np

    from howtocap.engine.records import short_hashes

    ids = [f"{prefix}{i}" for i in range(300_000)]
    h = short_hashes(ids)
    order = np.argsort(h, kind="stable")
    same = np.flatnonzero(h[order][1:] == h[order][:-1])
    assert len(same), "no 32-bit collision among 300,000 ids"
    i, j = order[same[0]], order[same[0] + 1]
    return ids[i], ids[j]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_status_in_hash_buckets_on_disk_equals_the_fold_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """A stage with more records than ``STATUS_BUCKET_ROWS`` is routed to hash buckets on
    disk and each folded alone: with the threshold tiny (~120 buckets) the answer equals
    the fold in memory and a per-video replay of every record committed (an older run's
    per-video records first, retries, failures by cause, warnings, forgotten videos, two ids
    of equal hash, a corrupt manifest), and its scratch files are gone, none in the run."""
    import math
    import random
    import tempfile
    from typing import Any

    from tests.test_batches import Lines

    import howtocap.engine.status as status_mod
    from howtocap.atomic import CorruptPartWarning
    from howtocap.engine.graph import StageGraph
    from howtocap.engine.records import FORGOTTEN, StatusRecord, short_hashes
    from howtocap.engine.stage import CAUSES
    from howtocap.engine.status import status_of
    from howtocap.io.inputs import VideoItem

    rng = random.Random(seed)
    twin_a, twin_b = _colliding_ids(f"s{seed}_")
    assert twin_a != twin_b and short_hashes([twin_a])[0] == short_hashes([twin_b])[0]
    ids = [f"v{rng.getrandbits(32):08x}_{i}" for i in range(300)] + [twin_a, twin_b]
    rd = RunDir(tmp_path / "run")
    rd.record_videos(VideoItem(v, None) for v in ids)
    causes = [*CAUSES, "", "quota"]  # "" counts as internal; a cause of a newer version
    legacy = [StatusRecord(v, "lines", rng.choice(["ok", "error"]), cause=rng.choice(CAUSES),
                           seconds=rng.random())
              for v in rng.sample(ids[:300], 50)]  # an older run's per-video records
    for rec in legacy:
        rd.write_status(rec)
    attempts = {r.video_id: 1 for r in legacy}
    commits: list[list[StatusRecord]] = []  # in manifest order

    def commit(recs: list[StatusRecord]) -> None:
        rd.commit_batch("lines", ["subtitles"], recs, {})
        commits.append(recs)

    def record(vid: str, ok: bool) -> StatusRecord:
        attempts[vid] = attempts.get(vid, 0) + 1
        return StatusRecord(vid, "lines", "ok" if ok else "error",
                            cause="" if ok else rng.choice(causes), attempts=attempts[vid],
                            seconds=rng.random() * 3, warnings=int(rng.random() < 0.2))

    for _ in range(14):  # rounds of batches over random subsets: retries, new failures
        commit([record(v, rng.random() < 0.7) for v in rng.sample(ids[:300], rng.randint(10, 60))])
        if rng.random() < 0.3:  # a forget between rounds, redone by later ones
            gone = sorted(rng.sample(sorted(attempts), 8))
            rd.forget("lines", gone)
            commits.append([StatusRecord(v, "lines", FORGOTTEN) for v in gone])
    commit([record(twin_a, True), record(twin_b, False)])  # one hash, two videos
    gone = sorted(rng.sample(sorted(set(attempts) - {twin_a, twin_b}), 12))
    rd.forget("lines", gone)
    commits.append([StatusRecord(v, "lines", FORGOTTEN) for v in gone])

    def expected(skip: int | None = None) -> dict[str, Any]:
        newest = {r.video_id: r for r in legacy}
        for i, recs in enumerate(commits):
            if i != skip:
                newest.update({r.video_id: r for r in recs})
        live = [r for r in newest.values() if r.status != FORGOTTEN]
        bad = sorted((r for r in live if r.status != "ok"), key=lambda r: r.video_id)
        by_cause: dict[str, list[str]] = {}
        tries: dict[str, int] = {}
        for r in bad:
            by_cause.setdefault(r.cause or "internal", []).append(r.video_id)
            tries[str(r.attempts)] = tries.get(str(r.attempts), 0) + 1
        order = [*CAUSES, *sorted(set(by_cause) - set(CAUSES))]
        return {"done": sum(r.status == "ok" for r in live), "failed": len(bad),
                "pending": len(ids) - len(live),
                "warned": sum(r.status == "ok" and r.warnings > 0 for r in live),
                "failures": {c: {"count": len(by_cause[c]), "examples": by_cause[c][:3]}
                             for c in order if c in by_cause},
                "failed_attempts": dict(sorted(tries.items(), key=lambda kv: int(kv[0]))),
                "video_seconds": round(math.fsum(r.seconds for r in live), 3)}

    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def spy(*args: Any, **kwargs: Any) -> str:
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", spy)

    def answer(bucket_rows: int) -> dict[str, Any]:
        monkeypatch.setattr(status_mod, "STATUS_BUCKET_ROWS", bucket_rows)
        (stage,) = status_of(rd.root, StageGraph([Lines]))["stages"]
        return {k: stage[k] for k in ("done", "failed", "pending", "warned", "failures",
                                      "failed_attempts", "video_seconds")}

    files = sorted(p for p in rd.root.rglob("*"))
    in_memory = answer(1_000_000)
    assert not made  # one bucket: no scratch files
    assert in_memory == expected()
    for bucket_rows in (5, 40):  # ~120 and ~15 buckets
        made.clear()
        assert answer(bucket_rows) == in_memory
        assert len(made) == 1 and not list(scratch_root.iterdir())  # its files are gone
    assert sorted(p for p in rd.root.rglob("*")) == files  # nothing written into the run
    # a corrupt manifest (the 4th): dropped with a warning, its videos back to older records
    manifests = sorted(rd.batch_dir("lines").glob("*.parquet"))
    manifests[3].write_bytes(manifests[3].read_bytes()[:-40])
    with pytest.warns(CorruptPartWarning):
        got = answer(5)
    assert not manifests[3].exists() and not list(scratch_root.iterdir())
    assert got == expected(skip=3) == answer(1_000_000)


def test_a_full_temp_disk_under_status_buckets_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The buckets go to the system temp dir, not the run: a full disk there is the one-line
    ``DiskFull`` naming the scratch folder (a real full tmpfs as root, else a simulated
    ENOSPC), and the folder is gone."""
    import errno
    import os
    import tempfile

    from tests.test_batches import Lines
    from tests.test_storage import small_disk

    import howtocap.engine.status as status_mod
    from howtocap.atomic import DiskFull
    from howtocap.engine.graph import StageGraph
    from howtocap.engine.records import StatusRecord

    rd = RunDir(tmp_path / "run")
    ids = [f"v{i:03d}" for i in range(120)]
    for lo in range(0, len(ids), 20):
        rd.commit_batch("lines", ["subtitles"],
                        [StatusRecord(v, "lines", "ok") for v in ids[lo:lo + 20]], {})
    monkeypatch.setattr(status_mod, "STATUS_BUCKET_ROWS", 16)
    with small_disk(tmp_path, 256) as disk:
        if disk is not None:
            (disk / "filler").write_bytes(b"\0" * (os.statvfs(disk).f_bavail
                                                   * os.statvfs(disk).f_frsize))
            scratch = disk
        else:
            def full(*_: object, **__: object) -> None:
                raise OSError(errno.ENOSPC, "No space left on device")

            scratch = tmp_path / "tmp"
            scratch.mkdir()
            monkeypatch.setattr(status_mod, "_route", full)
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        with pytest.raises(DiskFull) as exc:
            status_mod.status_of(rd.root, StageGraph([Lines]))
        msg = str(exc.value)
        assert "no space left on device" in msg and "\n" not in msg, msg
        assert "howtocap-status-" in msg
        assert not list(scratch.glob("howtocap-status-*"))


def test_status_sweeps_the_bucket_folders_of_killed_status_processes(tmp_path: Path) -> None:
    """A ``status`` killed by SIGKILL skips the ``finally`` that removes its buckets: the
    next one removes the folders of this host's dead ``status`` processes, and leaves a
    live process's and another host's alone."""
    import os
    import subprocess
    import sys

    import howtocap.engine.status as status_mod
    from howtocap.atomic import HOST

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    prefix = status_mod.SCRATCH_PREFIX
    gone = tmp_path / f"{prefix}a1b2.{HOST}~{dead.pid}"
    alive = tmp_path / f"{prefix}c3d4.{HOST}~{os.getppid()}"
    other = tmp_path / f"{prefix}e5f6.elsewhere~{dead.pid}"
    for d in (gone, alive, other):
        d.mkdir()
        (d / "bucket-00000.arrow").write_bytes(b"rows")
    status_mod._sweep_dead(tmp_path)  # noqa: SLF001
    assert not gone.exists() and alive.exists() and other.exists()


_LIMITED_STATUS = """
import json, resource, sys
import howtocap.engine.status as status_mod
from howtocap.engine.graph import StageGraph
from tests.test_batches import Lines
soft, hard = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
status_mod.STATUS_BUCKET_ROWS = 1  # a bucket a record: more buckets than files allowed
route, asked = status_mod._route, []
def spy(sources, buckets, scratch):
    asked.append(buckets)
    return route(sources, buckets, scratch)
status_mod._route = spy
(stage,) = status_mod.status_of(sys.argv[1], StageGraph([Lines]))["stages"]
print(json.dumps({"answer": {k: stage[k] for k in ("done", "failed", "pending", "failures")},
                  "buckets": asked, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


@pytest.mark.parametrize("raise_soft", [False, True])
def test_status_buckets_stay_within_the_open_file_limit(tmp_path: Path,
                                                        raise_soft: bool) -> None:
    """Every bucket is an open file while records are routed: with more buckets wanted than
    the open-file limit leaves, ``status`` raises its soft limit up to the hard one, and
    past that routes into fewer, larger buckets; both answers equal the fold in memory
    (one bucket a record with the limit at 128 files: "Too many open files" before)."""
    import resource
    import subprocess
    import sys

    from tests.test_batches import Lines

    from howtocap.engine.graph import StageGraph
    from howtocap.engine.records import StatusRecord
    from howtocap.engine.status import FILES_SPARE, status_of
    from howtocap.io.inputs import VideoItem

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if raise_soft and hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard open-file limit is {hard}: no room to raise the soft one")
    ids = [f"v_{i:03d}" for i in range(400)]
    rd = RunDir(tmp_path / "run")
    rd.record_videos(VideoItem(v, None) for v in ids)
    for lo in range(0, 400, 50):
        rd.commit_batch("lines", ["subtitles"], [
            StatusRecord(v, "lines", "ok" if i % 7 else "error", cause="" if i % 7 else "decode")
            for i, v in enumerate(ids[lo:lo + 50], start=lo)], {})
    (stage,) = status_of(rd.root, StageGraph([Lines]))["stages"]  # one bucket, in memory
    want = {k: stage[k] for k in ("done", "failed", "pending", "failures")}
    limits = (128, hard if raise_soft else 128)
    out = subprocess.run([sys.executable, "-c", _LIMITED_STATUS, str(rd.root),
                          *map(str, limits)], capture_output=True, text=True, check=False,
                         cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["answer"] == want
    if raise_soft:
        assert got["buckets"] == [400] and got["soft"] >= 400 + FILES_SPARE
    else:
        assert got["buckets"] == [128 - FILES_SPARE] and got["soft"] == 128
