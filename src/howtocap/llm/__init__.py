"""LLM backends behind one interface, built by one factory from a name.

``create("embedded")`` runs the default bundled GGUF in-process with llama.cpp;
``create("openai", url=...)`` talks to any OpenAI-compatible server.
"""

from __future__ import annotations

import os

from howtocap.errors import HowtocapError
from howtocap.llm.base import LLM, GenerationConfig
from howtocap.llm.llamacpp import BUNDLED, QWEN, SMOLLM2, LlamaCppLLM

# Chosen by benchmarks/bench_llm.py (see docs/readme/30-llm.md): Qwen2.5-Coder-0.5B gave a
# parseable, on-topic reply for every block; SmolLM2-135M missed the format or looped.
EMBEDDED_DEFAULT = QWEN
CHOICES = ("embedded", *BUNDLED, "openai", "<path to a .gguf file>")

__all__ = ["CHOICES", "EMBEDDED_DEFAULT", "LLM", "GenerationConfig", "create"]


def create(name: str = "embedded", *, url: str | None = None, model: str | None = None,
           api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 4,
           timeout: float = 120.0, max_retries: int = 3, n_ctx: int = 4096,
           n_threads: int | None = None, n_parallel: int = 1) -> LLM:
    """An LLM from a name: embedded | smollm2 | qwen2.5-coder-0.5b | openai | path/to/x.gguf.

    A ``url`` always selects the OpenAI-compatible client (``name`` may then stay "embedded").
    """
    if url or name == "openai":
        if not url:
            raise HowtocapError("--llm openai needs --llm-url (e.g. http://127.0.0.1:8000/v1)")
        from howtocap.llm.openai import OpenAIChatLLM

        return OpenAIChatLLM(url, model=model, api_key_env=api_key_env, timeout=timeout,
                             concurrency=concurrency, max_retries=max_retries)
    key = EMBEDDED_DEFAULT if name == "embedded" else name
    if key in (SMOLLM2, QWEN) or key.lower().endswith(".gguf") or os.sep in key:
        return LlamaCppLLM(key, n_ctx=n_ctx, n_threads=n_threads, n_parallel=n_parallel)
    raise HowtocapError(f"unknown LLM {name!r}; choose one of: {', '.join(CHOICES)}")
