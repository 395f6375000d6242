"""Several OpenAI-compatible servers of one model (vLLM replicas) as one LLM, so one driver keeps
them all busy. A request goes to the live server with the fewest outstanding (ties rotate); each
server's own client has its retries, ``concurrency`` and circuit breaker. A server whose breaker
opens is dropped and its requests re-sent to another (a dying replica costs time, never a
video); only when all are down does ``ServiceUnavailable`` stop the run (exit 75).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm.base import AsyncChat, GenerationConfig, Messages
from howtocap.llm.openai import OpenAIChatLLM


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


class ServerPool(AsyncChat):
    """One LLM over ``clients``: least-outstanding routing, a dead server's work re-sent."""

    def __init__(self, clients: Sequence[OpenAIChatLLM]) -> None:
        if not clients:
            raise HowtocapError("an LLM server pool needs at least one server")
        self.clients = list(clients)
        self.concurrency = sum(c.concurrency for c in self.clients)
        # a request picks its server only once it may be sent, so the least busy is picked
        self._admit = asyncio.Semaphore(self.concurrency)
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
        total = {k: sum(c.stats.get(k, 0) for c in self.clients)
                 for k in ("attempts", "retries", "outages")}
        return {**total, "resent": self.resent, "servers_down": len(self._down)}

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def _pick(self) -> int:
        n = len(self.clients)
        alive = [(self._turn + k) % n for k in range(n) if (self._turn + k) % n not in self._down]
        if not alive:
            why = "; ".join(f"{self.clients[i].base_url}: {e}" for i, e in
                            sorted(self._down.items()))
            raise ServiceUnavailable(f"all {n} LLM servers are down ({why})")
        best = min(alive, key=lambda i: self._outstanding[i])  # first of a tie: rotated
        self._turn = (best + 1) % n
        self._outstanding[best] += 1
        return best

    async def achat(self, messages: Messages, gen: GenerationConfig) -> str:
        """Sent to the least busy live server; a server that goes down meanwhile gets it
        sent again to another."""
        async with self._admit:
            while True:
                i = self._pick()
                try:
                    reply = await self.clients[i].achat(messages, gen)
                except ServiceUnavailable as exc:
                    self._down.setdefault(i, exc)
                    self.resent += 1
                    continue
                finally:
                    self._outstanding[i] -= 1
                self.served[i] += 1
                return reply
