"""The one small interface every LLM backend implements, and its generation settings."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from howtocap.engine.runners import event_loop

# A message's content is text, or a list of parts (text, image_url) for a multimodal server.
Messages = list[dict[str, Any]]
T = TypeVar("T")

# An OpenAI-compatible server's client, by default (``LLMOptions``, ``create``, the client)
API_KEY_ENV = "OPENAI_API_KEY"  # the environment variable holding the key
CONCURRENCY = 4  # requests in flight per server
TIMEOUT = 120.0  # seconds a whole reply may take
MAX_RETRIES = 3  # retries of a transient failure
N_CTX = 4096  # an embedded model's context per slot (tokens)


class GenerationConfig(BaseModel):
    """Sampling settings sent with every request: greedy by default, so a re-run gives the same
    captions and small models stay on format (the paper sampled at temperature 0.7)."""

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
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                **({"stop": list(self.stop)} if self.stop else {}),
                **({"seed": self.seed} if self.seed is not None else {}),
                **({"frequency_penalty": self.frequency_penalty} if self.frequency_penalty else {})}

    def constraint_fields(self) -> dict[str, object]:
        """The request fields servers use to constrain output: ``grammar`` (llama.cpp server
        and xllamacpp) and ``structured_outputs.regex`` (vLLM >= 0.10); servers that know
        neither ignore them (or reject them: see the OpenAI client)."""
        return {**({"grammar": self.grammar} if self.grammar else {}),
                **({"structured_outputs": {"regex": self.regex}} if self.regex else {})}

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
    ``workers`` requests in flight at once, on a pool made for this call."""
    if workers <= 1 or len(batch) <= 1:
        return [_one(chat, m, gen) for m in batch]
    with ThreadPoolExecutor(max_workers=min(workers, len(batch))) as pool:
        return list(pool.map(lambda m: _one(chat, m, gen), batch))


def is_blocking(llm: object) -> bool:
    """True for a model called in place (the embedded one, a caller's object): no
    ``achat_many`` to await."""
    return getattr(llm, "achat_many", None) is None


async def ask(llm: LLM, batch: Sequence[Messages], gen: GenerationConfig, *,
              inline: bool = False) -> list[str | Exception]:
    """Every request's reply or exception, awaited: an async client's own ``achat_many``,
    else the blocking ``chat_many`` on a thread (the embedded model, a caller's object), or
    in place with ``inline`` (the caller runs without an event loop: ``run_inline``)."""
    many = getattr(llm, "achat_many", None)
    if many is not None:
        return await many(batch, gen)
    if inline:
        return llm.chat_many(batch, gen)
    return await asyncio.to_thread(llm.chat_many, batch, gen)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``event_loop()`` and wait for its value (from any other thread)."""
    loop = event_loop()
    if threading.current_thread().name == "howtocap-event-loop":
        coro.close()
        raise RuntimeError("run_sync called on the event loop: await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on this thread, with no event loop: for a coroutine whose every
    await returns at once (a blocking model called in place), where ``run_sync``'s two thread
    hops a call would be most of the cost. One that would wait raises ``RuntimeError``."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("run_inline: the coroutine waited; run it with run_sync")


class AsyncChat:
    """An LLM written as ``async def achat``: one coroutine per request, gathered per batch. The
    blocking ``chat``/``chat_many`` run it on the process's one event loop (``run_sync``), so
    every thread shares the client's connections and in-flight limit."""

    name: str

    async def achat(self, messages: Messages, gen: GenerationConfig) -> str:
        raise NotImplementedError

    async def achat_many(self, batch: Sequence[Messages],
                         gen: GenerationConfig) -> list[str | Exception]:
        return await asyncio.gather(*(self.achat(m, gen) for m in batch),
                                    return_exceptions=True)  # type: ignore[arg-type]

    def chat(self, messages: Messages, gen: GenerationConfig) -> str:
        return run_sync(self.achat(messages, gen))

    def chat_many(self, batch: Sequence[Messages],
                  gen: GenerationConfig) -> list[str | Exception]:
        return run_sync(self.achat_many(batch, gen))
