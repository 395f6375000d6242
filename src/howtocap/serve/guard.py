"""What stands between the network and the app: who may listen where, an API key, request
limits, a per-client rate limit and Prometheus metrics, in one plain ASGI middleware (no
``BaseHTTPMiddleware``, no threads): the search takes well under a millisecond and a heavier
wrapper would cost more than it (``benchmarks/speed/bench_serve.py``)."""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import ipaddress
import json
import math
import os
import socket
import time
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from howtocap.errors import HowtocapError
from howtocap.serve.defaults import MAX_BODY_BYTES, RATE_LIMIT

MIN_KEY_CHARS = 16
OPEN_PATHS = frozenset({"/healthz"})  # no key, no rate limit: load balancers poll these
UNLIMITED_PATHS = frozenset({"/healthz", "/metrics"})  # no rate limit (still need the key)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)
MAX_BUCKETS = 10_000  # clients remembered by the rate limiter before idle ones are dropped


def is_loopback(host: str) -> bool:
    """True if every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    name = host.strip("[]")
    with contextlib.suppress(ValueError):  # not an address: a name to resolve
        return ipaddress.ip_address(name).is_loopback
    try:
        addrs = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def check_listen(host: str, *, api_key: str | None, public: bool) -> None:
    """Refuse to expose the server beyond this machine unless the user chose how."""
    if api_key is not None and len(api_key) < MIN_KEY_CHARS:
        raise HowtocapError(
            f"API key too short ({len(api_key)} characters, need {MIN_KEY_CHARS}+): make one "
            "with `python -c \"import secrets; print(secrets.token_urlsafe(32))\"`")
    if not (is_loopback(host) or api_key is not None or public):
        raise HowtocapError(
            f"refusing to listen on {host} (not a loopback address) without an API key: set "
            "--api-key-env VAR (clients then send the key) or pass --public to serve anyone "
            "who can reach this machine")


def api_key_from_env(var: str) -> str:
    key = os.environ.get(var, "").strip()
    if not key:
        raise HowtocapError(f"--api-key-env {var}: environment variable {var} is not set "
                            "or empty")
    return key


@dataclass
class Limits:
    """The guard's settings (``0`` turns a limit off)."""

    api_key: str | None = None
    rate_per_s: float = RATE_LIMIT  # sustained requests per second per client
    burst: int | None = None  # requests a client may send at once (None: 3 s of the rate)
    max_body_bytes: int = MAX_BODY_BYTES
    max_url_bytes: int = 4_096

    def __post_init__(self) -> None:
        if self.burst is None:
            self.burst = max(10, round(3 * self.rate_per_s))


class _BodyTooLarge(HTTPException):
    """Raised from ``receive``; an HTTPException so the framework's body parsing passes it on
    as a 413 instead of calling it a malformed body."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes",
                         headers={"connection": "close"})


class Metrics:
    """The app's own Prometheus registry (not the global one, so several apps can coexist in
    one process, e.g. in tests)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "howtocap_http_requests", "HTTP requests answered, by route template and status.",
            ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram(
            "howtocap_http_request_duration_seconds",
            "Time from request start to the last byte of the response, by route.",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.search = Histogram(
            "howtocap_search_duration_seconds",
            "Time of the index search itself (query embedding + FAISS + hit rows), by `by`.",
            ["by"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("howtocap_http_requests_in_flight",
                               "Requests being answered now.", registry=self.registry)
        self.clips = Gauge("howtocap_index_clips", "Clips in the served index.",
                           registry=self.registry)
        # label lookups are cached: prometheus_client's .labels() is the costly part
        self._requests = functools.cache(self.requests.labels)
        self._latency = functools.cache(self.latency.labels)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests(method, route, str(status)).inc()
        self._latency(route).observe(seconds)


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


def presented_key(scope: Scope) -> bytes | None:
    """The key a request carries: ``Authorization: Bearer K``, ``X-API-Key: K`` or HTTP Basic
    with K as the password (so a browser can log in to the web page with its own dialog)."""
    key = _header(scope, b"x-api-key")
    if key is not None:
        return key.strip()
    scheme, _, value = (_header(scope, b"authorization") or b"").strip().partition(b" ")
    if scheme.lower() == b"bearer":
        return value.strip()
    if scheme.lower() == b"basic":
        with contextlib.suppress(ValueError):  # not base64
            return base64.b64decode(value.strip(), validate=True).partition(b":")[2]
    return None


class Guard:
    """ASGI middleware: metrics (outermost, so refusals are counted too), then the rate
    limit, the API key, URL and body size limits, then the app."""

    def __init__(self, app: ASGIApp, limits: Limits, metrics: Metrics) -> None:
        self.app = app
        self.limits = limits
        self.metrics = metrics
        self.key = limits.api_key.encode() if limits.api_key else None
        self.buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, last time)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status: int | None = None  # until the response starts

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            refusal = self.refuse(scope)
            if refusal is not None:
                await self.respond(send_wrapper, *refusal)
                return
            limit = self.limits.max_body_bytes
            if limit and scope["method"] in ("POST", "PUT", "PATCH"):
                receive = self.counting(receive, limit)
            try:
                await self.app(scope, receive, send_wrapper)
            except _BodyTooLarge as exc:
                if status is None:
                    await self.respond(send_wrapper, 413, exc.detail, [(b"connection", b"close")])
        finally:
            self.metrics.in_flight.dec()
            label = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.observe(method, label, status or 500, time.perf_counter() - t0)

    def refuse(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """``(status, detail, headers)`` when the request is turned away before the app."""
        path = scope["path"]
        if path in OPEN_PATHS:
            return None
        lim = self.limits
        if lim.rate_per_s > 0 and path not in UNLIMITED_PATHS and \
                (wait := self.take_token(scope)) > 0:
            secs = max(1, math.ceil(wait))
            return 429, f"too many requests: at most {lim.rate_per_s:g}/s per client " \
                        f"(burst {lim.burst}); retry in {secs} s", \
                [(b"retry-after", str(secs).encode())]
        if self.key is not None and not hmac.compare_digest(presented_key(scope) or b"", self.key):
            return 401, "missing or wrong API key (send `Authorization: Bearer KEY` or " \
                        "`X-API-Key: KEY`)", \
                [(b"www-authenticate", b'Basic realm="howtocap", charset="UTF-8"')]
        if lim.max_url_bytes and len(scope.get("raw_path") or b"") + \
                len(scope.get("query_string") or b"") > lim.max_url_bytes:
            return 414, f"URL longer than {lim.max_url_bytes} bytes", []
        if lim.max_body_bytes and (length := _header(scope, b"content-length")) is not None:
            try:
                n = int(length)
            except ValueError:
                return 400, "malformed Content-Length header", []
            if n > lim.max_body_bytes:
                # close: the client may still be sending a body nobody will read
                return 413, f"request body larger than {lim.max_body_bytes} bytes", \
                    [(b"connection", b"close")]
        return None

    def take_token(self, scope: Scope) -> float:
        """Token bucket per client address: seconds to wait, 0 if the request may go now.
        (Runs on the event loop only, so it needs no lock.)"""
        who = (scope.get("client") or ("?",))[0]
        now = time.monotonic()
        rate, burst = self.limits.rate_per_s, max(1, self.limits.burst)
        tokens, last = self.buckets.get(who, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens < 1.0:
            self.buckets[who] = (tokens, now)
            return (1.0 - tokens) / rate
        self.buckets[who] = (tokens - 1.0, now)
        if len(self.buckets) > MAX_BUCKETS:  # forget the clients whose bucket is full again
            self.buckets = {k: v for k, v in self.buckets.items()
                            if v[0] + (now - v[1]) * rate < burst}
        return 0.0

    @staticmethod
    def counting(receive: Receive, limit: int) -> Receive:
        """``receive`` that stops a body (e.g. chunked, without Content-Length) at ``limit``."""
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge(limit)
            return message

        return wrapped

    @staticmethod
    async def respond(send: Send, status: int, detail: str,
                      headers: list[tuple[bytes, bytes]]) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})
