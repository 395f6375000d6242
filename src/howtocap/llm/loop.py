"""Every LLM request in flight on one thread: non-blocking keep-alive sockets and a selector.

Why: over HTTP a text-only run was 32 video threads, each blocking on its socket; every
request then cost two GIL hand-offs and the wake-ups of threads contending for it, more than
the captioning itself (benchmarks/bench_driver.py). Here the caller's thread sends each
request, reads every reply as it arrives and resumes what waited for it; nothing else runs.

A request is its client's steps (``llm.openai.Steps``): the retries, backoffs (timers here),
circuit breakers and the pool's routing are the same code the blocking path runs. Each
client keeps ``concurrency`` requests in flight at most (the rest wait their turn in order).
Only plain ``http://`` servers without a proxy come here (``loop_ok``); TLS and proxy tunnels
stay on the blocking path. What the blocking client guarantees holds: a connect timeout and
a whole-reply deadline (``timeout``), ``MAX_REPLY_BYTES``, and a kept connection the server
closed while idle is dropped before it is used (seen as an event, or by the same one-syscall
check the blocking client makes).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count
from typing import Any

from howtocap.llm.base import Admit, GenerationConfig, Messages, Steps
from howtocap.llm.http import (
    CHUNK,
    MAX_HEAD,
    MAX_REPLY_BYTES,
    ConnectError,
    ConnectTimeout,
    ReadTimeout,
    TransportError,
    _Response,
    _socket_gone,
    request_head,
)

Done = Callable[[Any], None]
SCAN = 0.05  # seconds between checks of connect and reply deadlines


class _NeedMore(Exception):
    """The buffered bytes end before the response does."""


class _Buffered:
    """What ``_Response`` reads from: the bytes received so far (then EOF or ``_NeedMore``)."""

    __slots__ = ("_data", "_eof")

    def __init__(self, data: bytes, eof: bool) -> None:
        self._data, self._eof = data, eof

    @property
    def sock(self) -> _Buffered:
        """Itself (a property: an attribute would be a cycle only the collector frees)."""
        return self

    def recv(self, _: int) -> bytes:
        if self._data:
            data, self._data = self._data, b""
            return data
        if self._eof:
            return b""
        raise _NeedMore


def _may_be_whole(buf: bytearray) -> bool:
    """Cheap test before parsing: the head is in, and a ``Content-Length`` body all there or
    a chunked body's last line seen (a body that ends with the connection waits for EOF)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return len(buf) > MAX_HEAD  # let the parser say it is too long
    head = bytes(buf[:end]).lower()
    if head[9:10] == b"1" or head[9:12] in (b"204", b"304"):
        return True  # interim or bodiless: parse and see
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        stop = head.find(b"\r\n", at + 2)
        try:
            size = int(head[at + 17:stop if stop >= 0 else None])
        except ValueError:
            return True  # the parser reports the bad length
        return size > MAX_REPLY_BYTES or len(buf) >= end + 4 + size
    if b"chunked" in head:
        return buf.endswith(b"\r\n\r\n") and len(buf) > end + 4
    return False


class _Server:
    """One client's side of the loop: its request slots, waiting requests, idle sockets."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.limit = client.concurrency
        self.busy = 0
        self.waiting: deque[tuple[_Call, bytes]] = deque()
        self.idle: list[_Conn] = []
        origin = client._origin
        self.host, self.port = origin.host, origin.port
        self.timeout = client.timeout
        self.connect_timeout = origin.connect_timeout
        self.addr: tuple[Any, ...] | None = None
        lines = request_head("POST", client._path, origin._netloc, client._post_headers)
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    def request(self, payload: bytes) -> bytes:
        """What ``http.request_bytes`` makes for this POST, from a head built once."""
        return b"%s%d\r\n\r\n%s" % (self.head, len(payload), payload)


class _Call:
    """One request's steps and what to call with its reply (or exception); ``gate``: the
    ``Admit`` whose place it holds until it ends."""

    __slots__ = ("steps", "done", "gate")

    def __init__(self, steps: Steps, done: Done) -> None:
        self.steps, self.done = steps, done
        self.gate: Admit | None = None


class _Gate:
    """An ``Admit``'s places: how many are taken, and the requests waiting for one."""

    __slots__ = ("taken", "waiting")

    def __init__(self) -> None:
        self.taken = 0
        self.waiting: deque[_Call] = deque()


class _Conn:
    """A non-blocking connection and the exchange on it, if any."""

    __slots__ = ("sock", "server", "call", "out", "buf", "deadline", "connecting", "writing")

    def __init__(self, sock: socket.socket, server: _Server) -> None:
        self.sock = sock
        self.server = server
        self.call: _Call | None = None
        self.out = b""  # request bytes not yet sent
        self.buf = bytearray()
        self.deadline = 0.0
        self.connecting = True
        self.writing = False  # registered for EVENT_WRITE: a request's rest to send


class ChatLoop:
    """Requests of any number of callers on the calling thread; ``run_once`` does the I/O."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._servers: dict[int, _Server] = {}
        self._gates: dict[int, _Gate] = {}
        self._ready: deque[tuple[_Call, Any, BaseException | None]] = deque()
        self._timers: list[tuple[float, int, _Call]] = []
        self._seq = count()
        self._busy: set[_Conn] = set()
        self._next_scan = 0.0

    # -- callers -----------------------------------------------------------------------------

    def submit(self, steps: Steps, done: Done) -> None:
        """Start one request; ``done`` gets its reply, or the exception it ended with."""
        self._advance(_Call(steps, done), None, None)

    def chat_many(self, llm: Any, batch: Sequence[Messages], gen: GenerationConfig,
                  done: Callable[[list[Any]], None]) -> None:
        """``llm.chat_many`` without blocking: ``done`` gets the replies in order."""
        out: list[Any] = [None] * len(batch)
        left = [len(batch)]
        if not batch:
            done(out)
            return

        def one(k: int) -> Done:
            def got(reply: Any) -> None:
                out[k] = reply
                left[0] -= 1
                if not left[0]:
                    done(out)
            return got

        for k, msgs in enumerate(batch):
            self.submit(llm.chat_steps(msgs, gen), one(k))

    @property
    def idle(self) -> bool:
        """Nothing in flight, waiting or due."""
        return not (self._busy or self._timers or self._ready or
                    any(s.waiting for s in self._servers.values()) or
                    any(g.waiting for g in self._gates.values()))

    def run_once(self, timeout: float) -> None:
        """Wait up to ``timeout`` for I/O, then handle what arrived and what fell due."""
        now = time.monotonic()
        if self._ready:
            timeout = 0.0
        elif self._timers:
            timeout = min(timeout, max(0.0, self._timers[0][0] - now))
        if self._busy:
            timeout = min(timeout, max(0.0, self._next_scan - now))
        for key, mask in self._sel.select(timeout):
            self._event(key.data, mask)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            self._ready.append((heapq.heappop(self._timers)[2], None, None))
        if self._busy and now >= self._next_scan:
            self._next_scan = now + SCAN
            self._deadlines(now)
        ready = self._ready
        while ready:
            call, value, exc = ready.popleft()
            self._advance(call, value, exc)

    def close(self) -> None:
        """Drop every connection and request (a request in flight is simply abandoned)."""
        for conn in [*self._busy, *(c for s in self._servers.values() for c in s.idle)]:
            self._drop(conn)
        for server in self._servers.values():
            server.idle.clear()
            for call, _ in server.waiting:
                call.steps.close()
            server.waiting.clear()
        for gate in self._gates.values():
            for call in gate.waiting:
                call.steps.close()
            gate.waiting.clear()
        for _, _, call in self._timers:
            call.steps.close()
        for call, _, _ in self._ready:
            call.steps.close()
        self._busy.clear()
        self._timers.clear()
        self._ready.clear()
        self._sel.close()

    # -- steps -------------------------------------------------------------------------------

    def _advance(self, call: _Call, value: Any, exc: BaseException | None) -> None:
        try:
            op = call.steps.throw(exc) if exc is not None else call.steps.send(value)
        except StopIteration as stop:
            self._leave(call)
            call.done(stop.value)
            return
        except Exception as err:  # noqa: BLE001 - the request's outcome, handed on
            self._leave(call)
            call.done(err)
            return
        if isinstance(op, Admit):
            gate = self._gates.get(id(op.owner))
            if gate is None:
                gate = self._gates[id(op.owner)] = _Gate()
            call.gate = op
            if gate.taken < op.limit:
                gate.taken += 1
                self._ready.append((call, None, None))
            else:
                gate.waiting.append(call)
            return
        if not isinstance(op, tuple):  # a backoff
            heapq.heappush(self._timers, (time.monotonic() + op, next(self._seq), call))
            return
        client, payload = op
        server = self._servers.get(id(client))
        if server is None:
            server = self._servers[id(client)] = _Server(client)
        if server.busy < server.limit:
            self._start(server, call, payload)
        else:
            server.waiting.append((call, payload))

    def _leave(self, call: _Call) -> None:
        """The request ended: its place at its gate goes to the next one waiting."""
        if call.gate is None:
            return
        gate = self._gates[id(call.gate.owner)]
        if gate.waiting:
            self._ready.append((gate.waiting.popleft(), None, None))  # the place passes on
        else:
            gate.taken -= 1

    def _start(self, server: _Server, call: _Call, payload: bytes) -> None:
        """Send in one of the server's slots (as ``OpenAIChatLLM._send_now`` does)."""
        server.busy += 1
        try:
            server.client._check_breaker()
            server.client._count("attempts")
            conn = self._conn(server)
        except Exception as exc:  # noqa: BLE001 - an open breaker, a refused connect
            self._finish(server, call, None, exc)
            return
        self._begin(conn, call, payload)

    def _finish(self, server: _Server, call: _Call, value: Any,
                exc: BaseException | None) -> None:
        """The try is over: its slot goes to the next waiting request; the steps resume
        (from ``run_once``, so that a chain of failures does not recurse)."""
        server.busy -= 1
        self._ready.append((call, value, exc))
        if server.waiting and server.busy < server.limit:
            nxt, payload = server.waiting.popleft()
            self._start(server, nxt, payload)

    # -- connections -------------------------------------------------------------------------

    def _conn(self, server: _Server) -> _Conn:
        """A kept connection (the server's closes of idle ones were seen as events), else a
        new one, connecting."""
        while server.idle:
            conn = server.idle.pop()
            if not _socket_gone(conn.sock):  # closed since the last select: not seen yet
                return conn
            self._drop(conn)
        if server.addr is None:
            try:
                server.addr = socket.getaddrinfo(server.host, server.port, 0,
                                                 socket.SOCK_STREAM)[0]
            except OSError as exc:
                raise ConnectError(getattr(exc, "strerror", None) or str(exc)) from None
        family, kind, proto, _, addr = server.addr
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = sock.connect_ex(addr)
        except OSError as exc:
            sock.close()
            raise ConnectError(exc.strerror or str(exc)) from None
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            server.addr = None  # look the name up again next time
            raise ConnectError(os.strerror(err))
        conn = _Conn(sock, server)
        conn.deadline = time.monotonic() + server.connect_timeout
        self._sel.register(sock, selectors.EVENT_WRITE, conn)
        return conn

    def _begin(self, conn: _Conn, call: _Call, payload: bytes) -> None:
        conn.call = call
        conn.out = conn.server.request(payload)
        conn.buf = bytearray()
        self._busy.add(conn)
        if conn.connecting:
            return  # sent once connected
        conn.deadline = time.monotonic() + conn.server.timeout
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        """Send what the socket takes now; the rest when it is writable again."""
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._failed(conn, TransportError(exc.strerror or str(exc)))
            return
        conn.out = conn.out[sent:]
        if bool(conn.out) != conn.writing:
            conn.writing = bool(conn.out)
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.writing else 0)
            self._sel.modify(conn.sock, events, conn)

    def _event(self, conn: _Conn, mask: int) -> None:
        if conn.connecting:
            if not mask & selectors.EVENT_WRITE:
                return
            err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                conn.server.addr = None
                self._failed(conn, ConnectError(os.strerror(err)))
                return
            conn.connecting = False
            self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
            conn.deadline = time.monotonic() + conn.server.timeout
            self._send(conn)
            return
        if mask & selectors.EVENT_WRITE and conn.out:
            self._send(conn)
            if conn.call is None:
                return
        if not mask & selectors.EVENT_READ:
            return
        if conn.call is None:  # an idle kept connection: the server closed it (or sent junk)
            conn.server.idle.remove(conn)
            self._drop(conn)
            return
        try:
            data = conn.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._failed(conn, TransportError(exc.strerror or str(exc)))
            return
        if data:
            conn.buf += data
            if len(conn.buf) > MAX_REPLY_BYTES + MAX_HEAD:
                self._reply(conn, eof=True, too_big=True)
            elif _may_be_whole(conn.buf):
                self._reply(conn, eof=False)
        else:
            self._reply(conn, eof=True)

    def _reply(self, conn: _Conn, eof: bool, too_big: bool = False) -> None:
        """Parse the reply received so far; hand it on when whole."""
        try:
            resp = _Response(_Buffered(bytes(conn.buf), eof), "POST",  # type: ignore[arg-type]
                             None, MAX_REPLY_BYTES)
        except _NeedMore:
            return
        except TransportError as exc:
            self._failed(conn, exc)
            return
        if too_big and not resp.too_big:
            resp.body, resp.will_close = b"", True
        call, server = conn.call, conn.server
        assert call is not None
        conn.call = None
        self._busy.discard(conn)
        if resp.will_close or conn.out:
            self._drop(conn)
        elif len(server.idle) < server.limit:
            server.idle.append(conn)
        else:
            self._drop(conn)
        self._finish(server, call, (resp.status, resp.headers, resp.body), None)

    def _failed(self, conn: _Conn, exc: TransportError) -> None:
        """The try failed on this connection (counted by the steps as the blocking client
        counts it)."""
        call, server = conn.call, conn.server
        self._busy.discard(conn)
        self._drop(conn)
        if call is not None:
            self._finish(server, call, None, exc)

    def _drop(self, conn: _Conn) -> None:
        conn.call = None
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _deadlines(self, now: float) -> None:
        for conn in [c for c in self._busy if c.deadline < now]:
            self._failed(conn, ConnectTimeout("connect timed out") if conn.connecting
                         else ReadTimeout("reply not complete in time"))
