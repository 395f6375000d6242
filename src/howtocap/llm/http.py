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
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 16
MAX_REPLY_BYTES = 32 << 20  # an LLM reply larger than this is dropped (the client's limit)


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


_PEEK = getattr(socket, "MSG_PEEK", 0) | getattr(socket, "MSG_DONTWAIT", 0)


def _socket_gone(sock: socket.socket | None) -> bool:
    """An idle kept connection that is readable was closed (or sent junk) by the server."""
    if sock is None:
        return True
    try:
        if type(sock) is socket.socket and hasattr(socket, "MSG_DONTWAIT"):
            try:  # one syscall, where a poll object costs three calls and a syscall
                sock.recv(1, _PEEK)
            except BlockingIOError:
                return False  # nothing to read: still open
            return True  # the server's close (b"") or bytes nobody asked for
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _set_timeout(sock: Any, seconds: float) -> None:
    """Each send and receive on ``sock`` ends after ``seconds``. A plain socket stays in
    blocking mode with the kernel's own timeouts (``SO_RCVTIMEO``/``SO_SNDTIMEO``: a timed
    out call fails with EAGAIN): Python's ``settimeout`` polls before every call, a second
    syscall and a second release of the GIL for each send and receive. TLS sockets keep
    Python's timeouts."""
    if type(sock) is socket.socket and sys.platform.startswith("linux"):
        sock.settimeout(None)
        sec = int(seconds)
        usec = max(int((seconds - sec) * 1e6), 0 if sec else 1)  # 0 would mean "never"
        tv = struct.pack("ll", sec, usec)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    else:
        sock.settimeout(seconds)


class _Conn:
    """One open connection: ``http.client`` made it (TLS, proxy tunnel); requests and
    responses go straight over its socket."""

    __slots__ = ("http", "sock", "timeout")

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.http = conn
        self.sock: Any = conn.sock
        self.timeout: float | None = None  # the timeout its socket has now

    def close(self) -> None:
        self.http.close()


def request_head(method: str, target: str, host: str, headers: Mapping[str, str]
                 ) -> list[str]:
    """A request's head lines but its Content-Length (``request_bytes``; the event loop
    builds its POSTs' head once from them)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    return lines + [f"{k}: {v}" for k, v in headers.items()]


def request_bytes(method: str, target: str, host: str, headers: Mapping[str, str],
                  body: bytes | None) -> bytes:
    """One HTTP/1.1 request, head and body in one buffer (one ``send``: ``http.client``
    writes them apart, two syscalls and two TCP segments for the server to read)."""
    lines = request_head(method, target, host, headers)
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


MAX_HEAD = 1 << 16  # bytes of a response's status line and headers


class _Response:
    """One HTTP/1.1 response read from a socket: status, headers, body, and whether the
    connection may carry another request. Content-Length, chunked, or (HTTP/1.0 style) to
    the end of the connection; 1xx interim responses are skipped."""

    def __init__(self, conn: _Conn, method: str, deadline: float | None,
                 max_bytes: int | None) -> None:
        self.recv = conn.sock.recv
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.buf = bytearray()
        self.got = 0  # bytes received so far
        self.too_big = False
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    raise TransportError("response head too long")
                self._more(first=not self.got)
                continue
            head = self.buf[:end].decode("latin-1").split("\r\n")
            del self.buf[:end + 4]
            version, _, rest = head[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise TransportError(f"not an HTTP/1.x response: {head[0][:80]!r}")
            self.status = int(code)
            if not 100 <= self.status < 200:
                break
        items = [(k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in head[1:])]
        self.headers = Headers(items)
        connection = (self.headers.get("connection") or "").lower()
        self.will_close = "close" in connection or \
            (version == "HTTP/1.0" and "keep-alive" not in connection)
        length = self.headers.get("content-length")
        try:
            self.body = self._body(method, length)
        except _TooBig:
            self.body, self.will_close, self.too_big = b"", True, True
        if self.buf:  # bytes past the response: the connection cannot be trusted
            self.will_close = True

    def _body(self, method: str, length: str | None) -> bytes:
        if method == "HEAD" or self.status in (204, 304):
            return b""
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            return self._chunked()
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                raise TransportError(f"bad Content-Length {length!r}") from None
            return self._exactly(size)
        self.will_close = True  # no length: the body ends with the connection
        while self._more(first=False, eof_ok=True):
            self._check_size(len(self.buf))
        body, self.buf = bytes(self.buf), bytearray()
        return body

    def _more(self, first: bool, eof_ok: bool = False) -> bool:
        """Append the next bytes to ``buf`` (False at the end of the connection)."""
        if not first and self.deadline is not None and time.monotonic() > self.deadline:
            raise ReadTimeout("reply not complete in time")
        data = self.recv(CHUNK)  # OSError: the caller's (a timeout included)
        if not data:
            if eof_ok:
                return False
            raise TransportError("Remote end closed connection without response"
                                 if not self.got else "connection closed mid-response")
        self.got += len(data)
        self.buf += data
        return True

    def _check_size(self, size: int) -> None:
        if self.max_bytes is not None and size > self.max_bytes:
            self.too_big = True
            raise _TooBig

    def _exactly(self, size: int) -> bytes:
        self._check_size(size)
        while len(self.buf) < size:
            self._more(first=False)
        body = bytes(self.buf[:size])
        del self.buf[:size]
        return body

    def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            if len(self.buf) > MAX_HEAD:
                raise TransportError("chunk size line too long")
            self._more(first=False)
        line = bytes(self.buf[:end])
        del self.buf[:end + 2]
        return line

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            line = self._line()
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"bad chunk size {line[:40]!r}") from None
            if n == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            size += n
            self._check_size(size)
            parts.append(self._exactly(n))
            if self._line():
                raise TransportError("chunk not followed by CRLF")


class _TooBig(Exception):
    """The response body is larger than the caller takes."""


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
        self._idle: list[_Conn] = []
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

    def _new(self) -> _Conn:
        conn: http.client.HTTPConnection
        if self.proxy and self.https:  # TLS to the server inside a CONNECT tunnel
            conn = http.client.HTTPSConnection(*self._proxy_at, timeout=self.connect_timeout,
                                               context=self._context())
            conn.set_tunnel(self.host, self.port, headers=self._proxy_headers)
        elif self.proxy:
            cls = http.client.HTTPSConnection if self._proxy_tls else http.client.HTTPConnection
            kw: dict[str, Any] = {"context": self._context()} if self._proxy_tls else {}
            conn = cls(*self._proxy_at, timeout=self.connect_timeout, **kw)
        elif self.https:
            conn = http.client.HTTPSConnection(self.host, self.port,
                                               timeout=self.connect_timeout,
                                               context=self._context())
        else:
            conn = http.client.HTTPConnection(self.host, self.port,
                                              timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(f"connect timed out ({exc})") from None
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ConnectError(getattr(exc, "strerror", None) or str(exc)
                               or type(exc).__name__) from None
        return _Conn(conn)

    def _take(self) -> tuple[_Conn, bool]:
        """A kept connection still open (True), else a new one (False)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new(), False
            if not _socket_gone(conn.sock):
                return conn, True
            conn.close()

    def _keep(self, conn: _Conn) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
                deadline: float | None = None, max_bytes: int | None = None,
                timeout: float | None = None) -> tuple[int, Headers, bytes]:
        """Status, headers and body of one request. Past the monotonic ``deadline`` the read
        stops with ``ReadTimeout``; past ``max_bytes`` the body is returned empty (and the
        connection dropped)."""
        read_timeout = self.timeout if timeout is None else timeout
        target = f"{'https' if self.https else 'http'}://{self._netloc}{path}" \
            if self._absolute else path
        if self._absolute and self._proxy_headers:
            headers = {**headers, **self._proxy_headers}
        data = request_bytes(method, target, self._netloc, headers, body)
        conn, _ = self._take()
        try:
            if conn.timeout != read_timeout:
                _set_timeout(conn.sock, read_timeout)
                conn.timeout = read_timeout
            conn.sock.sendall(data)
            resp = _Response(conn, method, deadline, max_bytes)
        except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO ran out
            conn.close()
            raise ReadTimeout("read timed out") from None
        except OSError as exc:
            conn.close()
            raise TransportError(getattr(exc, "strerror", None) or str(exc)
                                 or type(exc).__name__) from None
        except BaseException:
            conn.close()
            raise
        if resp.will_close:  # also when the body was too big (returned empty)
            conn.close()
        else:
            self._keep(conn)
        return resp.status, resp.headers, resp.body

    def close(self) -> None:
        """Close every kept connection (a later request opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
