"""The model lookup (``GET /models`` without ``--llm-model``) against a real server on 127.0.0.1:
no request leaves without the model while the lookup is still waiting for its answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from howtocap.llm.base import GenerationConfig
from howtocap.llm.openai import OpenAIChatLLM
from tests.support.chat_server import send_json

GEN = GenerationConfig(max_tokens=16)


class SlowModels:
    """``GET /models`` answers only once a chat request came in (or after ``hold`` s): a
    client that lets a request go before the lookup's answer is caught every time."""

    def __init__(self, hold: float = 0.5) -> None:
        self.asked = threading.Event()  # the lookup reached the server
        self.chatted = threading.Event()  # a chat request reached the server
        self.models: list[Any] = []  # each chat request's "model" field
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                srv.asked.set()
                srv.chatted.wait(hold)
                send_json(self, 200, {"data": [{"id": "served-model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                srv.models.append(body.get("model"))
                srv.chatted.set()
                send_json(self, 200, {"choices": [{"message": {"role": "assistant",
                                                               "content": "1s: Stir."}}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def slow_models() -> Iterator[SlowModels]:
    srv = SlowModels()
    threading.Thread(target=srv.httpd.serve_forever, daemon=True).start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_a_request_sent_during_the_lookup_waits_for_the_model(slow_models: SlowModels) -> None:
    llm = OpenAIChatLLM(slow_models.url, api_key_env=None, backoff=0.01, concurrency=4)
    msgs = [{"role": "user", "content": "1s: stir the pot"}]
    first = threading.Thread(target=llm.chat, args=(msgs, GEN))
    first.start()
    assert slow_models.asked.wait(5), "the client never asked the server for its model"
    second = threading.Thread(target=llm.chat, args=(msgs, GEN))  # while /models is pending
    second.start()
    first.join(10)
    second.join(10)
    assert slow_models.models == ["served-model", "served-model"]
    assert llm.name == "openai:served-model"
    llm.close()
