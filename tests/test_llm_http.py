"""The LLM client's own HTTP transport (``llm/http.py``): what httpx gave the users still holds.
Connections are kept alive (counted at the server), a connection the server closed while idle
is replaced without an outage, proxies come from ``HTTP(S)_PROXY``/``NO_PROXY`` (https through
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
from tests.chat_server import ChatServer, chat_server, echo_reply, serving

from howtocap.errors import HowtocapError
from howtocap.llm.base import GenerationConfig
from howtocap.llm.http import proxy_for
from howtocap.llm.openai import OpenAIChatLLM

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


class _ClosingServer:
    """Answers each request as HTTP/1.1 (keep-alive implied), then closes the connection:
    a server dropping idle connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.connections = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = conn.recv(1 << 16)
                head, _, body = data.partition(b"\r\n\r\n")
                size = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                                if ln.lower().startswith(b"content-length")))
                while len(body) < size:
                    body += conn.recv(1 << 16)
                reply = (b'{"choices": [{"message": {"content": "0s: Crack the eggs."}, '
                         b'"finish_reason": "stop"}]}')
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(reply)).encode() + b"\r\n\r\n"
                             + reply)
                time.sleep(0.05)  # then the server drops the idle connection


def test_a_connection_closed_while_idle_is_replaced_without_an_outage() -> None:
    srv = _ClosingServer()
    try:
        llm = client(srv.url, max_retries=0)
        for _ in range(3):
            assert llm.chat(MSG, GEN) == "0s: Crack the eggs."
            time.sleep(0.2)  # the server has closed it by now
        assert srv.connections == 3
        assert llm.stats["outages"] == 0 and llm.stats["attempts"] == 3
    finally:
        srv.sock.close()


def test_head_and_body_leave_in_one_write() -> None:
    """One send a request: http.client's two (head, then body) cost a syscall and a TCP
    segment more on each side."""
    from howtocap.llm.http import _HTTPConnection

    sent: list[bytes] = []

    class Sock:
        def sendall(self, data: bytes) -> None:
            sent.append(bytes(data))

    conn = _HTTPConnection("127.0.0.1", 9)
    conn.sock = Sock()  # type: ignore[assignment]
    conn.request("POST", "/v1/chat/completions", body=b'{"messages": []}',
                 headers={"Content-Type": "application/json"})
    assert len(sent) == 1
    assert sent[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert sent[0].endswith(b'\r\n\r\n{"messages": []}')


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


def test_proxy_for_reads_scheme_all_and_no_proxy() -> None:
    env = {"HTTPS_PROXY": "http://p:3128", "ALL_PROXY": "q:8080", "NO_PROXY": "local.lan"}
    assert proxy_for("https://api.example.com/v1", env) == "http://p:3128"
    assert proxy_for("http://api.example.com/v1", env) == "http://q:8080"
    assert proxy_for("https://gpu.local.lan:8000/v1", env) is None
    assert proxy_for("http://api.example.com/v1", {}) is None


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
    """``python -m tests.chat_server --keep-alive`` (the driver benchmark's server) gives the
    same replies as ``ChatServer`` and keeps connections open."""
    from tests.chat_server import LeanChatServer

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
