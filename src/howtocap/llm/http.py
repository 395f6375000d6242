"""A small keep-alive HTTP/1.1 client on ``http.client`` for the LLM requests' hot path.

Why not httpx: a text-only run sends a few requests per video, a million videos; httpx spent
about 0.38 ms of CPU on each (its transport alone 0.24 ms), ``http.client`` 0.08 ms, and
with 32 threads in flight every extra ms held the GIL from the others (benchmarks/
bench_driver.py). What httpx gave the users is kept: proxies from the environment
(``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``, ``NO_PROXY``; https through a CONNECT tunnel),
TLS verified against certifi's roots (or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), a connect
timeout and a read timeout, kept-alive connections, and a stale kept connection (closed by
the server while idle) is noticed before it is used, as httpcore did.
"""

from __future__ import annotations

import base64
import http.client
import os
import select
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 16


class TransportError(Exception):
    """The request did not get a whole response (connection, protocol or timeout)."""


class ConnectError(TransportError):
    """No connection could be made: nothing listens there (or the proxy/TLS refused)."""


class TimeoutException(TransportError):
    """A connect or read took longer than allowed."""


class ConnectTimeout(TimeoutException):
    """Connecting took longer than the connect timeout."""


class ReadTimeout(TimeoutException):
    """The response did not come in time."""


class Headers:
    """Response headers, looked up case-insensitively (the last value of a repeated one)."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._d = {k.lower(): v for k, v in items}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._d.get(key.lower(), default)


def ssl_context() -> ssl.SSLContext:
    """Verified TLS as httpx made it: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else
    certifi's roots (the system's when certifi is missing)."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi is a dependency
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def proxy_for(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL the environment names for ``url`` (``<scheme>_proxy``, else
    ``all_proxy``; none for a host ``no_proxy`` matches), or None."""
    proxies = urllib.request.getproxies_environment() if env is None else \
        {k.lower()[:-6]: v for k, v in env.items() if k.lower().endswith("_proxy") and v}
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    if urllib.request.proxy_bypass_environment(parts.netloc, proxies):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class _OneSend:
    """Request head and body in one ``send``: ``http.client`` writes them apart, two
    syscalls and two TCP segments a request for the server to read (with TCP_NODELAY)."""

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        buffer = getattr(self, "_buffer", None)
        if not isinstance(message_body, bytes) or encode_chunked or not isinstance(buffer, list):
            super()._send_output(message_body, encode_chunked)  # type: ignore[misc]
            return
        buffer.extend((b"", b""))
        head = b"\r\n".join(buffer)
        del buffer[:]
        self.send(head + message_body)  # type: ignore[attr-defined]


class _HTTPConnection(_OneSend, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_OneSend, http.client.HTTPSConnection):
    pass


def _socket_gone(sock: socket.socket | None) -> bool:
    """An idle kept connection that is readable was closed (or sent junk) by the server."""
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Origin:
    """Kept-alive connections to one URL's server (direct or through its proxy)."""

    def __init__(self, url: str, *, timeout: float, connect_timeout: float,
                 max_idle: int, env: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max(1, max_idle)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        self.proxy = proxy_for(url, env)
        self._proxy_headers: dict[str, str] = {}
        self._absolute = False  # http through a proxy: the request line holds the whole URL
        self._netloc = parts.netloc.rpartition("@")[2]
        if self.proxy:
            p = urlsplit(self.proxy)
            if p.scheme not in ("http", "https") or not p.hostname:
                raise ValueError(f"unsupported proxy {self.proxy!r} (http:// or https://)")
            if p.username:
                cred = f"{unquote(p.username)}:{unquote(p.password or '')}"
                self._proxy_headers["Proxy-Authorization"] = \
                    "Basic " + base64.b64encode(cred.encode()).decode()
            self._proxy_at = (p.hostname, p.port or (443 if p.scheme == "https" else 80))
            self._proxy_tls = p.scheme == "https"
            if self.https and self._proxy_tls:
                raise ValueError("an https:// proxy for an https:// server is not supported; "
                                 "use an http:// proxy (it tunnels TLS with CONNECT)")
            self._absolute = not self.https

    def _context(self) -> ssl.SSLContext:
        if self._ctx is None:
            self._ctx = ssl_context()
        return self._ctx

    def _new(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.proxy and self.https:  # TLS to the server inside a CONNECT tunnel
            conn = _HTTPSConnection(*self._proxy_at, timeout=self.connect_timeout,
                                    context=self._context())
            conn.set_tunnel(self.host, self.port, headers=self._proxy_headers)
        elif self.proxy:
            cls = _HTTPSConnection if self._proxy_tls else _HTTPConnection
            kw: dict[str, Any] = {"context": self._context()} if self._proxy_tls else {}
            conn = cls(*self._proxy_at, timeout=self.connect_timeout, **kw)
        elif self.https:
            conn = _HTTPSConnection(self.host, self.port, timeout=self.connect_timeout,
                                    context=self._context())
        else:
            conn = _HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(f"connect timed out ({exc})") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ConnectError(getattr(exc, "strerror", None) or str(exc)
                               or type(exc).__name__) from None
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A kept connection still open (True), else a new one (False)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(), False
            if not _socket_gone(conn.sock):
                return conn, True
            conn.close()

    def _keep(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                deadline: float | None = None, max_bytes: int | None = None,
                timeout: float | None = None) -> tuple[int, Headers, bytes]:
        """Status, headers and body of one request. The body is read in chunks; past the
        monotonic ``deadline`` the read stops with ``ReadTimeout``; past ``max_bytes`` the
        body is returned empty (and the connection dropped)."""
        conn, _ = self._take()
        read_timeout = self.timeout if timeout is None else timeout
        target = f"{'https' if self.https else 'http'}://{self._netloc}{path}" \
            if self._absolute else path
        if self._absolute and self._proxy_headers:
            headers = {**headers, **self._proxy_headers}
        try:
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            conn.timeout = read_timeout
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if deadline is not None and time.monotonic() > deadline:
                    conn.close()
                    raise ReadTimeout("reply not complete in time")
                if max_bytes is not None and size > max_bytes:
                    conn.close()
                    return resp.status, Headers(resp.getheaders()), b""
        except TimeoutError:
            conn.close()
            raise ReadTimeout("read timed out") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise TransportError(getattr(exc, "strerror", None) or str(exc)
                                 or type(exc).__name__) from None
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._keep(conn)
        return resp.status, Headers(resp.getheaders()), b"".join(chunks)

    def close(self) -> None:
        """Close every kept connection (a later request opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
