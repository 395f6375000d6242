"""The LLM client's HTTP (``aiohttp.ClientSession`` in ``llm/openai.py``), seen from a real server.
Connections are kept alive (counted at the server), a connection the server closed while idle
is replaced without an outage, replies framed every way are read whole, a stalled, trickling,
cut or huge reply ends the try, proxies come from ``HTTP(S)_PROXY``/``NO_PROXY`` (https through
a CONNECT tunnel), and TLS is verified (against ``SSL_CERT_FILE`` when set)."""

from __future__ import annotations

import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from howtocap.errors import HowtocapError
from howtocap.llm.base import GenerationConfig
from howtocap.llm.openai import OpenAIChatLLM
from tests.support.chat_server import ChatServer, chat_server, echo_reply, serving

GEN = GenerationConfig()
MSG = [{"role": "user", "content": "0s: crack the eggs\n4s: whisk them"}]
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def client(url: str, **kw: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM(url, model="echo", api_key_env=None, backoff=0.01, **kw)


def test_connections_are_kept_alive() -> None:
    with chat_server(keep_alive=True) as srv:
        llm = client(srv.url, concurrency=4)
        for _ in range(20):
            assert llm.chat(MSG, GEN) == echo_reply(MSG[0]["content"])
        assert srv.connections == 1 and srv.requests == 20  # one connection, reused
        batch = [[{"role": "user", "content": f"{i}s: stir pot {i}"}] for i in range(8)]
        for _ in range(5):
            assert llm.chat_many(batch, GEN) == [echo_reply(m[0]["content"]) for m in batch]
        assert srv.connections <= 4  # at most one per request in flight, kept between calls
        assert srv.requests == 60
        llm.close()


def test_a_connection_closed_while_idle_is_replaced_without_an_outage() -> None:
    """A server dropping idle connections: HTTP/1.1 answers (keep-alive implied), then it
    closes each connection."""
    reply = (b'{"choices": [{"message": {"content": "0s: Crack the eggs."}, '
             b'"finish_reason": "stop"}]}')
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(reply)).encode() + b"\r\n\r\n" + reply)
    srv = _RawServer([answer] * 3, pause=0.05, per_connection=1)
    try:
        llm = client(srv.url + "/v1", max_retries=0)
        for _ in range(3):
            assert llm.chat(MSG, GEN) == "0s: Crack the eggs."
            time.sleep(0.2)  # the server has closed it by now
        assert srv.connections == 3
        assert llm.stats["outages"] == 0 and llm.stats["attempts"] == 3
    finally:
        srv.close()


class _RawServer:
    """Reads each request whole, then answers it with the next of ``replies`` (raw bytes,
    sent in pieces split at ``|``, a pause between them), keeping the connection open, or
    closing it a pause after ``per_connection`` answers."""

    def __init__(self, replies: list[bytes], pause: float = 0.02,
                 per_connection: int = 0) -> None:
        self.replies = list(replies)
        self.pause = pause
        self.per_connection = per_connection
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buf, answered = b"", 0
            while self.replies:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(1 << 16)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                size = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                             if ln.lower().startswith(b"content-length")), 0)
                while len(buf) < size:
                    buf += conn.recv(1 << 16)
                self.requests.append(head + b"\r\n\r\n" + buf[:size])
                buf = buf[size:]
                for k, piece in enumerate(self.replies.pop(0).split(b"|")):
                    if k:
                        time.sleep(self.pause)
                    try:
                        conn.sendall(piece)
                    except OSError:  # the client gave up on this reply
                        return
                answered += 1
                if answered == self.per_connection:
                    time.sleep(self.pause)  # then the server drops the idle connection
                    return

    def close(self) -> None:
        self.sock.close()


REPLY = (b'{"choices": [{"message": {"content": "0s: Crack the eggs."}, '
         b'"finish_reason": "stop"}]}')
SIZED = b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(REPLY)).encode() + b"\r\n\r\n"


def test_replies_framed_every_way_are_read_whole() -> None:
    """Content-Length (split across packets), a 1xx interim response then chunked, HTTP/1.0
    to the end of the connection: each reply read whole, the first three on one kept
    connection."""
    half = len(REPLY) // 2
    chunked = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, REPLY[:half],
                                                      len(REPLY) - half, REPLY[half:])
    srv = _RawServer([
        SIZED + REPLY[:10] + b"|" + REPLY[10:],
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked[:20] + b"|" + chunked[20:],
        SIZED + REPLY,
        b"HTTP/1.0 200 OK\r\n\r\n" + REPLY,  # then the server closes the connection
    ], pause=0.05)
    try:
        llm = client(srv.url + "/v1", concurrency=1, max_retries=0)
        for _ in range(4):
            assert llm.chat(MSG, GEN) == "0s: Crack the eggs."
        assert srv.connections == 1 and llm.stats["outages"] == 0  # kept through all four
        assert all(r.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") for r in srv.requests)
    finally:
        srv.close()


def test_a_stalled_trickling_cut_or_huge_reply_ends_the_try(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    srv = _RawServer([SIZED + b"|" + REPLY], pause=2.0)  # stalls after the head
    try:
        t0 = time.monotonic()
        with pytest.raises(HowtocapError, match=r"timed out after 0.3s after 1 try"):
            client(srv.url + "/v1", timeout=0.3, max_retries=0).chat(MSG, GEN)
        assert time.monotonic() - t0 < 1.5
    finally:
        srv.close()
    pieces = b"|".join(REPLY[i:i + 8] for i in range(0, len(REPLY), 8))
    srv = _RawServer([SIZED + pieces], pause=0.1)  # each piece in time, the whole not
    try:
        with pytest.raises(HowtocapError, match=r"timed out after 0.5s"):
            client(srv.url + "/v1", timeout=0.5, max_retries=0).chat(MSG, GEN)
    finally:
        srv.close()
    cut = _RawServer([SIZED + REPLY[:20]])  # then the connection closes
    try:
        with pytest.raises(HowtocapError, match=r"unreachable .*\(Response payload is not"):
            client(cut.url + "/v1", max_retries=0, breaker_after=5).chat(MSG, GEN)
    finally:
        cut.close()
    import howtocap.llm.openai as openai_mod

    monkeypatch.setattr(openai_mod, "MAX_REPLY_BYTES", 1000)
    big = _RawServer([b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000])
    try:  # dropped unread: taken for a garbled reply
        with pytest.raises(HowtocapError, match="invalid JSON"):
            client(big.url + "/v1", max_retries=0).chat(MSG, GEN)
    finally:
        big.close()


class _Proxy:
    """A forward proxy: absolute-URI requests are relayed, CONNECT opens a tunnel."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_CONNECT(self) -> None:  # noqa: N802
                proxy.seen.append(f"CONNECT {self.path}")
                host, port = self.path.rsplit(":", 1)
                upstream = socket.create_connection((host, int(port)))
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                socks = [self.connection, upstream]
                while True:
                    ready, _, _ = select.select(socks, [], [], 5)
                    if not ready:
                        break
                    for s in ready:
                        data = s.recv(1 << 16)
                        if not data:
                            upstream.close()
                            self.close_connection = True
                            return
                        (upstream if s is self.connection else self.connection).sendall(data)

            def _relay(self) -> None:
                proxy.seen.append(f"{self.command} {self.path}")
                import http.client
                from urllib.parse import urlsplit

                target = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(target.hostname, target.port)
                conn.request(self.command, target.path, body=body or None,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _relay  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    with serving(_Proxy()) as p:
        yield p


def test_http_proxy_from_the_environment_and_no_proxy(proxy: _Proxy,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with chat_server(keep_alive=True) as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        assert client(srv.url).chat(MSG, GEN) == echo_reply(MSG[0]["content"])
        assert proxy.seen == [f"POST {srv.url}/chat/completions"]
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert client(srv.url).chat(MSG, GEN) == echo_reply(MSG[0]["content"])
        assert len(proxy.seen) == 1 and srv.requests == 2  # the second went direct


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[ChatServer, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    for name in ("server", "other"):  # "other": a certificate that must not be trusted
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(tmp_path / f"{name}-key.pem"), "-out",
                        str(tmp_path / f"{name}.pem"), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                       capture_output=True)
    key, cert = tmp_path / "server-key.pem", tmp_path / "server.pem"
    srv = ChatServer(keep_alive=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.httpd.socket = ctx.wrap_socket(srv.httpd.socket, server_side=True)
    srv.url = srv.url.replace("http://", "https://")
    with serving(srv):
        yield srv, cert


def test_tls_is_verified(tls_server: tuple[ChatServer, Path],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    srv, cert = tls_server
    with pytest.raises(HowtocapError, match="(?i)certificate verify failed"):
        client(srv.url, max_retries=0).chat(MSG, GEN)  # self-signed: not trusted
    monkeypatch.setenv("SSL_CERT_FILE", str(cert.with_name("other.pem")))
    with pytest.raises(HowtocapError, match="(?i)certificate verify failed"):
        client(srv.url, max_retries=0).chat(MSG, GEN)  # trusting another certificate
    assert srv.requests == 0
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert client(srv.url).chat(MSG, GEN) == echo_reply(MSG[0]["content"])
    assert srv.requests == 1


def test_https_goes_through_a_connect_tunnel(tls_server: tuple[ChatServer, Path],
                                            proxy: _Proxy,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    srv, cert = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    llm = client(srv.url)
    for _ in range(3):
        assert llm.chat(MSG, GEN) == echo_reply(MSG[0]["content"])
    port = srv.httpd.server_address[1]
    assert proxy.seen == [f"CONNECT 127.0.0.1:{port}"]  # one tunnel, kept alive
    assert srv.requests == 3
    llm.close()


def test_lean_benchmark_server_answers_as_the_chat_server() -> None:
    """``python -m tests.support.chat_server --keep-alive`` (the driver benchmark's server)
    gives the same replies as ``ChatServer`` and keeps connections open."""
    from tests.support.chat_server import LeanChatServer

    srv = LeanChatServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    llm = OpenAIChatLLM(srv.url, api_key_env=None, concurrency=2)  # asks /models for its name
    msgs = [[{"role": "user", "content": f"{i}s: stir pot {i}\n{i + 3}s: add salt"}]
            for i in range(6)]
    for _ in range(3):
        assert llm.chat_many(msgs, GEN) == [echo_reply(m[0]["content"]) for m in msgs]
    assert llm.name == "openai:echo"
    assert srv.requests == 19 and 1 <= srv.connections <= 2
    llm.close()
