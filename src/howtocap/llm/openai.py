"""Any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, llama.cpp, Ollama, hosted APIs).

An ``aiohttp.ClientSession`` on the process's one event loop (``engine.runners.event_loop``):
one coroutine per request, at most ``concurrency`` in flight, each on a kept-alive connection;
proxies and TLS roots come from the environment. Why aiohttp and not httpx: a request costs
far less of the driver's CPU (``benchmarks/speed/bench_driver.py``), which decides how many
videos a second one driver feeds to fast servers (vLLM's serving benchmark uses it too).
Each try has a deadline (``timeout``, whole reply included, so a server trickling bytes cannot
hold a slot forever). 5xx, 408/409/425/429, timeouts, connection errors and malformed replies
are retried with exponential backoff plus jitter; ``Retry-After`` (seconds or an HTTP date) is
honoured up to ``retry_after_max``. Other 4xx are the request's fault and are not retried.
After the last try one ``HowtocapError`` line names the server and the problem.

Circuit breaker: a server that is *down* is not one video's problem. At ``breaker_after``
connection failures, timeouts or gateway errors (502/503/504) in a row across all requests, or
when one request spends all its tries failing to connect, every call raises
``ServiceUnavailable`` at once, which stops the run without marking any video failed.

Constraints (``GenerationConfig.constraint_fields``): a server that rejects them (HTTP 400
naming a field, as hosted APIs do) is asked again without them, and they are left out after.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import random
import re
import sys
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

import howtocap.llm.base as base
from howtocap.errors import HowtocapError, ServiceUnavailable, short_reason
from howtocap.llm.base import AsyncChat, GenerationConfig, Messages, Reply, run_sync

RETRY_STATUS = frozenset({408, 409, 425, 429})
GATEWAY_STATUS = frozenset({502, 503, 504})  # "the server behind me is not there"
USER_AGENT = "howtocap"
_JSON = {"Content-Type": "application/json"}
MAX_REPLY_BYTES = 32 << 20  # a reply larger than this is dropped (read as garbled)

if sys.version_info >= (3, 11):
    from asyncio import timeout as _deadline
else:  # pragma: no cover - aiohttp depends on async-timeout on Python 3.10
    from async_timeout import timeout as _deadline


class _Malformed(Exception):
    """A 200 whose body is not a chat completion: the server is up but garbled; try again."""


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


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``, ``ALL_PROXY``, none
    when ``NO_PROXY`` covers its host), as curl and requests read them."""
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            seconds = parsedate_to_datetime(value).timestamp() - (now or time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, seconds) if seconds == seconds else None  # NaN: ignored


def _close_at_exit(ref: weakref.ref[OpenAIChatLLM]) -> None:
    client = ref()
    if client is not None:
        with contextlib.suppress(Exception):  # the loop may be gone already: nothing to keep
            client.close()


class OpenAIChatLLM(AsyncChat):
    """Client for one OpenAI-compatible server; share one per process (any thread may call
    ``chat``/``chat_many``: they run on the one event loop)."""

    def __init__(self, url: str, *, model: str | None = None,
                 api_key_env: str | None = base.API_KEY_ENV, api_key: str | None = None,
                 timeout: float = base.TIMEOUT, concurrency: int = base.CONCURRENCY,
                 max_retries: int = base.MAX_RETRIES,
                 backoff: float = 1.0, backoff_max: float = 30.0,
                 retry_after_max: float = 60.0, breaker_after: int = 8) -> None:
        if concurrency < 1:
            raise HowtocapError(f"--concurrency must be at least 1, got {concurrency}")
        self.endpoint = chat_endpoint(url)
        self.base_url = self.endpoint[: -len("/chat/completions")]
        self._url = URL(self.endpoint)  # parsed once
        self._proxy = proxy_for(self.endpoint)
        key = api_key or (os.environ.get(api_key_env) if api_key_env else None)
        self._headers = {"User-Agent": USER_AGENT,
                         **({"Authorization": f"Bearer {key}"} if key else {})}
        self.timeout, self.concurrency = float(timeout), int(concurrency)
        self.max_retries, self.breaker_after = max(0, int(max_retries)), max(1, int(breaker_after))
        self.backoff, self.backoff_max = float(backoff), float(backoff_max)
        self.retry_after_max = float(retry_after_max)
        self._model, self._model_checked = model, model is not None
        # asyncio primitives bind to the loop that first waits on them: the one event loop; the
        # in-flight limit is a semaphore, the session is made on that loop at the first request
        self._model_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.concurrency)
        self._session: aiohttp.ClientSession | None = None
        atexit.register(_close_at_exit, weakref.ref(self))  # else aiohttp says it was left open
        self.constraints_rejected = False
        # circuit breaker: outages in a row (across requests), bumped epoch on any answer
        self._outages = self._epoch = 0
        self._open: ServiceUnavailable | None = None
        self.stats = {"attempts": 0, "retries": 0, "outages": 0}
        self._prefixes: dict[tuple[Any, ...], str] = {}  # see _encode
        self._tails: dict[tuple[Any, ...], str] = {}

    @property
    def name(self) -> str:
        return f"openai:{self._model}" if self._model else "openai"

    def _open_session(self) -> aiohttp.ClientSession:
        """``concurrency`` kept-alive connections, TLS roots from ``SSL_CERT_FILE``/``_DIR`` else
        certifi's; the proxy is read once (``proxy_for``), not per request as ``trust_env``
        does (a scan of the environment and a look for ``.netrc`` in a thread)."""
        if self._session is None or self._session.closed:
            import ssl

            cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
            if not cafile and not capath:
                import certifi

                cafile = certifi.where()
            tls = ssl.create_default_context(cafile=cafile or None, capath=capath or None)
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self.concurrency, ssl=tls),
                timeout=aiohttp.ClientTimeout(total=None,
                                              sock_connect=min(self.timeout, 10.0)))
        return self._session

    def __del__(self) -> None:
        """A client dropped with its connections open (a run's stage going out of scope)
        closes them on the loop, which holds the session until then."""
        session = self.__dict__.get("_session")
        if session is not None and not session.closed:
            from howtocap.engine.runners import event_loop

            with contextlib.suppress(Exception):  # interpreter exit: the loop may be gone
                asyncio.run_coroutine_threadsafe(session.close(), event_loop())

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def close(self) -> None:
        """Close the kept connections (a later request opens new ones)."""
        if self._session is not None:
            run_sync(self.aclose())

    async def _resolve_model(self) -> str | None:
        """Without ``--llm-model``, ask the server (``GET /models``) which model it serves."""
        if self._model_checked:
            return self._model
        async with self._model_lock:
            if not self._model_checked:
                try:
                    async with self._slots, _deadline(min(self.timeout, 10.0)), \
                            self._open_session().get(self.base_url + "/models",
                                                     proxy=self._proxy) as resp:
                        data = json.loads(await resp.read()).get("data") or []
                        if resp.status == 200 and data and data[0].get("id"):
                            self._model = str(data[0]["id"])
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError,
                        TypeError, IndexError):
                    pass  # the chat request below reports a down server properly
                finally:
                    self._model_checked = True
        return self._model

    # -- circuit breaker ---------------------------------------------------------------------
    # One event loop runs every request, so the counters need no lock.

    def _outage(self, problem: str, first: int | None) -> int:
        """Count one outage; returns the epoch of the request's first outage (``first``, or
        now): while no answer comes in between, the epoch stays the same."""
        self._outages += 1
        self.stats["outages"] += 1
        if self._outages >= self.breaker_after:
            self._trip(problem)
        return self._epoch if first is None else first

    def _trip(self, problem: str) -> None:
        """Open the breaker; the first reason found is kept."""
        if self._open is None:
            self._open = ServiceUnavailable(
                f"LLM server at {self.base_url} unreachable after {self._outages} attempts "
                f"({problem}); nothing lost; re-run to resume")

    def _check_breaker(self) -> None:
        if self._open is not None:
            raise self._open

    # -- requests ----------------------------------------------------------------------------

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Backoff ``backoff * 2**attempt`` with ±50 % jitter (capped), or the server's own
        ``Retry-After`` (capped) plus up to 10 % so waiting clients do not return in step."""
        if retry_after is not None:
            wait = min(retry_after, self.retry_after_max)
            return wait + random.uniform(0.0, 0.1 * wait)
        grown = self.backoff * (2 ** attempt)
        return min(self.backoff_max, grown * (0.5 + random.random()))

    def _content(self, body: bytes) -> str:
        try:
            reply = json.loads(body)
        except ValueError:
            raise _Malformed("returned invalid JSON") from None
        try:
            choice = reply["choices"][0]
            content = choice["message"].get("content")
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise _Malformed("returned a reply without choices[0].message") from None
        return Reply.make(str(content or ""), finish if isinstance(finish, str) else None)

    @staticmethod
    def _error_detail(status: int, body: bytes) -> str:
        detail: object = None
        with contextlib.suppress(ValueError, AttributeError):
            err = json.loads(body).get("error")
            detail = err.get("message") if isinstance(err, dict) else err
        if not detail:
            from http import HTTPStatus  # (not http.client: no hand-made HTTP in src/)

            phrases = {s.value: s.phrase for s in HTTPStatus}
            detail = body.decode("utf-8", "replace") or phrases.get(status, "")
        return " ".join(str(detail).split())[:200]

    def _encode(self, body: dict[str, Any]) -> bytes:
        """``json.dumps(body)``, with the messages before the last (the system prompt and
        few-shot pairs every request of a run repeats, ~half of its bytes) encoded once."""
        msgs = body.get("messages")
        if not isinstance(msgs, list) or len(msgs) < 2:
            return json.dumps(body).encode()
        try:
            key = tuple(tuple(m.items()) for m in msgs[:-1])
            head = self._prefixes.get(key)
        except (AttributeError, TypeError):  # content parts (lists): not cached
            return json.dumps(body).encode()
        if head is None:
            head = json.dumps(msgs[:-1])[1:-1]
            if len(self._prefixes) >= 32:
                self._prefixes.clear()
            self._prefixes[key] = head
        fields = [(k, v) for k, v in body.items() if k != "messages"]
        try:  # the sampling fields and model: the same for most requests of a run (keyed
            # with their types: 0 == 0.0 == False, written "0", "0.0", "false")
            tail = self._tails.get(fields_key := tuple((k, type(v), v) for k, v in fields))
        except TypeError:  # a list or dict among them (stop words): not cached
            fields_key, tail = None, None
        if tail is None:
            rest = json.dumps(dict(fields))
            tail = f", {rest[1:]}" if len(rest) > 2 else "}"
            if fields_key is not None:
                if len(self._tails) >= 32:
                    self._tails.clear()
                self._tails[fields_key] = tail
        return f'{{"messages": [{head}, {json.dumps(msgs[-1])}]{tail}'.encode()

    async def _send(self, body: dict[str, Any], extra: dict[str, object]
                    ) -> tuple[int, Any, bytes, bool]:
        """One POST in a request slot, whose whole reply must arrive within ``timeout``; a
        body past ``MAX_REPLY_BYTES`` comes back empty. ``extra`` (the constraint fields) is
        sent unless the server has refused it meanwhile; the last value says if it was."""
        async with self._slots:
            self._check_breaker()
            self.stats["attempts"] += 1
            constrained = bool(extra) and not self.constraints_rejected
            payload = self._encode({**body, **extra} if constrained else body)
            async with _deadline(self.timeout), self._open_session().post(
                    self._url, data=payload, proxy=self._proxy, headers=_JSON) as resp:
                reply = bytearray()
                async for chunk in resp.content.iter_any():
                    reply += chunk
                    if len(reply) > MAX_REPLY_BYTES:
                        return resp.status, resp.headers, b"", constrained
                return resp.status, resp.headers, bytes(reply), constrained

    async def achat(self, messages: Messages, gen: GenerationConfig) -> str:
        self._check_breaker()
        body: dict[str, Any] = {"messages": list(messages), **gen.request_fields()}
        model = await self._resolve_model()
        if model:
            body["model"] = model
        return await self._post(body, gen.constraint_fields())

    async def _post(self, body: dict[str, Any], extra: dict[str, object]) -> str:
        tries = self.max_retries + 1
        problem = reason = ""  # for the one line: this request's / the breaker's
        epoch: int | None = None  # the breaker's epoch at this request's first outage
        refused = 0  # tries that could not reach the server at all (not slow: absent)
        last: int | None = None  # the breaker's epoch at its latest connection failure
        for attempt in range(tries):
            self._check_breaker()
            retry_after = None
            try:
                status, rheaders, data, constrained = await self._send(body, extra)
            except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as exc:
                problem = reason = f"timed out after {self.timeout:g}s"
                refused += isinstance(exc, aiohttp.ConnectionTimeoutError)
                epoch = self._outage(reason, epoch)
            except aiohttp.ClientError as exc:
                reason = short_reason(exc, 160)
                problem = f"is unreachable ({reason})"
                refused += 1
                last = self._outage(reason, None)
                epoch = last if epoch is None else epoch
            else:
                retried = status in RETRY_STATUS or status >= 500
                if retried:
                    problem = f"returned {status}"
                    retry_after = retry_after_seconds(rheaders.get("Retry-After"))
                if status in GATEWAY_STATUS:
                    reason = f"HTTP {status}"
                    refused += 1
                    epoch = self._outage(reason, epoch)
                else:  # an answer (anything but a gateway error): the server is there
                    self._outages, self._epoch = 0, self._epoch + 1
                    if status == 200:
                        try:
                            return self._content(data)
                        except _Malformed as exc:
                            problem = str(exc)
                    elif not retried:
                        detail = self._error_detail(status, data)
                        if status in (400, 422) and constrained and any(
                                k in detail.lower() for k in (*extra, "extra", "unrecognized",
                                                              "unknown", "not permitted",
                                                              "not allowed")):
                            self.constraints_rejected = True  # ask again without them
                            return await self._post(body, {})
                        raise HowtocapError(f"LLM server {self.endpoint} returned "
                                            f"{status}: {detail}")
            if attempt + 1 < tries:
                self.stats["retries"] += 1
                await asyncio.sleep(self._delay(attempt, retry_after))
        # Every try failed to reach it, and no answer came since the first; ending on a failed
        # connection (refused, or reset as a dying server resets what it still holds) with no
        # answer since is a server gone, even if another request got its answer between this
        # one's tries (the server died meanwhile).
        if refused == tries and (self._epoch == epoch or self._epoch == last):
            self._trip(reason)
        self._check_breaker()
        raise HowtocapError(f"LLM server {self.endpoint} {problem} after {tries} "
                            f"tr{'y' if tries == 1 else 'ies'}")
