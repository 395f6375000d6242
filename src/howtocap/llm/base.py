"""The one small interface every LLM backend implements, and its generation settings."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

# A message's content is text, or a list of parts (text, image_url) for a multimodal server.
Messages = list[dict[str, Any]]


class GenerationConfig(BaseModel):
    """Sampling settings sent with every request.

    Greedy decoding (temperature 0) by default so a re-run gives the same captions and small
    models stay on format; the paper sampled with temperature 0.7 (set ``temperature=0.7``
    to reproduce that).
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, ge=1)
    stop: list[str] = Field(default_factory=list)
    seed: int | None = 0
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)  # > 0 curbs small models' loops
    # Constrained decoding: a GBNF grammar (llama.cpp) and the same language as a regex (vLLM).
    grammar: str | None = None
    regex: str | None = None

    def request_fields(self) -> dict[str, object]:
        """The OpenAI chat-completions sampling fields (constraints: ``constraint_fields``)."""
        body: dict[str, object] = {"temperature": self.temperature, "top_p": self.top_p,
                                   "max_tokens": self.max_tokens}
        if self.stop:
            body["stop"] = list(self.stop)
        if self.seed is not None:
            body["seed"] = self.seed
        if self.frequency_penalty:
            body["frequency_penalty"] = self.frequency_penalty
        return body

    def constraint_fields(self) -> dict[str, object]:
        """The request fields servers use to constrain output: ``grammar`` (llama.cpp server
        and xllamacpp) and ``structured_outputs.regex`` (vLLM >= 0.10); servers that know
        neither ignore them (or reject them: see the OpenAI client)."""
        body: dict[str, object] = {}
        if self.grammar:
            body["grammar"] = self.grammar
        if self.regex:
            body["structured_outputs"] = {"regex": self.regex}
        return body

    def retry(self) -> GenerationConfig:
        """Settings for a second try: greedy decoding would repeat itself, so sample (the
        paper's temperature 0.7) with another seed."""
        return self.model_copy(update={"temperature": max(self.temperature, 0.7),
                                       "seed": (self.seed or 0) + 1})


class Reply(str):
    """A reply's text that also remembers why generation stopped ("stop", "length", …)."""

    finish_reason: str | None = None

    @classmethod
    def make(cls, text: str, finish_reason: str | None) -> Reply:
        out = cls(text)
        out.finish_reason = finish_reason
        return out


def drop_cut_line(reply: str) -> tuple[str, bool]:
    """A reply cut by max_tokens ends mid-sentence: drop that last line (True if dropped)."""
    if getattr(reply, "finish_reason", None) != "length":
        return str(reply), False
    lines = str(reply).rstrip().split("\n")
    return "\n".join(lines[:-1]), True


@runtime_checkable
class LLM(Protocol):
    """A chat model. ``chat_many`` returns, per request, the reply or the exception it raised."""

    name: str

    def chat(self, messages: Messages, gen: GenerationConfig) -> str: ...

    def chat_many(self, batch: Sequence[Messages],
                  gen: GenerationConfig) -> list[str | Exception]: ...


def _one(chat: Callable[[Messages, GenerationConfig], str], msgs: Messages,
         gen: GenerationConfig) -> str | Exception:
    try:
        return chat(msgs, gen)
    except Exception as exc:  # returned, not raised: the caller decides per video
        return exc


def chat_each(chat: Callable[[Messages, GenerationConfig], str], batch: Sequence[Messages],
              gen: GenerationConfig, workers: int = 1) -> list[str | Exception]:
    """Every request's reply, or the exception it raised (the caller decides per video);
    ``workers`` requests in flight at once, on a pool made for this call (a client that
    serves many videos keeps a ``Fanout`` instead)."""
    if workers <= 1 or len(batch) <= 1:
        return [_one(chat, m, gen) for m in batch]
    with ThreadPoolExecutor(max_workers=min(workers, len(batch))) as pool:
        return list(pool.map(lambda m: _one(chat, m, gen), batch))


class Fanout:
    """``chat_each`` on one thread pool kept for the client's life; the calling thread sends
    the first request itself, and hands the others to the pool only while it has threads to
    spare.

    Why one pool: a pool made per ``chat_many`` call (one per video) starts and joins threads
    for every video, and ``concurrent.futures`` starts them under one process-wide lock; with
    32 videos in flight over HTTP, threads waiting on that lock were most of the driver's wall
    time (py-spy). Why only spare threads: when ``workers`` requests are already out (32
    videos, each sending one), a request handed over only waits for a slot in another thread
    and costs two hand-offs (submit, result) where the caller could send it next itself; a
    video with many blocks and no other work still fans out across the pool. Pool threads
    only send requests and never wait on the pool, so sharing it cannot deadlock; the
    client's own limit (its request slots) still bounds what is in flight.

    Why not also when some callers are between requests: with as many live calling threads
    as ``workers`` (the local runner's video threads), those threads fill the slots
    themselves as they come back; handing their requests over only added two thread
    hand-offs to a third of a text-only run's requests (a video thread parsing a reply left
    a slot "spare" for a moment). So the pool is used only while fewer threads than
    ``workers`` call this fanout (a few videos, or a caller of its own).
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._busy = 0  # requests being sent: by callers (one each) and by pool threads
        self._callers: set[threading.Thread] = set()  # threads that called map (pruned)

    def _get(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                            thread_name_prefix="howtocap-llm")
        return self._pool

    def _pooled(self, chat: Callable[[Messages, GenerationConfig], str], msgs: Messages,
                gen: GenerationConfig) -> str | Exception:
        try:
            return _one(chat, msgs, gen)
        finally:
            with self._lock:
                self._busy -= 1

    def map(self, chat: Callable[[Messages, GenerationConfig], str],
            batch: Sequence[Messages], gen: GenerationConfig) -> list[str | Exception]:
        """Replies (or exceptions) in ``batch``'s order."""
        if self.workers <= 1 or len(batch) <= 1:
            return [_one(chat, m, gen) for m in batch]
        me = threading.current_thread()
        with self._lock:  # the caller sends one; the pool takes what spare threads there are
            self._callers.add(me)
            k = max(0, min(len(batch) - 1, self.workers - self._busy - 1))
            if k and len(self._callers) >= self.workers:  # enough callers, if all alive
                self._callers = {t for t in self._callers if t.is_alive()}
                if len(self._callers) >= self.workers:
                    k = 0
            self._busy += 1 + k
            pool = self._get() if k else None
        try:
            rest = [pool.submit(self._pooled, chat, m, gen) for m in batch[1:1 + k]] \
                if pool is not None else []
            mine = [_one(chat, m, gen) for m in (batch[0], *batch[1 + k:])]
        finally:
            with self._lock:
                self._busy -= 1
        return [mine[0], *(f.result() for f in rest), *mine[1:]]

    def close(self) -> None:
        """Let the pool's threads end (a later ``map`` starts a new pool)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


# A request as a generator of what it needs: ``(client, payload)`` = send this POST in one of
# the client's request slots and resume me with ``(status, headers, body)`` or throw the
# ``TransportError``; a number = wait that many seconds (a backoff); an ``Admit`` = wait for
# one of a pool's places (on the blocking path the caller's threads are those). Its return
# value is the reply. One copy of the retry, breaker and constraint logic serves the blocking path
# (``run_steps``) and the one-thread event loop (``llm.loop``).
Steps = Generator[Any, Any, str]


class Admit:
    """A step: wait until fewer than ``limit`` of ``owner``'s requests are under way (a
    pool picks its server only then, so that the least busy one is picked)."""

    __slots__ = ("owner", "limit")

    def __init__(self, owner: object, limit: int) -> None:
        self.owner, self.limit = owner, limit
