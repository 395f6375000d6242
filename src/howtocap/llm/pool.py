"""Several OpenAI-compatible servers of one model (vLLM replicas) as one LLM.

A million-video job is served by many replicas; one driver should keep all of them busy rather
than run one process per server and merge. Each request goes to the live server with the fewest
requests outstanding (ties rotate, so instant servers share evenly). Every server keeps its own
client: its own retries, ``concurrency`` limit and circuit breaker. When a server's breaker
opens, the server is dropped and the request is sent again to another, so a dying replica
costs time, never a video; only when every server is down does ``ServiceUnavailable`` stop the
run (exit 75, nothing marked failed).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm.base import Admit, Fanout, GenerationConfig, Messages, Steps
from howtocap.llm.openai import OpenAIChatLLM, run_steps


def read_urls(values: str | Sequence[str]) -> list[str]:
    """Server URLs from ``--llm-url`` values: each a URL, or a file with one URL a line
    (blank lines and ``#`` comments skipped). Duplicates are dropped, order kept."""
    out: list[str] = []
    for value in [values] if isinstance(values, str) else values:
        value = value.strip()
        if value.startswith(("http://", "https://")) or not Path(value).is_file():
            out.append(value)
            continue
        lines = [ln.split("#", 1)[0].strip() for ln in Path(value).read_text().splitlines()]
        found = [ln for ln in lines if ln]
        if not found:
            raise HowtocapError(f"{value}: no server URL in this file (one URL a line)")
        out += found
    return list(dict.fromkeys(u.rstrip("/") for u in out))


class ServerPool:
    """One LLM over ``clients``: least-outstanding routing, a dead server's work re-sent."""

    def __init__(self, clients: Sequence[OpenAIChatLLM]) -> None:
        if not clients:
            raise HowtocapError("an LLM server pool needs at least one server")
        self.clients = list(clients)
        self.concurrency = sum(c.concurrency for c in self.clients)
        self._fanout = Fanout(self.concurrency)
        self._admit = Admit(self, self.concurrency)
        self._lock = threading.Lock()
        self._outstanding = [0] * len(self.clients)
        self._down: dict[int, ServiceUnavailable] = {}
        self._turn = 0
        self.served = [0] * len(self.clients)  # answers per server
        self.resent = 0  # requests sent again because their server went down

    @property
    def name(self) -> str:
        return self.clients[0].name

    @property
    def stats(self) -> dict[str, int]:
        total = {"attempts": 0, "retries": 0, "outages": 0}
        for c in self.clients:
            for k in total:
                total[k] += c.stats.get(k, 0)
        return {**total, "resent": self.resent, "servers_down": len(self._down)}

    def close(self) -> None:
        self._fanout.close()
        for c in self.clients:
            c.close()

    def _pick(self) -> int:
        with self._lock:
            n = len(self.clients)
            alive = [(self._turn + k) % n for k in range(n)
                     if (self._turn + k) % n not in self._down]
            if not alive:
                why = "; ".join(f"{self.clients[i].base_url}: {e}" for i, e in
                                sorted(self._down.items()))
                raise ServiceUnavailable(f"all {n} LLM servers are down ({why})")
            best = min(alive, key=lambda i: self._outstanding[i])  # first of a tie: rotated
            self._turn = (best + 1) % n
            self._outstanding[best] += 1
            return best

    @staticmethod
    def chat_loop() -> Any:
        """A new ``llm.loop.ChatLoop`` to send requests of this LLM (when ``loop_ok``)."""
        from howtocap.llm.loop import ChatLoop

        return ChatLoop()

    @property
    def loop_ok(self) -> bool:
        """Every server can be reached by ``llm.loop.ChatLoop`` (plain http, no proxy)."""
        return all(c.loop_ok for c in self.clients)

    def chat(self, messages: Messages, gen: GenerationConfig) -> str:
        return run_steps(self.chat_steps(messages, gen))

    def chat_steps(self, messages: Messages, gen: GenerationConfig) -> Steps:
        """One request as steps (``llm.openai.Steps``), sent to the least busy live server;
        a server that goes down meanwhile gets it sent again to another."""
        yield self._admit
        while True:
            i = self._pick()
            try:
                reply = yield from self.clients[i].chat_steps(messages, gen)
            except ServiceUnavailable as exc:
                with self._lock:
                    self._down.setdefault(i, exc)
                    self.resent += 1
                continue
            finally:
                with self._lock:
                    self._outstanding[i] -= 1
            with self._lock:
                self.served[i] += 1
            return reply

    def chat_many(self, batch: Sequence[Messages],
                  gen: GenerationConfig) -> list[str | Exception]:
        return self._fanout.map(self.chat, batch, gen)
