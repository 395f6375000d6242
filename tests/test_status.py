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
    n_captions = len(pd.read_parquet(out / "captions.parquet"))
    assert n_captions > 0 and t["captions_per_s"] == pytest.approx(n_captions / wall, rel=tol(wall))
    # audio: the subtitles of good_a, good_b (end at 3.8 s) and noparse (2.0 s); not broken_subs
    assert sub["throughput"]["audio_hours_per_hour"] == pytest.approx(
        (3.8 + 3.8 + 2.0) / sub["wall_seconds"], rel=tol(sub["wall_seconds"]))
    table = pd.read_parquet(out / "status.parquet").set_index(["stage", "video_id"])
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
        assert "broken_subs" in set(pd.read_parquet(out / "captions.parquet")["video_id"])
    stages = {s["stage"]: s for s in run_status(out)["stages"]}
    assert stages["subtitles"]["failed"] == 0 and stages["caption"]["failed"] == 1
    assert stages["caption"]["failed_attempts"] == {"4": 1}
