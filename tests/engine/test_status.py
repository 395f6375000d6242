"""`howtocap status`: counts, failures by cause, throughput; `--retry-failed` and attempts;
status read a shard at a time (finished shards and the chunks of unfinished ones) equals a
replay of every record committed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.llm import LLMOptions
from howtocap.pipeline.run import run_status
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, add_video, run_cli, vtt
from tests.support.stages import status_records


def record(rd: RunDir, stage: str, vid: str) -> StatusRecord:
    """A video's newest record of ``stage`` (finished shards and chunks alike)."""
    (rec,) = [r for r in status_records(rd, stage) if r.video_id == vid]
    return rec


def batch(tmp_path: Path, base: Path) -> Path:
    folder = tmp_path / "videos"
    add_video(folder, "good_a", base, GOOD)
    add_video(folder, "good_b", base, GOOD.replace("eggs", "onions"))
    add_video(folder, "broken_subs", base, "WEBVTT\n\n00:0x:01.000 --> banana\nhello\n")
    add_video(folder, "noparse", base, vtt([(0.0, 2.0, "NOPARSE please")]))
    return folder


@pytest.mark.slow
def test_status_counts_causes_and_throughput(tmp_path: Path, base_video: Path) -> None:
    vids, out = batch(tmp_path, base_video), tmp_path / "run"
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2), parse_workers=0)
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


@pytest.mark.slow
def test_retry_failed_and_max_attempts(tmp_path: Path, base_video: Path) -> None:
    vids, out = batch(tmp_path, base_video), tmp_path / "run"
    rd = RunDir(out, create=False)
    with chat_server() as srv:
        cfg = CaptionRunConfig(llm=LLMOptions(url=srv.url, concurrency=2), parse_workers=0)
        caption_run([vids], out, cfg, progress=False)
        n = srv.requests
        # a plain re-run leaves failed videos failed: no LLM request, nothing redone
        subs, caps = caption_run([vids], out, cfg, progress=False)
        assert srv.requests == n
        assert (subs.failed_before, caps.failed_before) == (1, 1)
        assert caps.done == 0 and not caps.failed
        assert record(rd, "caption", "noparse").attempts == 1
        # --retry-failed tries them again and counts the attempts
        for attempt in (2, 3):
            subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                     max_attempts=3)
            assert [v for v, _ in caps.failed] == ["noparse"]
            assert record(rd, "caption", "noparse").attempts == attempt
            assert record(rd, "subtitles", "broken_subs").attempts == attempt
            assert record(rd, "caption", "good_a").attempts == 1  # done once, never redone
        # a permanently broken input is not retried forever
        n = srv.requests
        subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                 max_attempts=3)
        assert srv.requests == n and caps.gave_up == 1 and subs.gave_up == 1
        assert record(rd, "caption", "noparse").attempts == 3
        # a fixed input with a higher cap succeeds and stops counting as failed
        add_video(vids, "broken_subs", base_video, GOOD.replace("eggs", "pears"))
        subs, caps = caption_run([vids], out, cfg, progress=False, retry_failed=True,
                                 max_attempts=5)
        assert subs.done == 1 and record(rd, "subtitles", "broken_subs").status == "ok"
        assert "broken_subs" in set(pd.read_parquet(out / "captions")["video_id"])
    stages = {s["stage"]: s for s in run_status(out)["stages"]}
    assert stages["subtitles"]["failed"] == 0 and stages["caption"]["failed"] == 1
    assert stages["caption"]["failed_attempts"] == {"4": 1}


def test_status_shard_by_shard_equals_a_replay_of_every_record(tmp_path: Path) -> None:
    """Chunks committed to random shards (retries, failures by cause, warnings), some shards
    finished, some not, forgets between rounds: ``status`` read a shard at a time equals the
    newest record of each video replayed in commit order, writes nothing into the run, and
    holds one shard's records at a time; a corrupt status file is dropped with a warning
    naming it, and its shard's videos are pending again."""
    import math
    import random
    from typing import Any

    from howtocap.atomic import CorruptPartWarning
    from howtocap.engine.graph import StageGraph
    from howtocap.engine.stage import CAUSES
    from howtocap.engine.status import status_of
    from howtocap.io.inputs import VideoItem
    from tests.support.stages import Lines

    rng = random.Random(5)
    ids = [f"v{rng.getrandbits(32):08x}_{i}" for i in range(300)]
    rd = RunDir(tmp_path / "run", shard_size=25)
    rd.record_videos(VideoItem(v, None) for v in ids)
    shard_of = dict(zip(ids, rd.shard_of(ids).tolist(), strict=True))
    causes = [*CAUSES, "", "quota"]  # "" counts as internal; a cause of a newer version
    newest: dict[str, StatusRecord] = {}
    attempts: dict[str, int] = {}

    def rec(vid: str) -> StatusRecord:
        ok = rng.random() < 0.7
        attempts[vid] = attempts.get(vid, 0) + 1
        return StatusRecord(vid, "lines", "ok" if ok else "error",
                            cause="" if ok else rng.choice(causes), attempts=attempts[vid],
                            seconds=rng.random() * 3, warnings=int(rng.random() < 0.2))

    for _ in range(40):  # chunks of random videos of one shard at a time
        k = rng.randrange(12)
        mine = [v for v in ids if shard_of[v] == k]
        w = rd.writer("lines", k, ("subtitles",))
        recs = [rec(v) for v in rng.sample(mine, rng.randint(1, 10))]
        w.commit(recs, {})
        newest.update({r.video_id: r for r in recs})
        if rng.random() < 0.5:
            w.finish()
        if rng.random() < 0.2:
            gone = rng.sample(sorted(newest), 5)
            rd.forget("lines", gone)
            for v in gone:
                del newest[v]

    def expected(live: dict[str, StatusRecord]) -> dict[str, Any]:
        bad = sorted((r for r in live.values() if r.status != "ok"), key=lambda r: r.video_id)
        by_cause: dict[str, list[str]] = {}
        tries: dict[str, int] = {}
        for r in bad:
            by_cause.setdefault(r.cause or "internal", []).append(r.video_id)
            tries[str(r.attempts)] = tries.get(str(r.attempts), 0) + 1
        order = [*CAUSES, *sorted(set(by_cause) - set(CAUSES))]
        return {"done": sum(r.status == "ok" for r in live.values()), "failed": len(bad),
                "pending": len(ids) - len(live),
                "warned": sum(r.status == "ok" and r.warnings > 0 for r in live.values()),
                "failures": {c: {"count": len(by_cause[c]), "examples": by_cause[c][:3]}
                             for c in order if c in by_cause},
                "failed_attempts": dict(sorted(tries.items(), key=lambda kv: int(kv[0]))),
                "video_seconds": round(math.fsum(r.seconds for r in live.values()), 3)}

    def answer() -> dict[str, Any]:
        (stage,) = status_of(rd.root, StageGraph([Lines]))["stages"]
        return {k: stage[k] for k in ("done", "failed", "pending", "warned", "failures",
                                      "failed_attempts", "video_seconds")}

    finished = sorted(rd.root.glob("status/lines/*.parquet"))
    unfinished = sorted(rd.root.glob("work/lines/shard-*"))
    assert finished and unfinished  # both kinds are counted
    files = sorted((p, p.stat().st_mtime_ns) for p in rd.root.rglob("*"))
    assert answer() == expected(newest)
    assert sorted((p, p.stat().st_mtime_ns) for p in rd.root.rglob("*")) == files
    assert max(t.num_rows for t in rd.records("lines", ["status"])) <= 25  # a shard a time
    assert {r.video_id: (r.status, r.attempts, r.cause) for r in status_records(rd, "lines")} \
        == {v: (r.status, r.attempts, r.cause) for v, r in newest.items()}
    # a corrupt status file of a finished shard with no chunks: its videos are pending again
    k = next(int(p.stem[6:]) for p in finished
             if not (rd.root / "work" / "lines" / p.stem).exists())
    path = rd.shard_path("status/lines", k)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.warns(CorruptPartWarning, match=path.name):
        got = answer()
    assert not path.exists()
    assert got == expected({v: r for v, r in newest.items() if shard_of[v] != k})
