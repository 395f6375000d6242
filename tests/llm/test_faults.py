"""An LLM client that survives a bad server, and a run that stops cleanly when it is gone.

Every test talks to a real HTTP server on 127.0.0.1 (``tests/support/fault_server.py``) that injects
one kind of fault, or to a port where nothing listens.
"""

from __future__ import annotations

import re
import subprocess
import time
from email.utils import formatdate
from pathlib import Path

import pandas as pd
import pytest

from howtocap.caption.captioner import CaptionConfig, caption_video
from howtocap.caption.stage import CaptionStage
from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm import LLMOptions
from howtocap.llm.openai import OpenAIChatLLM, retry_after_seconds
from tests.support.cli import run_cli
from tests.support.fault_server import FaultServer, fault_server
from tests.support.llm import (
    CLEAN,
    GEN,
    MSG,
    client,
    closed_port,
    statuses,
    subtitle_parts,
    write_caption_json,
)


@pytest.mark.parametrize("fault", ["500", "429", "503", "timeout", "badjson", "nochoices",
                                   "reset"])
def test_each_fault_is_retried_then_answered(fault: str) -> None:
    with fault_server(retry_after="0", stall=1.5) as srv:
        srv.plan = [fault]
        llm = client(srv.url)
        assert llm.chat(MSG, GEN) == CLEAN
        assert srv.injected == {fault: 1} and srv.requests == 2
        assert llm.stats["retries"] == 1


def test_a_multimodal_request_is_retried_whole() -> None:
    """A --vlm-url request (content parts with an image) gets the same retries, images and
    all."""
    parts = [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
             {"type": "text", "text": MSG[0]["content"]}]
    with fault_server(retry_after="0") as srv:
        srv.plan = ["500", "503"]
        assert client(srv.url).chat([{"role": "user", "content": parts}], GEN) == CLEAN
        assert srv.requests == 3 and srv.images == 3


def test_a_reply_without_timestamps_is_asked_again_by_the_captioner() -> None:
    subs = pd.DataFrame({"start": [0.0, 4.0], "end": [3.0, 7.0],
                         "text": ["crack the eggs", "whisk them well"]})
    with fault_server(faults=["notimestamp"]) as srv:
        df, stats = caption_video("v", subs, client(srv.url))
    assert srv.injected == {"notimestamp": 1} and srv.requests == 2
    assert stats.retried_blocks == 1 and not stats.failed_blocks
    assert df["text"].tolist() == ["Crack the eggs.", "Whisk them well."]


def test_other_client_errors_are_not_retried() -> None:
    with fault_server() as srv:
        srv.plan = ["404"]
        llm = client(srv.url, max_retries=3)
        with pytest.raises(HowtocapError, match="returned 404: injected 404") as exc:
            llm.chat(MSG, GEN)
        assert not isinstance(exc.value, ServiceUnavailable) and srv.requests == 1
        assert llm.chat(MSG, GEN) == CLEAN  # a 4xx says nothing about the server being down


def gap(srv: FaultServer) -> float:
    return srv.times[1] - srv.times[0]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait the client chose before a retry. Upper bounds are asserted on these, not on
    the wall clock (a loaded machine only makes the retry later); lower bounds on the server's
    arrival times (no load makes it earlier)."""
    chosen: list[float] = []
    real = OpenAIChatLLM._delay

    def delay(self: OpenAIChatLLM, attempt: int, retry_after: float | None) -> float:
        chosen.append(real(self, attempt, retry_after))
        return chosen[-1]

    monkeypatch.setattr(OpenAIChatLLM, "_delay", delay)
    return chosen


def test_retry_after_seconds_is_honoured(waits: list[float]) -> None:
    with fault_server(retry_after="1") as srv:
        srv.plan = ["429"]
        assert client(srv.url, timeout=5.0).chat(MSG, GEN) == CLEAN
        # the server's wait, not our 10-ms backoff; at most 10 % jitter on top
        assert len(waits) == 1 and 1.0 <= waits[0] <= 1.1
        assert gap(srv) >= 1.0


def test_retry_after_http_date_is_honoured_and_capped(waits: list[float]) -> None:
    when = float(int(time.time()) + 2)  # HTTP dates have whole seconds
    with fault_server(retry_after=formatdate(when, usegmt=True)) as srv:
        srv.plan = ["503"]
        assert client(srv.url, timeout=5.0).chat(MSG, GEN) == CLEAN
        assert srv.wall[1] >= when - 0.05  # not retried before the date
        # the wait chosen at the 503 runs to the date (+ at most 10 % jitter), no further
        assert len(waits) == 1 and waits[0] <= 1.1 * (when - srv.wall[0]) + 0.05
    waits.clear()
    with fault_server(retry_after="3600") as srv:
        srv.plan = ["429"]
        client(srv.url, timeout=5.0, retry_after_max=0.2).chat(MSG, GEN)
        assert len(waits) == 1 and 0.2 <= waits[0] <= 0.22 and gap(srv) >= 0.2


def test_retry_after_parsing() -> None:
    now = 1_000_000_000.0
    assert retry_after_seconds("7") == 7.0 and retry_after_seconds("-3") == 0.0
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0.0
    for junk in (None, "", "soon", "nan", "Mon, 99 Foo 2024"):
        assert retry_after_seconds(junk) is None


def test_backoff_grows_exponentially_with_jitter() -> None:
    llm = OpenAIChatLLM("http://127.0.0.1:9", backoff=1.0, backoff_max=30.0)
    for attempt in range(4):
        draws = [llm._delay(attempt, None) for _ in range(200)]
        lo, hi = 0.5 * 2 ** attempt, 1.5 * 2 ** attempt
        assert all(lo <= d <= hi for d in draws)
        assert max(draws) - min(draws) > 0.5 * (hi - lo)  # spread, not one fixed delay
    assert max(llm._delay(10, None) for _ in range(50)) <= 30.0


def test_a_slow_server_is_cut_off_per_request() -> None:
    with fault_server(stall=1.5) as srv:
        srv.plan = ["timeout"]  # baseline, measured here: one stalled reply, waited for
        t0 = time.perf_counter()
        assert client(srv.url, timeout=10.0, max_retries=0).chat(MSG, GEN) == CLEAN
        stalled = time.perf_counter() - t0
        srv.plan = ["timeout", "timeout"]
        t0 = time.perf_counter()
        with pytest.raises(HowtocapError, match=r"timed out after 0.1s after 2 tries") as exc:
            client(srv.url, timeout=0.1, max_retries=1).chat(MSG, GEN)
        # both tries were cut off: together shorter than one stalled reply
        assert time.perf_counter() - t0 < stalled
        assert not isinstance(exc.value, ServiceUnavailable)  # slow is not gone


def test_breaker_opens_on_a_closed_port_and_stays_open() -> None:
    port = closed_port()
    llm = client(f"http://127.0.0.1:{port}", max_retries=20, breaker_after=5)
    with pytest.raises(ServiceUnavailable) as exc:  # after 5 of the 21 tries (attempts below)
        llm.chat(MSG, GEN)
    assert str(exc.value).startswith(f"LLM server at http://127.0.0.1:{port}/v1 unreachable "
                                     "after 5 attempts (")
    assert str(exc.value).endswith("; nothing lost; re-run to resume")
    assert llm.stats["attempts"] == 5
    with pytest.raises(ServiceUnavailable):
        llm.chat(MSG, GEN)
    assert llm.stats["attempts"] == 5  # open: no more knocking


def test_breaker_counts_timeouts_and_gateway_errors() -> None:
    with fault_server(stall=2.0) as srv:
        srv.plan = ["timeout"] * 10
        with pytest.raises(ServiceUnavailable, match=r"after 3 attempts \(timed out"):
            client(srv.url, timeout=0.2, max_retries=9, breaker_after=3).chat(MSG, GEN)
    with fault_server() as srv:
        srv.plan = ["502"] * 10
        with pytest.raises(ServiceUnavailable, match=r"after 4 attempts \(HTTP 502\)"):
            client(srv.url, max_retries=9, breaker_after=4).chat(MSG, GEN)


def test_a_short_outage_does_not_open_the_breaker() -> None:
    with fault_server(retry_after="0") as srv:
        srv.plan = ["reset", "503", "reset"]
        llm = client(srv.url, max_retries=5, breaker_after=4)
        assert llm.chat(MSG, GEN) == CLEAN
        srv.plan = ["503", "reset", "503"]  # the streak restarted at the answer above
        assert llm.chat(MSG, GEN) == CLEAN and llm.stats["outages"] == 6


# -- the run stops, nothing is marked failed, a re-run resumes ----------------------------------


def caption_stage(url: str) -> CaptionStage:
    llm = client(url, concurrency=2, timeout=5.0)
    return CaptionStage(LLMOptions(url=url, concurrency=2), CaptionConfig(), model=llm)


def test_a_server_dying_mid_run_stops_it_and_a_rerun_resumes(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    items = subtitle_parts(rd, 8)
    with fault_server(die_after=3) as srv, \
            pytest.raises(ServiceUnavailable, match="nothing lost; re-run to resume"):
        port = srv.httpd.server_address[1]
        run_stage(rd, items, caption_stage(srv.url), progress=False)
    status = statuses(rd)
    cap = status[status["stage"] == "caption"]
    assert set(cap["status"]) == {"ok"} and 1 <= len(cap) <= 3  # finished ones are kept
    assert not list((tmp_path / "run" / "claims").rglob("*.lock"))
    first = set(cap["video_id"])
    with fault_server(port=port) as srv:  # restarted at the same URL: the same settings
        summary = run_stage(rd, items, caption_stage(srv.url), progress=False)
        assert summary.skipped == len(first) and summary.done == 8 - len(first)
        assert not summary.failed and srv.requests == 8 - len(first)
    resumed = rd.table("captions")
    clean_rd = RunDir(tmp_path / "clean")
    subtitle_parts(clean_rd, 8)
    with fault_server() as srv:
        run_stage(clean_rd, items, caption_stage(srv.url), progress=False)
    cols = ["video_id", "start", "end", "text", "block", "model"]  # not the per-run ids
    pd.testing.assert_frame_equal(resumed[cols], clean_rd.table("captions")[cols])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=120)


@pytest.mark.slow
def test_cli_stops_on_a_closed_port_with_one_line_then_resumes(tmp_path: Path) -> None:
    src = tmp_path / "caption.json"
    write_caption_json(src, 12)
    out = tmp_path / "run"
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    res = cli("caption", "--subtitles", str(src), "--out", str(out), "--llm-url", url,
              "--parse-workers", "0")
    assert res.returncode == 75, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and re.fullmatch(
        rf"error: LLM server at {re.escape(url)} unreachable after 8 attempts \(.*(refused|"
        r"failed).*\); nothing lost; re-run to resume", errors[0]), errors
    assert "Traceback" not in res.stderr and "✗" not in res.stderr
    # 8 attempts in all, not 12 videos x 4 tries (benchmarks/robustness/bench_faults.py times
    # the stop)
    status = statuses(RunDir(out))
    assert (status["status"] == "error").sum() == 0
    assert (status["stage"] == "subtitles").sum() == 12  # the subtitles stage did finish
    with fault_server(faults=["ok", "500", "badjson"], port=port) as srv:
        res = cli("caption", "--subtitles", str(src), "--out", str(out), "--llm-url", srv.url,
                  "--parse-workers", "0")
    assert res.returncode == 0, res.stderr
    assert "caption: 12 done" in res.stderr
    assert RunDir(out).table("captions")["video_id"].nunique() == 12
