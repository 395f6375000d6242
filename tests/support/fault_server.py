"""A real OpenAI-compatible chat server on 127.0.0.1 that misbehaves on purpose.

It answers like ``tests.support.chat_server`` (one ``<n>s: ...`` caption per timestamped
prompt line, deterministic, so a faulty run and a clean run must give identical tables), but
the first request of a prompt can be a fault, chosen per prompt by ``faults`` (cycled over the
prompts in the order they first arrive) or forced for the next requests by ``plan``:

``500`` · ``429`` (with ``Retry-After``) · ``503`` · ``timeout`` (answers after ``stall`` s,
longer than the client waits) · ``badjson`` (200 with a body that is not JSON) · ``nochoices``
(200, JSON without ``choices``) · ``notimestamp`` (a well-formed reply with no ``<n>s:`` line;
the captioner asks again) · ``reset`` (the connection closes without an answer) · any other
HTTP status as digits (``404``). ``die_after=N``: after N clean answers the server is gone
(open connections reset, new ones refused), as a crashed server.

Shared by ``tests/llm/test_faults.py`` and ``benchmarks/robustness/bench_faults.py``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.chat_server import echo_reply, prompt_text, serving

FAULTS = ("500", "429", "503", "timeout", "badjson", "nochoices", "notimestamp", "reset")


class FaultServer:
    """``faults``: per distinct prompt (cycled), the fault of its first request ("ok" = none).
    ``plan``: faults for the next requests whatever their prompt, consumed in order.
    ``injected`` counts faults sent; ``answered`` clean replies; ``requests`` all POSTs.
    ``port``: 0 picks a free one; a fixed one lets a "restarted" server keep its URL (the
    server URL is part of a run's settings: another URL is another run)."""

    def __init__(self, *, faults: Sequence[str] = (), retry_after: str = "1",
                 stall: float = 3.0, die_after: int | None = None, port: int = 0) -> None:
        self.faults = list(faults)
        self.die_after = die_after  # clean answers before the server "crashes" for good
        self.dead = False
        self.plan: list[str] = []
        self.retry_after = retry_after
        self.stall = stall
        self.lock = threading.Lock()
        self.seen: dict[str, int] = {}  # prompt -> requests so far
        self.history: dict[str, list[str]] = {}  # prompt -> what each of its requests got
        self.order: dict[str, int] = {}  # prompt -> index of first arrival
        self.injected: Counter[str] = Counter()
        self.answered = 0
        self.requests = 0
        self.images = 0  # image_url parts received (a multimodal client's requests)
        self.times: list[float] = []  # arrival time of every POST (monotonic)
        self.wall: list[float] = []  # the same, as time.time()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                     ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self.send(200, json.dumps({"data": [{"id": "fault-echo"}]}).encode())

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                content = body["messages"][-1]["content"]
                prompt = prompt_text(content)
                if isinstance(content, list):
                    with owner.lock:
                        owner.images += sum(p.get("type") == "image_url" for p in content)
                fault = owner._fault_for(prompt)
                with contextlib.suppress(OSError):  # the client may have given up on us
                    self._answer(fault, prompt)

            def _answer(self, fault: str, prompt: str) -> None:
                error = json.dumps({"error": {"message": f"injected {fault}"}}).encode()
                if fault in ("429", "503"):
                    self.send(int(fault), error, {"Retry-After": owner.retry_after})
                elif fault.isdigit():
                    self.send(int(fault), error)
                elif fault == "timeout":
                    time.sleep(owner.stall)
                    self.send(200, _completion(echo_reply(prompt)))
                elif fault == "badjson":
                    self.send(200, b'{"choices": [{"message": {"content": "0s: Cut')
                elif fault == "nochoices":
                    self.send(200, json.dumps({"object": "error", "detail": "?"}).encode())
                elif fault == "notimestamp":
                    self.send(200, _completion("Sure! This video shows some cooking."))
                elif fault in ("reset", "dead"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                else:
                    self.send(200, _completion(echo_reply(prompt)))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _fault_for(self, prompt: str) -> str:
        with self.lock:
            self.requests += 1
            self.times.append(time.monotonic())
            self.wall.append(time.time())
            n = self.seen.get(prompt, 0)
            self.seen[prompt] = n + 1
            if prompt not in self.order:
                self.order[prompt] = len(self.order)
            if self.dead:
                return "dead"
            if self.plan:
                fault = self.plan.pop(0)
            elif n == 0 and self.faults:
                fault = self.faults[self.order[prompt] % len(self.faults)]
            else:
                fault = "ok"
            self.history.setdefault(prompt, []).append(fault)
            if fault == "ok":
                self.answered += 1
                if self.die_after is not None and self.answered >= self.die_after:
                    self.dead = True  # later requests: reset; new connections: refused
                    threading.Thread(target=self._close_listener, daemon=True).start()
            else:
                self.injected[fault] += 1
            return fault


    def _close_listener(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}]}).encode()


@contextmanager
def fault_server(**kw: Any) -> Iterator[FaultServer]:
    with serving(FaultServer(**kw)) as srv:
        yield srv
