"""Any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, llama.cpp, Ollama, hosted APIs).

At most ``concurrency`` requests are in flight per client, across all threads and videos (one
shared semaphore). 429, 408, 5xx, timeouts and connection errors are retried with exponential
backoff plus jitter (``Retry-After`` honoured); after the last try one ``HowtocapError`` line
names the server and the problem, so the runner records it for that video only.

Constrained decoding: the caption grammar goes out as ``grammar`` (llama.cpp server) and
``structured_outputs.regex`` (vLLM); servers that know neither ignore them. A server that
rejects them (HTTP 400 naming a field, as hosted APIs do) is asked again without them, and the
client remembers to leave them out.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from howtocap.errors import HowtocapError
from howtocap.llm.base import GenerationConfig, Messages, Reply, chat_each

RETRY_STATUS = frozenset({408, 409, 425, 429})


class _Rejected(HowtocapError):
    """HTTP 400/422: the request itself was refused (maybe for its constraint fields)."""

    @property
    def detail(self) -> str:
        return str(self).lower()


def chat_endpoint(url: str) -> str:
    """Accept ``http://host:port``, ``…/v1`` or the full ``…/chat/completions`` URL."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise HowtocapError(f"--llm-url must start with http:// or https://, got {url!r}")
    if url.endswith("/chat/completions"):
        return url
    if not re.fullmatch(r"v\d+\w*", urlsplit(url).path.rsplit("/", 1)[-1]):
        url += "/v1"
    return url + "/chat/completions"


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


class OpenAIChatLLM:
    """Client for one OpenAI-compatible server; thread-safe, share one per process."""

    def __init__(self, url: str, *, model: str | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", api_key: str | None = None,
                 timeout: float = 120.0, concurrency: int = 4, max_retries: int = 3,
                 backoff: float = 1.0, backoff_max: float = 30.0) -> None:
        if concurrency < 1:
            raise HowtocapError(f"--concurrency must be at least 1, got {concurrency}")
        self.endpoint = chat_endpoint(url)
        self.base_url = self.endpoint[: -len("/chat/completions")]
        key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.timeout = float(timeout)
        self.concurrency = int(concurrency)
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.backoff_max = float(backoff_max)
        self._model = model
        self._model_checked = model is not None
        self._model_lock = threading.Lock()
        self._sem = threading.BoundedSemaphore(self.concurrency)
        self.constraints_rejected = False
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            limits=httpx.Limits(max_connections=self.concurrency * 2,
                                max_keepalive_connections=self.concurrency))

    @property
    def name(self) -> str:
        return f"openai:{self._model}" if self._model else "openai"

    def close(self) -> None:
        self._client.close()

    def _resolve_model(self) -> str | None:
        """Without ``--llm-model``, ask the server (``GET /models``) which model it serves."""
        with self._model_lock:
            if not self._model_checked:
                self._model_checked = True
                try:
                    r = self._client.get(f"{self.base_url}/models", headers=self._headers,
                                         timeout=min(self.timeout, 10.0))
                    data = r.json().get("data") or []
                    if r.status_code == 200 and data and data[0].get("id"):
                        self._model = str(data[0]["id"])
                except (httpx.HTTPError, ValueError, AttributeError, TypeError):
                    pass  # the chat request below reports a down server properly
            return self._model

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        base = self.backoff * (2 ** attempt)
        return min(self.backoff_max, base * (0.5 + random.random()))

    def _content(self, r: httpx.Response) -> str:
        try:
            choice = r.json()["choices"][0]
            content = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise HowtocapError(f"LLM server {self.endpoint} returned a reply without "
                                "choices[0].message") from None
        return Reply.make(str(content or ""), choice.get("finish_reason"))

    def _error_detail(self, r: httpx.Response) -> str:
        try:
            err = r.json().get("error")
            detail = err.get("message") if isinstance(err, dict) else err
        except (ValueError, AttributeError):
            detail = None
        return " ".join(str(detail or r.text or r.reason_phrase).split())[:200]

    def chat(self, messages: Messages, gen: GenerationConfig) -> str:
        body: dict[str, Any] = {"messages": list(messages), **gen.request_fields()}
        model = self._resolve_model()
        if model:
            body["model"] = model
        extra = {} if self.constraints_rejected else gen.constraint_fields()
        if not extra:
            return self._post(body)
        try:
            return self._post({**body, **extra})
        except _Rejected as exc:
            if not any(k in exc.detail for k in (*extra, "extra", "unrecognized", "unknown",
                                                 "not permitted", "not allowed")):
                raise HowtocapError(str(exc)) from None
            self.constraints_rejected = True
            return self._post(body)

    def _post(self, body: dict[str, Any]) -> str:
        payload = json.dumps(body)
        headers = {"Content-Type": "application/json", **self._headers}
        tries = self.max_retries + 1
        problem = ""
        for attempt in range(tries):
            retry_after = None
            with self._sem:
                try:
                    r = self._client.post(self.endpoint, content=payload, headers=headers)
                except httpx.TimeoutException:
                    problem = f"timed out after {self.timeout:g}s"
                except httpx.TransportError as exc:
                    problem = f"is unreachable ({_short(exc)})"
                else:
                    if r.status_code == 200:
                        return self._content(r)
                    if r.status_code in RETRY_STATUS or r.status_code >= 500:
                        problem = f"returned {r.status_code}"
                        retry_after = _retry_after(r.headers.get("Retry-After"))
                    elif r.status_code in (400, 422):
                        raise _Rejected(f"LLM server {self.endpoint} returned "
                                        f"{r.status_code}: {self._error_detail(r)}")
                    else:
                        raise HowtocapError(f"LLM server {self.endpoint} returned "
                                            f"{r.status_code}: {self._error_detail(r)}")
            if attempt + 1 < tries:
                time.sleep(self._delay(attempt, retry_after))
        raise HowtocapError(f"LLM server {self.endpoint} {problem} after {tries} "
                            f"tr{'y' if tries == 1 else 'ies'}")

    def chat_many(self, batch: Sequence[Messages],
                  gen: GenerationConfig) -> list[str | Exception]:
        return chat_each(self.chat, batch, gen, workers=self.concurrency)
