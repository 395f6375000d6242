"""OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (stdlib, in-process).

The server counts requests in flight, can fail on purpose (500/429/slow), and answers with
one timestamped caption per ASR line it was sent, so the captioning stage runs end to end.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from howtocap.caption.captioner import CaptionConfig, CaptionError, caption_video
from howtocap.caption.constrain import CAPTION_GBNF, CAPTION_REGEX
from howtocap.caption.stage import CaptionStage
from howtocap.engine.core import run_stage
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.io.inputs import VideoItem
from howtocap.llm import LLMOptions, create
from howtocap.llm.base import GenerationConfig
from howtocap.llm.openai import OpenAIChatLLM
from howtocap.schemas import SCHEMAS
from tests.support.chat_server import send_json
from tests.support.stages import write_rows

MSG = [{"role": "user", "content": "10s: hello"}]
GEN = GenerationConfig(max_tokens=16)


def steps_reply(prompt: str) -> str:
    """'Ns: <asr>' lines -> 'N. Ns: Step <asr>.' lines, plus filler the parser must drop."""
    lines = re.findall(r'^(\d+)s: (.*?)"?\.?$', prompt, flags=re.M)  # the block ends in '".'
    return "Sure! Here is the summary:\n" + "\n".join(
        f"{i + 1}. {t}s: Step {txt}." for i, (t, txt) in enumerate(lines))


class FakeServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.plan: list[tuple[int, dict[str, str]]] = []  # forced (status, headers), in order
        self.delay = 0.0
        self.finish = "stop"
        self.reply: Callable[[str], str] = steps_reply
        self.fail_if: Callable[[str], bool] = lambda prompt: False
        self.reject: set[str] = set()  # request fields answered with 400, as hosted APIs do
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
                send_json(self, status, body, headers)

            def do_GET(self) -> None:  # noqa: N802
                self.send(200, {"object": "list", "data": [{"id": "fake-model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                    owner.requests.append(body)
                    owner.headers.append(dict(self.headers))
                    forced = owner.plan.pop(0) if owner.plan else None
                try:
                    time.sleep(owner.delay)
                    prompt = body["messages"][-1]["content"]
                    rejected = sorted(owner.reject & set(body))
                    headers = None
                    if forced:
                        code, reply, headers = forced[0], {"error": {"message": "forced"}}, \
                            forced[1]
                    elif rejected:
                        why = f"Unrecognized request argument supplied: {rejected[0]}"
                        code, reply = 400, {"error": {"message": why}}
                    elif owner.fail_if(prompt):
                        code, reply = 500, {"error": {"message": "boom"}}
                    else:
                        code, reply = 200, {"choices": [{
                            "index": 0, "finish_reason": owner.finish,
                            "message": {"role": "assistant", "content": owner.reply(prompt)}}]}
                finally:
                    # out of flight before the reply leaves: the client may send its next
                    # request the moment it has this one's answer
                    with owner.lock:
                        owner.in_flight -= 1
                self.send(code, reply, headers)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def statuses_left(self) -> int:
        return len(self.plan)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def client(url: str, **kw: object) -> OpenAIChatLLM:
    opts: dict = {"backoff": 0.01, "backoff_max": 0.05, "timeout": 5.0, **kw}
    return OpenAIChatLLM(url, **opts)


def test_retries_500_and_429_then_succeeds(server: FakeServer) -> None:
    server.plan = [(500, {}), (429, {"Retry-After": "0"}), (503, {})]
    llm = client(server.url, max_retries=3)
    assert llm.chat(MSG, GEN) == "Sure! Here is the summary:\n1. 10s: Step hello."
    assert len(server.requests) == 4
    assert server.requests[-1]["model"] == "fake-model" and llm.name == "openai:fake-model"
    assert server.requests[-1]["max_tokens"] == 16 and server.requests[-1]["temperature"] == 0.0


def test_gives_up_with_one_line_after_the_last_try(server: FakeServer) -> None:
    server.plan = [(500, {})] * 10
    with pytest.raises(HowtocapError) as exc:
        client(server.url, max_retries=2).chat(MSG, GEN)
    assert str(exc.value) == (f"LLM server {server.url}/chat/completions returned 500 "
                              "after 3 tries")
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server: FakeServer) -> None:
    server.plan = [(401, {})]
    with pytest.raises(HowtocapError, match="returned 401: forced"):
        client(server.url, max_retries=3).chat(MSG, GEN)
    assert len(server.requests) == 1


def test_concurrency_is_reached_but_never_exceeded(server: FakeServer) -> None:
    server.delay = 0.15
    llm = client(server.url, concurrency=3)
    batches = [[[{"role": "user", "content": f"{i}s: x"}] for i in range(9)] for _ in range(2)]
    results: list[list] = []
    threads = [threading.Thread(target=lambda b=b: results.append(llm.chat_many(b, GEN)))
               for b in batches]  # two videos at once share the client's limit
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.max_in_flight == 3
    want = [steps_reply(f"{i}s: x") for i in range(9)]
    assert results == [want, want]  # each video gets its own replies, in its prompts' order
    assert len(server.requests) == 18


def test_down_server_fails_fast_with_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens here
    with pytest.raises(HowtocapError) as exc:  # no waiting beyond 3 refused attempts
        client(f"http://127.0.0.1:{port}", max_retries=2).chat(MSG, GEN)
    msg = str(exc.value)  # a down server stops the run (see test_llm_faults.py)
    assert isinstance(exc.value, ServiceUnavailable)
    assert msg.startswith(f"LLM server at http://127.0.0.1:{port}/v1 unreachable after 3 "
                          "attempts (") and "\n" not in msg
    assert msg.endswith("; nothing lost; re-run to resume")


def test_timeouts_are_retried_then_reported(server: FakeServer) -> None:
    server.delay = 1.0
    with pytest.raises(HowtocapError, match=r"timed out after 0.2s after 2 tries"):
        client(server.url, timeout=0.2, max_retries=1).chat(MSG, GEN)


def test_api_key_comes_from_the_named_env_var(server: FakeServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-test-123")
    llm = create("openai", url=server.url, model="m1", api_key_env="MY_LLM_KEY")
    llm.chat(MSG, GEN)
    assert server.headers[-1]["Authorization"] == "Bearer sk-test-123"
    assert server.requests[-1]["model"] == "m1"
    with pytest.raises(HowtocapError, match="needs --llm-url"):
        create("openai")


def subtitles(n: int, tag: str = "stir") -> pd.DataFrame:
    return pd.DataFrame({"start": [5.0 * i for i in range(n)],
                         "end": [5.0 * i + 4 for i in range(n)],
                         "text": [f"{tag} number {i}" for i in range(n)]})


def test_caption_video_end_to_end(server: FakeServer) -> None:
    llm = client(server.url)
    cfg = CaptionConfig(block_words=9)  # 3 words per sentence -> 3 sentences per block
    df, stats = caption_video("vid1", subtitles(7), llm, cfg)
    assert list(df.columns) == list(SCHEMAS["captions"])
    assert stats.blocks == 3 and stats.replies == 3 and len(server.requests) == 3
    assert df["text"].tolist() == [f"Step stir number {i}." for i in range(7)]
    assert df["start"].tolist() == [5.0 * i for i in range(7)]
    assert (df["end"] - df["start"]).eq(8.0).all()
    assert df["block"].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert set(df["model"]) == {"openai:fake-model"} and set(df["source"]) == {"llm"}
    assert stats.lines_without_timestamp == 3  # one "Sure! ..." per reply


def test_duplicates_across_blocks_keep_the_earliest(server: FakeServer) -> None:
    server.reply = lambda prompt: "\n".join(
        f"{t}s: Whisk the eggs." for t in re.findall(r"^(\d+)s:", prompt, flags=re.M))
    cfg = CaptionConfig(block_words=9)
    df, stats = caption_video("v", subtitles(6), client(server.url), cfg)
    assert df[["start", "text"]].values.tolist() == [[0.0, "Whisk the eggs."]]
    assert stats.duplicates == 5


def test_reply_cut_by_max_tokens_loses_its_last_line(server: FakeServer) -> None:
    server.finish = "length"
    server.reply = lambda prompt: "0s: Stir the soup.\n5s: Add the sa"
    df, stats = caption_video("v", subtitles(2), client(server.url))
    assert df["text"].tolist() == ["Stir the soup."] and stats.truncated_replies == 1


def test_unparseable_replies_and_server_errors_fail_one_video(server: FakeServer,
                                                              tmp_path: Path) -> None:
    llm = client(server.url, max_retries=1)
    server.reply = lambda prompt: "This video is about cooking."
    n0 = len(server.requests)
    with pytest.raises(CaptionError, match=r"^1 of 1 LLM blocks gave no caption \(block 0: "
                                           r"reply had no timestamped caption line\)") as info:
        caption_video("v", subtitles(3), llm)
    # asked once more, sampling with another seed, before giving up
    retry = server.requests[n0 + 1]
    assert len(server.requests) == n0 + 2 and retry["seed"] == 1 and retry["temperature"] == 0.7
    assert info.value.stats.retried_blocks == 1

    server.reply = steps_reply
    server.fail_if = lambda prompt: "broken" in prompt
    items = {"good": subtitles(3), "bad": subtitles(3, tag="broken"), "good2": subtitles(2)}
    rd = RunDir(tmp_path / "run")
    write_rows(rd, "subtitles", pd.concat([subs.assign(video_id=vid, source="vtt")
                                           for vid, subs in items.items()], ignore_index=True))
    stage = CaptionStage(LLMOptions(), CaptionConfig(), model=llm)
    vids = [VideoItem(video_id=v, video_path=None, subtitle_path=None) for v in items]
    summary = run_stage(rd, vids, stage, progress=False)
    assert summary.done == 2
    assert summary.failed == [("bad", f"1 of 1 LLM blocks gave no caption (block 0: LLM "
                                      f"server {server.url}/chat/completions returned 500 "
                                      "after 2 tries)")]
    status = rd.table("status")
    status = status[status["stage"] == "caption"].set_index("video_id")
    assert status.loc["bad", "status"] == "error" and status.loc["good", "status"] == "ok"
    assert sorted(rd.table("captions")["video_id"].unique()) == ["good", "good2"]


def test_constraint_fields_are_sent_and_dropped_for_a_server_that_rejects_them(
        server: FakeServer) -> None:
    subs = subtitles(3)
    df, _ = caption_video("v", subs, client(server.url), CaptionConfig(constrain=True))
    sent = server.requests[-1]
    assert sent["grammar"] == CAPTION_GBNF  # llama.cpp server
    assert sent["structured_outputs"] == {"regex": CAPTION_REGEX}  # vLLM
    assert len(df) == 3  # a server that ignores the fields still works

    server.requests.clear()
    df, _ = caption_video("v", subs, client(server.url), CaptionConfig(constrain=False))
    assert "grammar" not in server.requests[0] and len(df) == 3

    server.requests.clear()
    server.reject = {"grammar"}
    llm = client(server.url, concurrency=1)
    df, stats = caption_video("v", subtitles(4, tag="x"), llm,
                              CaptionConfig(block_words=8, constrain=True))
    assert stats.blocks == 2 and len(df) == 4 and not stats.failed_blocks
    assert llm.constraints_rejected
    # asked once with the fields, then again without; later requests leave them out
    assert ["grammar" in r for r in server.requests] == [True, False, False]


def test_other_400s_are_not_taken_for_a_rejected_constraint(server: FakeServer) -> None:
    server.plan = [(400, {})]
    llm = client(server.url)
    with pytest.raises(HowtocapError, match="returned 400: forced"):
        llm.chat(MSG, GenerationConfig(grammar=CAPTION_GBNF))
    assert len(server.requests) == 1 and not llm.constraints_rejected


def test_request_bodies_are_what_json_dumps_writes() -> None:
    """The client encodes the messages before the last once (the template's system and
    few-shot turns): every body is still byte for byte ``json.dumps`` of the request, and a
    real server reads the same request back."""
    from howtocap.caption.blocks import Block
    from howtocap.caption.prompt import build_messages
    from howtocap.llm.base import GenerationConfig
    from howtocap.llm.openai import OpenAIChatLLM
    from tests.support.chat_server import chat_server

    llm = OpenAIChatLLM("http://127.0.0.1:9/v1", model="m", api_key_env=None)
    system = {"role": "system", "content": 'Say "hi"\n\u00e9\u2014\U0001f600'}
    bodies = [
        {"messages": [system, {"role": "user", "content": "0s: x"}], "temperature": 0.0},
        {"messages": [system, {"role": "user", "content": "5s: y \\ z"}], "model": "m"},
        {"messages": [{"role": "user", "content": "only one"}], "seed": 1},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
                      {"role": "user", "content": "parts before the last: not cached"}]},
        {"messages": [system, {"role": "assistant", "content": "ok", "name": "n"},
                      {"role": "user", "content": "3s: z"}]},
        # the fields after the messages are cached too: equal values of other types are
        # other bytes (0 == 0.0 == False), and lists are not cached
        {"messages": [system, {"role": "user", "content": "0s: x"}], "temperature": 0},
        {"messages": [system, {"role": "user", "content": "0s: x"}], "temperature": False},
        {"messages": [system, {"role": "user", "content": "0s: x"}], "stop": ["\n\n"],
         "seed": 1},
    ]
    for body in bodies * 2:  # the second time from the cache
        assert llm._encode(body) == json.dumps(body).encode()
    tpl = CaptionConfig().resolved_template()
    a, b = (build_messages(Block(i, 0, 9, f"{i}s: stir"), tpl) for i in (1, 2))
    assert a[:-1] == b[:-1] and all(x is y for x, y in zip(a[:-1], b[:-1], strict=True))
    with chat_server(keep_alive=True) as srv:
        llm = OpenAIChatLLM(srv.url, model="echo", api_key_env=None)
        gen = GenerationConfig()
        for msgs in (a, b):
            llm.chat(msgs, gen)
        seen = srv.bodies
        assert [s["messages"] for s in seen] == [a, b]
        assert all(s["model"] == "echo" and s["temperature"] == 0.0 for s in seen)
