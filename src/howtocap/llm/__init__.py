"""LLM backends behind one interface, built by one factory from a name.

``create("embedded")`` runs the default bundled GGUF in-process with llama.cpp;
``create("openai", url=...)`` talks to any OpenAI-compatible server; several URLs (or a file
of them) make one pool that keeps every server busy (``llm.pool``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from howtocap.errors import HowtocapError
from howtocap.llm import base
from howtocap.llm.base import LLM, GenerationConfig
from howtocap.llm.llamacpp import LlamaCppLLM
from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY

CHOICES = ("embedded", *REGISTRY, "openai", "<path to a .gguf file>")

__all__ = ["CHOICES", "EMBEDDED_DEFAULT", "LLM", "GenerationConfig", "LLMOptions", "create",
           "from_options"]


class LLMOptions(BaseModel):
    """Which LLM answers, and how hard we push it (the CLI's --llm* flags)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "embedded"
    url: str | list[str] | None = None  # one server, or several replicas of one model
    model: str | None = None
    api_key_env: str = base.API_KEY_ENV
    concurrency: int = Field(base.CONCURRENCY, ge=1, le=256)
    timeout: float = Field(base.TIMEOUT, gt=0)
    max_retries: int = Field(base.MAX_RETRIES, ge=0, le=20)

    @field_validator("url")
    @classmethod
    def _servers(cls, value: str | list[str] | None) -> str | list[str] | None:
        """Files of URLs read, duplicates dropped; one server stays a plain string (so a
        one-server run's fingerprint is what it always was)."""
        if not value:
            return None
        from howtocap.llm.pool import read_urls

        urls = read_urls(value)
        return urls[0] if len(urls) == 1 else urls

    @property
    def in_flight(self) -> int:
        """Requests in flight at most: ``concurrency`` per server."""
        n = 1 if not self.url or isinstance(self.url, str) else len(self.url)
        return self.concurrency * max(1, n)


def from_options(opts: LLMOptions) -> LLM:
    """The LLM the options name (its fields are ``create``'s arguments)."""
    return create(**opts.model_dump())


def create(name: str = "embedded", *, url: str | Sequence[str] | None = None,
           model: str | None = None,
           api_key_env: str | None = base.API_KEY_ENV, concurrency: int = base.CONCURRENCY,
           timeout: float = base.TIMEOUT, max_retries: int = base.MAX_RETRIES,
           n_ctx: int = base.N_CTX,
           n_threads: int | None = None, n_parallel: int = 1) -> LLM:
    """An LLM from a name: embedded | a registered bundled model | openai | path/to/x.gguf. A
    ``url`` always means the OpenAI-compatible client; several (or a file) a ``ServerPool``."""
    if url or name == "openai":
        if not url:
            raise HowtocapError("--llm openai needs --llm-url (e.g. http://127.0.0.1:8000/v1)")
        from howtocap.llm.openai import OpenAIChatLLM
        from howtocap.llm.pool import ServerPool, read_urls

        clients = [OpenAIChatLLM(u, model=model, api_key_env=api_key_env, timeout=timeout,
                                 concurrency=concurrency, max_retries=max_retries)
                   for u in read_urls(url)]
        return clients[0] if len(clients) == 1 else ServerPool(clients)
    key = EMBEDDED_DEFAULT if name == "embedded" else name
    if key in REGISTRY or key.lower().endswith(".gguf") or os.sep in key:
        return LlamaCppLLM(key, n_ctx=n_ctx, n_threads=n_threads, n_parallel=n_parallel)
    raise HowtocapError(f"unknown LLM {name!r}; choose one of: {', '.join(CHOICES)}")
