"""The LLM client on asyncio, and the runner that keeps videos in flight as coroutines.

Requests of every thread share one event loop (``engine.runners.event_loop``), so a client's
slots and kept connections are shared; a caption run over coroutines equals one run video by
video, stops cleanly when its server dies, and finishes on a pool's live servers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tests.support.llm as faults
import tests.support.llm as pools
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.stage import CaptionStage
from howtocap.engine import runners
from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.errors import ServiceUnavailable
from howtocap.llm import LLMOptions
from howtocap.llm.base import GenerationConfig
from howtocap.llm.openai import OpenAIChatLLM
from tests.support.chat_server import chat_server, echo_reply
from tests.support.fault_server import fault_server

GEN = GenerationConfig()


def client(url: str, **kw: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM(url, model="echo", api_key_env=None, backoff=0.01, **kw)


def test_requests_share_kept_connections_up_to_the_slots() -> None:
    batch = [[{"role": "user", "content": f"{i}s: stir pot {i}"}] for i in range(40)]
    with chat_server(keep_alive=True, delay=0.05) as srv:
        llm = client(srv.url, concurrency=4)
        for _ in range(3):
            assert llm.chat_many(batch, GEN) == [echo_reply(m[0]["content"]) for m in batch]
        assert srv.requests == 120 and srv.connections == 4  # 4 slots, kept between rounds
        assert llm.stats["attempts"] == 120
        llm.close()


# -- the runner: videos as coroutines ----------------------------------------------------------

@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the runs that kept videos in flight as coroutines."""
    taken: list[int] = []
    real = runners._coroutines

    def counted(stage: Any, n: int, videos: Any, emit: Any) -> None:
        taken.append(1)
        real(stage, n, videos, emit)

    monkeypatch.setattr(runners, "_coroutines", counted)
    return taken


def _stage(url: str | list[str], llm: Any, fillers: bool = False) -> CaptionStage:
    return CaptionStage(LLMOptions(url=url, concurrency=2),
                        CaptionConfig(reject_fillers=fillers), model=llm)


def test_a_run_over_coroutines_equals_one_video_by_video(tmp_path: Path,
                                                          events: list[int]) -> None:
    cols = ["video_id", "start", "end", "text", "block", "model", "rejected"]
    tables = []
    for k, workers in enumerate((None, 1)):
        rd = RunDir(tmp_path / f"run{k}")
        items = faults.subtitle_parts(rd, 30)
        with fault_server(faults=["ok", "500", "notimestamp", "reset"]) as srv:
            llm = faults.client(srv.url, concurrency=3, timeout=5.0)
            summary = run_stage(rd, items, _stage(srv.url, llm), progress=False,
                                runner=runners.LocalRunner(workers))
        assert summary.done == 30 and not summary.failed
        tables.append(rd.table("captions")[cols].sort_values(cols[:3], ignore_index=True))
    assert events == [1]  # the second: one video at a time, on the calling thread
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert len(tables[0]) == 60


def test_the_filler_test_runs_off_the_loop(tmp_path: Path, events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 3)
    with fault_server() as srv:
        stage = _stage(srv.url, faults.client(srv.url, timeout=5.0), fillers=True)
        assert run_stage(rd, items, stage, progress=False).done == 3
    assert events == [1]
    assert "rejected" in rd.table("captions").columns


def test_a_dying_server_stops_the_run_and_a_rerun_resumes(tmp_path: Path,
                                                               events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 8)
    with fault_server(die_after=3) as srv, \
            pytest.raises(ServiceUnavailable, match="nothing lost; re-run to resume"):
        port = srv.httpd.server_address[1]
        run_stage(rd, items, _stage(srv.url, faults.client(srv.url, concurrency=2,
                                                            timeout=5.0)), progress=False)
    status = faults.statuses(rd)
    cap = status[status["stage"] == "caption"]
    assert set(cap["status"]) == {"ok"} and 1 <= len(cap) <= 3  # nothing marked failed
    assert not list((tmp_path / "run" / "claims").rglob("*.lock"))
    with fault_server(port=port) as srv:
        summary = run_stage(rd, items, _stage(srv.url, faults.client(srv.url, timeout=5.0)),
                            progress=False)
        assert summary.skipped == len(cap) and summary.done == 8 - len(cap)
    assert len(events) == 2


def test_a_pool_run_finishes_on_the_live_server(tmp_path: Path,
                                                              events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 12)
    with fault_server(die_after=2) as dying, fault_server() as live:
        urls = [dying.url, live.url]
        summary = run_stage(rd, items, _stage(urls, pools.pool(urls)), progress=False)
    assert summary.done == 12 and not summary.failed
    assert dying.answered == 2 and live.answered >= 10
    rd2 = RunDir(tmp_path / "run2")
    items2 = faults.subtitle_parts(rd2, 6)
    dead = [f"http://127.0.0.1:{faults.closed_port()}/v1" for _ in range(2)]
    with pytest.raises(ServiceUnavailable, match=r"^all 2 LLM servers are down"):
        run_stage(rd2, items2, _stage(dead, pools.pool(dead)), progress=False)
    assert not (faults.statuses(rd2)["status"] == "error").any()
    assert len(events) == 2


def test_what_escapes_emit_stops_the_run_and_cancels_the_videos_in_flight(
        tmp_path: Path, events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 10)
    with chat_server(keep_alive=True, delay=0.05) as srv:
        stage = _stage(srv.url, client(srv.url, concurrency=2))
        stage.setup()
        from howtocap.engine.core import _shard_inputs
        from howtocap.engine.stage import VideoInput

        inputs = _shard_inputs(rd, stage, 0)  # the items are shard 0's
        videos = (VideoInput(it, inputs(it.video_id)) for it in items)
        with pytest.raises(OSError, match="disk full"):
            runners.LocalRunner(2).map(stage, videos,
                                       lambda res: (_ for _ in ()).throw(OSError("disk full")))
        sent = srv.requests
        time.sleep(0.3)  # the videos in flight were cancelled: nothing more is asked
        assert sent < 10 and srv.requests <= sent + 4  # at most the 4 requests then in flight
    assert events == [1]
