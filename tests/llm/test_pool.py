"""Several LLM servers from one driver: real HTTP servers on 127.0.0.1, one of them killed.

Routing is least-outstanding (ties rotate), each server keeps its own breaker, a dead server's
requests go to the others, and only when every server is gone does the run stop (exit 75 in the
CLI, ``ServiceUnavailable`` here) with nothing marked failed.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.stage import CaptionStage
from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm import LLMOptions, create
from howtocap.llm.openai import OpenAIChatLLM
from howtocap.llm.pool import ServerPool, read_urls
from tests.support.chat_server import chat_server
from tests.support.fault_server import fault_server
from tests.support.llm import CLEAN, GEN, MSG, closed_port, pool, statuses, subtitle_parts


def msg(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{i}s: crack egg number {i}"}]


def test_equal_servers_share_the_requests_evenly() -> None:
    with ExitStack() as stack:
        servers = [stack.enter_context(fault_server()) for _ in range(3)]
        llm = pool([s.url for s in servers])
        assert [llm.chat(MSG, GEN) for _ in range(30)] == [CLEAN] * 30
        assert [s.requests for s in servers] == [10, 10, 10]  # one at a time: ties rotate
        assert llm.served == [10, 10, 10]


def test_the_server_with_fewest_outstanding_requests_gets_the_next() -> None:
    """A slow server holds its requests longer, so it is picked less: round robin would
    give each of the three a third."""
    with chat_server(delay=0.4) as slow, chat_server() as fast1, chat_server() as fast2:
        llm = pool([slow.url, fast1.url, fast2.url], concurrency=2)
        replies = llm.chat_many([msg(i) for i in range(60)], GEN)
        assert all(isinstance(r, str) for r in replies)
        assert slow.requests + fast1.requests + fast2.requests == 60
        assert slow.requests < min(fast1.requests, fast2.requests) / 2, \
            (slow.requests, fast1.requests, fast2.requests)


def test_a_server_killed_mid_run_loses_no_request() -> None:
    with fault_server(die_after=3) as dying, fault_server() as a, fault_server() as b:
        llm = pool([dying.url, a.url, b.url], concurrency=2)
        replies = llm.chat_many([msg(i) for i in range(30)], GEN)
        assert [r for r in replies if not isinstance(r, str)] == []
        assert dying.answered == 3 and a.answered + b.answered == 27
        assert llm.resent >= 1 and llm.stats["servers_down"] == 1
        assert sum(llm.served) == 30


def test_all_servers_down_stops_with_one_line_naming_each() -> None:
    urls = [f"http://127.0.0.1:{closed_port()}/v1" for _ in range(2)]
    llm = pool(urls)
    with pytest.raises(ServiceUnavailable) as exc:
        llm.chat(MSG, GEN)
    text = str(exc.value)
    assert text.startswith("all 2 LLM servers are down (") and "\n" not in text
    assert all(f"{u}: LLM server at {u} unreachable" in text for u in urls)
    with pytest.raises(ServiceUnavailable):  # and stays down: no more knocking
        llm.chat(MSG, GEN)


def caption_stage(urls: list[str], llm: ServerPool) -> CaptionStage:
    return CaptionStage(LLMOptions(url=urls, concurrency=2), CaptionConfig(), model=llm)


def test_a_run_finishes_on_the_live_servers_and_stops_only_when_all_are_gone(
        tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    items = subtitle_parts(rd, 12)
    with fault_server(die_after=2) as dying, fault_server() as live:
        urls = [dying.url, live.url]
        summary = run_stage(rd, items, caption_stage(urls, pool(urls)), progress=False)
    assert summary.done == 12 and not summary.failed
    assert dying.answered == 2 and live.answered >= 10

    rd2 = RunDir(tmp_path / "run2")
    items2 = subtitle_parts(rd2, 6)
    dead = [f"http://127.0.0.1:{closed_port()}/v1" for _ in range(2)]
    with pytest.raises(ServiceUnavailable, match=r"^all 2 LLM servers are down"):
        run_stage(rd2, items2, caption_stage(dead, pool(dead)), progress=False)
    status = statuses(rd2)
    assert not (status["status"] == "error").any()  # nothing marked failed: re-run resumes


def test_urls_from_flags_and_files(tmp_path: Path) -> None:
    listing = tmp_path / "servers.txt"
    listing.write_text("# vLLM replicas\nhttp://a:8000/v1\n\nhttp://b:8000/v1/  # second\n")
    assert read_urls([str(listing), "http://c:8000/v1", "http://a:8000/v1"]) == [
        "http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1"]
    opts = LLMOptions(url=str(listing), concurrency=8)
    assert opts.url == ["http://a:8000/v1", "http://b:8000/v1"] and opts.in_flight == 16
    one = LLMOptions(url=["http://a:8000/v1", "http://a:8000/v1/"])
    assert one.url == "http://a:8000/v1" and one.in_flight == 4  # one server: as before
    assert isinstance(create(url=opts.url), ServerPool)
    assert isinstance(create(url=["http://a:8000/v1"]), OpenAIChatLLM)
    empty = tmp_path / "none.txt"
    empty.write_text("# nothing yet\n")
    with pytest.raises(HowtocapError, match=r"none.txt: no server URL in this file"):
        LLMOptions(url=str(empty))


def test_replicas_of_a_named_model_are_one_setting() -> None:
    """Losing or adding a replica between runs resumes; another model or URL set does not."""
    from howtocap.llm.identity import llm_identity

    ab = LLMOptions(url=["http://a/v1", "http://b/v1"], model="m")
    abc = LLMOptions(url=["http://c/v1", "http://a/v1", "http://b/v1"], model="m")
    assert llm_identity(ab) == llm_identity(abc) == {"kind": "servers", "model": "m"}
    assert llm_identity(ab) != llm_identity(ab.model_copy(update={"model": "n"}))
    unnamed = LLMOptions(url=["http://b/v1", "http://a/v1"])
    assert llm_identity(unnamed)["urls"] == ["http://a/v1", "http://b/v1"]
    assert llm_identity(unnamed) != llm_identity(LLMOptions(url=["http://a/v1", "http://c/v1"]))
    assert llm_identity(LLMOptions(url="http://a/v1/")) == {"kind": "server", "url": "http://a/v1",
                                                           "model": ""}


@pytest.mark.slow
def test_cli_takes_several_servers_stops_when_all_are_down_and_resumes_on_others(
        tmp_path: Path) -> None:
    """``--llm-url`` twice: both down -> exit 75, one line, nothing failed; the same model on
    another set of replicas resumes the run (the dead one of them is dropped)."""
    from howtocap.engine.rundir import RunDir
    from tests.support.cli import run_cli as cli
    from tests.support.llm import write_caption_json

    src, out = tmp_path / "caption.json", tmp_path / "run"
    write_caption_json(src, 12)
    dead = [f"http://127.0.0.1:{closed_port()}/v1" for _ in range(2)]
    args = ["caption", "--subtitles", str(src), "--out", str(out), "--llm-model", "m"]
    res = cli(*args, "--llm-url", dead[0], "--llm-url", dead[1])
    assert res.returncode == 75, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: all 2 LLM servers are down (")
    assert "Traceback" not in res.stderr
    assert not (statuses(RunDir(out))["status"] == "error").any()
    listing = tmp_path / "servers.txt"
    with fault_server() as live:
        listing.write_text(f"{dead[0]}\n{live.url}\n")
        res = cli(*args, "--llm-url", str(listing))
    assert res.returncode == 0, res.stderr
    assert "caption: 12 done" in res.stderr and live.answered == 12
