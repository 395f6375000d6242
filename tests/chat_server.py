"""A real OpenAI-compatible chat server on 127.0.0.1 for tests, with scripted behaviour.

It answers deterministically from the prompt (one caption per ``<n>s:`` line it was given), so
two runs of the pipeline produce identical tables, and it can be told to fail or stall.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LINE = re.compile(r"^(\d+)s: (.+)$", re.M)


def echo_reply(prompt: str) -> str:
    """``<n>s: Summary of <first words>.`` for each timestamped line of the prompt."""
    if "NOPARSE" in prompt:
        return "I am sorry, I cannot help with that."
    lines = [f"{m.group(1)}s: {' '.join(m.group(2).split()[:5]).capitalize()}."
             for m in LINE.finditer(prompt)]
    return "Sure! Here is the summary:\n" + "\n".join(lines)


class ChatServer:
    """Counts requests; ``fail_first`` 500s, ``status`` forces a status, ``delay`` stalls."""

    def __init__(self, *, delay: float = 0.0, status: int | None = None) -> None:
        self.delay = delay
        self.status = status
        self.requests = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, {"data": [{"id": "echo"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                if server.delay:
                    time.sleep(server.delay)
                if server.status:
                    self._send(server.status, {"error": {"message": "scripted failure"}})
                    return
                prompt = body["messages"][-1]["content"]
                self._send(200, {"choices": [{"message": {"role": "assistant",
                                                          "content": echo_reply(prompt)}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

            def _send(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@contextmanager
def serving(srv: Any) -> Iterator[Any]:
    """Serve ``srv.httpd`` on a daemon thread for the block, then shut it down."""
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


@contextmanager
def chat_server(**kw: Any) -> Iterator[ChatServer]:
    with serving(ChatServer(**kw)) as srv:
        yield srv

