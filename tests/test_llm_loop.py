"""The one-thread event loop (``llm/loop.py``) and the runner that drives videos by their replies.

The client's retries, breakers and the pool's routing are the same code on both paths, so the
fault and pool tests run again here with every ``chat``/``chat_many`` sent through one
``ChatLoop``; then what only the loop does (its own connections, slots, framing, deadlines),
and a caption run over it equal to one over threads (``--keep-fillers``: no parse per video).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import tests.test_llm_faults as faults
import tests.test_llm_pool as pools
from tests.chat_server import chat_server, echo_reply
from tests.fault_server import fault_server
from tests.test_llm_http import _RawServer

from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.stage import CaptionStage
from howtocap.engine import runners
from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm import LLMOptions
from howtocap.llm.base import GenerationConfig, Messages
from howtocap.llm.loop import ChatLoop
from howtocap.llm.openai import OpenAIChatLLM
from howtocap.llm.pool import ServerPool

GEN = GenerationConfig()


def loop_many(loop: ChatLoop, llm: Any, batch: Sequence[Messages],
              gen: GenerationConfig) -> list[Any]:
    """``chat_many`` through ``loop``, run on this thread until every reply is in."""
    got: list[list[Any]] = []
    loop.chat_many(llm, batch, gen, got.append)
    t0 = time.monotonic()
    while not got:
        loop.run_once(0.5)
        assert time.monotonic() - t0 < 60, "the loop hangs"
    return got[0]


@pytest.fixture
def through_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatLoop]:
    """Every client's and pool's ``chat``/``chat_many`` sent through one ``ChatLoop``."""
    loop = ChatLoop()

    def chat(self: Any, msgs: Messages, gen: GenerationConfig) -> str:
        reply = loop_many(loop, self, [msgs], gen)[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def chat_many(self: Any, batch: Sequence[Messages], gen: GenerationConfig) -> list[Any]:
        return loop_many(loop, self, batch, gen)

    for cls in (OpenAIChatLLM, ServerPool):
        monkeypatch.setattr(cls, "chat", chat)
        monkeypatch.setattr(cls, "chat_many", chat_many)
    yield loop
    loop.close()


# -- the blocking path's tests, through the loop ---------------------------------------------

@pytest.mark.parametrize("fault", ["500", "429", "503", "timeout", "badjson", "nochoices",
                                   "reset"])
def test_each_fault_is_retried_then_answered(through_loop: ChatLoop, fault: str) -> None:
    faults.test_each_fault_is_retried_then_answered(fault)


@pytest.mark.parametrize("name", [
    "test_a_reply_without_timestamps_is_asked_again_by_the_captioner",
    "test_other_client_errors_are_not_retried",
    "test_a_slow_server_is_cut_off_per_request",
    "test_breaker_opens_on_a_closed_port_and_stays_open",
    "test_breaker_counts_timeouts_and_gateway_errors",
    "test_a_short_outage_does_not_open_the_breaker",
])
def test_fault_handling(through_loop: ChatLoop, name: str) -> None:
    getattr(faults, name)()


def test_retry_after_is_honoured(through_loop: ChatLoop, waits: list[float]) -> None:
    faults.test_retry_after_seconds_is_honoured(waits)


waits = faults.waits  # every wait the client chose before a retry (the fixture)


@pytest.mark.parametrize("name", [
    "test_equal_servers_share_the_requests_evenly",
    "test_the_server_with_fewest_outstanding_requests_gets_the_next",
    "test_a_server_killed_mid_run_loses_no_request",
    "test_all_servers_down_stops_with_one_line_naming_each",
])
def test_pool(through_loop: ChatLoop, name: str) -> None:
    getattr(pools, name)()


# -- what only the loop does -----------------------------------------------------------------

def client(url: str, **kw: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM(url, model="echo", api_key_env=None, backoff=0.01, **kw)


def test_requests_share_kept_connections_up_to_the_slots() -> None:
    batch = [[{"role": "user", "content": f"{i}s: stir pot {i}"}] for i in range(40)]
    with chat_server(keep_alive=True, delay=0.05) as srv:
        llm, loop = client(srv.url, concurrency=4), ChatLoop()
        try:
            for _ in range(3):
                assert loop_many(loop, llm, batch, GEN) == \
                    [echo_reply(m[0]["content"]) for m in batch]
        finally:
            loop.close()
        assert srv.requests == 120 and srv.connections == 4  # 4 slots, kept between rounds
        assert llm.stats["attempts"] == 120


def test_the_body_sent_is_the_blocking_clients() -> None:
    """The loop's request bytes (head built once per server) equal ``request_bytes``."""
    from howtocap.llm.http import request_bytes
    from howtocap.llm.loop import _Server

    llm = client("http://127.0.0.1:9/v1", api_key="k")
    payload = llm._encode({"messages": [{"role": "user", "content": "é"}], "n": 1})
    assert _Server(llm).request(payload) == request_bytes(
        "POST", "/v1/chat/completions", "127.0.0.1:9", llm._post_headers, payload)


def test_replies_framed_every_way_and_an_idle_close_is_no_outage() -> None:
    reply = (b'{"choices": [{"message": {"content": "0s: Crack the eggs."}, '
             b'"finish_reason": "stop"}]}')
    n = str(len(reply)).encode()
    half = len(reply) // 2
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, reply[:half], len(reply) - half,
                                                      reply[half:])
    srv = _RawServer([
        b"HTTP/1.1 200 OK\r\nContent-Length: " + n + b"\r\n\r\n" + reply[:10] + b"|"
        + reply[10:],
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked[:20] + b"|" + chunked[20:],
        b"HTTP/1.1 200 OK\r\nContent-Length: " + n + b"\r\n\r\n" + reply,
        b"HTTP/1.0 200 OK\r\n\r\n" + reply,  # to the end of the connection
    ], pause=0.05)
    try:
        llm, loop = client(srv.url + "/v1", concurrency=1, max_retries=0), ChatLoop()
        try:
            for _ in range(4):
                assert loop_many(loop, llm, [faults.MSG], GEN) == ["0s: Crack the eggs."]
        finally:
            loop.close()
        assert srv.connections == 1 and llm.stats["outages"] == 0  # kept through all four
        assert not loop._servers[id(llm)].idle  # HTTP/1.0 without keep-alive: not kept
    finally:
        srv.close()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: " + n + b"\r\n\r\n" + reply
    srv = _RawServer([answer] * 3, pause=0.05, per_connection=1)
    try:  # the server closes each connection after one answer, while it idles
        llm, loop = client(srv.url + "/v1", max_retries=0), ChatLoop()
        try:
            for _ in range(3):
                assert loop_many(loop, llm, [faults.MSG], GEN) == ["0s: Crack the eggs."]
                time.sleep(0.2)
        finally:
            loop.close()
        assert srv.connections == 3 and llm.stats["outages"] == 0
    finally:
        srv.close()


def test_a_stalled_reply_or_a_huge_one_ends_the_try() -> None:
    srv = _RawServer([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc|defghij"], pause=2.0)
    try:
        llm, loop = client(srv.url + "/v1", timeout=0.3, max_retries=0), ChatLoop()
        t0 = time.monotonic()
        [err] = loop_many(loop, llm, [faults.MSG], GEN)
        assert isinstance(err, HowtocapError) and "timed out after 0.3s" in str(err)
        assert time.monotonic() - t0 < 1.5
        loop.close()
    finally:
        srv.close()
    import howtocap.llm.loop as loop_mod

    big = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    srv = _RawServer([big])
    try:
        llm, loop = client(srv.url + "/v1", max_retries=0), ChatLoop()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(loop_mod, "MAX_REPLY_BYTES", 1000)
            [err] = loop_many(loop, llm, [faults.MSG], GEN)
        assert isinstance(err, HowtocapError) and "invalid JSON" in str(err)  # body dropped
        loop.close()
    finally:
        srv.close()


def test_only_plain_http_without_a_proxy_takes_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert client("http://127.0.0.1:9/v1").loop_ok
    assert not client("https://127.0.0.1:9/v1").loop_ok
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    assert not client("http://10.1.2.3:9/v1").loop_ok
    pool = ServerPool([client("http://127.0.0.1:9/v1"), client("https://127.0.0.1:9/v1")])
    assert not pool.loop_ok


# -- the runner: videos driven by their replies ------------------------------------------------

@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the runs that took the event loop."""
    taken: list[int] = []
    real = runners._Events.map

    def counted(self: Any, videos: Any, emit: Any) -> None:
        taken.append(1)
        real(self, videos, emit)

    monkeypatch.setattr(runners._Events, "map", counted)
    return taken


def _stage(url: str | list[str], llm: Any, fillers: bool = False) -> CaptionStage:
    return CaptionStage(LLMOptions(url=url, concurrency=2),
                        CaptionConfig(reject_fillers=fillers), model=llm)


def test_a_run_over_the_loop_equals_one_over_threads(tmp_path: Path, events: list[int]) -> None:
    cols = ["video_id", "start", "end", "text", "block", "model", "rejected"]
    tables = []
    for k, fanout in enumerate((False, True)):
        rd = RunDir(tmp_path / f"run{k}")
        items = faults.subtitle_parts(rd, 30)
        with fault_server(faults=["ok", "500", "notimestamp", "reset"]) as srv:
            llm = faults.client(srv.url, concurrency=3, timeout=5.0)
            stage = _stage(srv.url, llm)
            if fanout:  # the threads' path: a stage that cannot be driven by events
                stage.event_llm = lambda: None  # type: ignore[method-assign]
            summary = run_stage(rd, items, stage, progress=False)
        assert summary.done == 30 and not summary.failed
        tables.append(rd.merge("captions")[cols].sort_values(cols[:3], ignore_index=True))
    assert events == [1]  # the second found no LLM for the loop: threads
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert len(tables[0]) == 60


def test_the_filler_test_keeps_the_threads(tmp_path: Path, events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 3)
    with fault_server() as srv:
        stage = _stage(srv.url, faults.client(srv.url, timeout=5.0), fillers=True)
        assert run_stage(rd, items, stage, progress=False).done == 3
        assert stage.event_llm() is None
    assert events == []


def test_a_dying_server_stops_the_loop_run_and_a_rerun_resumes(tmp_path: Path,
                                                               events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 8)
    with fault_server(die_after=3) as srv, \
            pytest.raises(ServiceUnavailable, match="nothing lost; re-run to resume"):
        port = srv.httpd.server_address[1]
        run_stage(rd, items, _stage(srv.url, faults.client(srv.url, concurrency=2,
                                                            timeout=5.0)), progress=False)
    status = rd.status_table()
    cap = status[status["stage"] == "caption"]
    assert set(cap["status"]) == {"ok"} and 1 <= len(cap) <= 3  # nothing marked failed
    assert not list((tmp_path / "run" / "parts" / "claims").rglob("*.json"))
    with fault_server(port=port) as srv:
        summary = run_stage(rd, items, _stage(srv.url, faults.client(srv.url, timeout=5.0)),
                            progress=False)
        assert summary.skipped == len(cap) and summary.done == 8 - len(cap)
    assert len(events) == 2


def test_a_pool_run_over_the_loop_finishes_on_the_live_server(tmp_path: Path,
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
    assert not (rd2.status_table()["status"] == "error").any()
    assert len(events) == 2


def test_what_escapes_emit_stops_the_loop_run_and_drops_its_connections(
        tmp_path: Path, events: list[int]) -> None:
    rd = RunDir(tmp_path / "run")
    items = faults.subtitle_parts(rd, 10)
    with chat_server(keep_alive=True, delay=0.05) as srv:
        stage = _stage(srv.url, client(srv.url, concurrency=2))
        stage.setup()
        from howtocap.engine.core import _inputs

        videos = (v for v in (_inputs(rd, stage, it) for it in items) if v is not None)
        with pytest.raises(OSError, match="disk full"):
            runners.LocalRunner(2).map(stage, videos,
                                       lambda res: (_ for _ in ()).throw(OSError("disk full")))
    assert events == [1]
