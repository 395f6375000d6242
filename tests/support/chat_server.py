"""A real OpenAI-compatible chat server on 127.0.0.1 for tests, with scripted behaviour.

It answers deterministically from the prompt (one caption per ``<n>s:`` line it was given), so
two runs of the pipeline produce identical tables, and it can be told to fail or stall.
``VisionServer`` is the multimodal one (``--vlm-url``): it checks each request's frames and
captions what it sees. ``python -m tests.support.chat_server [--vision]`` serves one in its own
process and prints its URL (for benchmarks).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

LINE = re.compile(r"^(\d+)s: (.+)$", re.M)
# Test videos for the vision server encode their time in brightness: grey level = this x t.
GREY_PER_SECOND = 6


def prompt_text(content: Any) -> str:
    """A message's text: the string, or a multimodal message's text parts joined."""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def echo_reply(prompt: str) -> str:
    """``<n>s: Summary of <first words>.`` for each timestamped line of the prompt."""
    if "NOPARSE" in prompt:
        return "I am sorry, I cannot help with that."
    lines = [f"{m.group(1)}s: {' '.join(m.group(2).split()[:5]).capitalize()}."
             for m in LINE.finditer(prompt)]
    return "Sure! Here is the summary:\n" + "\n".join(lines)



def send_json(handler: BaseHTTPRequestHandler, code: int, obj: dict,
              headers: dict[str, str] | None = None) -> None:
    """One JSON response, with ``headers`` added (both fake servers answer this way)."""
    data = json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(data)

class _Server(ThreadingHTTPServer):
    """A listen backlog for dozens of clients connecting at once (``--concurrency 32``);
    socketserver's default is 5."""

    request_queue_size = 128


class ChatServer:
    """Counts requests; ``status`` forces a status, ``delay`` stalls, ``fail_when`` 500s
    (``Retry-After: 0``, so retries do not wait) every prompt that contains that text."""

    def __init__(self, *, delay: float = 0.0, status: int | None = None,
                 fail_when: str | None = None, keep_alive: bool = False) -> None:
        self.delay = delay
        self.status = status
        self.fail_when = fail_when
        self.requests = 0
        self.connections = 0  # TCP connections accepted (a kept-alive client opens few)
        self.bodies: list[dict[str, Any]] = []  # each POST's JSON, as the server read it
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.connections += 1

            # HTTP/1.1 keeps connections open between requests, as vLLM and llama.cpp do;
            # 1.0 (the tests' default) closes each one, so a stopped server is gone at once.
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
            # Headers and body leave in two writes: without TCP_NODELAY the body of a kept
            # connection waits for the client's delayed ACK (~40 ms a reply).
            disable_nagle_algorithm = keep_alive

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, {"data": [{"id": "echo"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    server.bodies.append(body)
                if server.delay:
                    time.sleep(server.delay)
                if server.status:
                    self._send(server.status, {"error": {"message": "scripted failure"}})
                    return
                prompt = prompt_text(body["messages"][-1]["content"])
                if server.fail_when and server.fail_when in prompt:
                    self._send(500, {"error": {"message": "scripted failure"}},
                               {"Retry-After": "0"})
                    return
                self._send(200, {"choices": [{"message": {"role": "assistant",
                                                          "content": echo_reply(prompt)}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

            def _send(self, code: int, obj: dict, headers: dict[str, str] | None = None
                      ) -> None:
                send_json(self, code, obj, headers)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


class LeanChatServer:
    """The echo server of ``--keep-alive`` benchmarks, on one thread: HTTP/1.1 with kept
    connections, read and answered by a ``selectors`` loop (the same replies as
    ``ChatServer``).

    Why: it stands for vLLM or llama.cpp, whose HTTP front ends cost the client's machine
    little; ``http.server`` parses headers with the email package and runs a thread per
    connection, ~0.2 ms of CPU a request on the 2 cores the driver benchmark shares with the
    server. Only what the benchmark sends is understood: ``Content-Length`` bodies, GET for
    ``/models``, POST for the rest."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.requests = 0
        self.connections = 0
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.sock, selectors.EVENT_READ)

    @staticmethod
    def _answer(method: bytes, body: bytes) -> bytes:
        if method == b"GET":
            obj: dict[str, Any] = {"data": [{"id": "echo"}]}
        else:
            prompt = prompt_text(json.loads(body)["messages"][-1]["content"])
            obj = {"choices": [{"message": {"role": "assistant", "content": echo_reply(prompt)}}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        data = json.dumps(obj).encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(data)).encode() + b"\r\n\r\n" + data)

    def _serve(self, conn: socket.socket, buf: bytearray) -> bool:
        """Answer every whole request in ``buf``; False when the client has gone."""
        try:
            chunk = conn.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            chunk = b""
        if not chunk:
            return False
        buf += chunk
        out = []
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(buf[:end]).split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(buf) < end + 4 + length:
                break
            body = bytes(buf[end + 4:end + 4 + length])
            del buf[:end + 4 + length]
            self.requests += 1
            out.append(self._answer(head[0].split(b" ", 1)[0], body))
        if out:
            conn.setblocking(True)  # replies are small: send them whole, then wait again
            conn.sendall(b"".join(out))
            conn.setblocking(False)
        return True

    def serve_forever(self) -> None:
        bufs: dict[socket.socket, bytearray] = {}
        while True:
            for key, _ in self.sel.select():
                sock = key.fileobj
                if sock is self.sock:
                    try:
                        conn, _ = self.sock.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self.connections += 1
                    bufs[conn] = bytearray()
                    self.sel.register(conn, selectors.EVENT_READ)
                elif not self._serve(sock, bufs[sock]):  # type: ignore[arg-type]
                    self.sel.unregister(sock)
                    bufs.pop(sock).clear()  # type: ignore[call-overload]
                    sock.close()


class Frame(Exception):
    """A request's frames are not what a VLM server accepts (sent back as a 400)."""


def read_frames(content: Any) -> list[dict[str, Any]]:
    """Each image part of a multimodal message, checked: a JPEG data URI that decodes, with
    its size, the time its brightness encodes and the ``Frame at <t>s:`` label before it."""
    from PIL import Image

    if not isinstance(content, list):
        raise Frame("the user message has no content parts (no images)")
    out: list[dict[str, Any]] = []
    label = None
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            m = re.fullmatch(r"Frame at ([0-9.]+)s:", part.get("text", ""))
            label = float(m.group(1)) if m else label
        elif kind == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            head, _, data = url.partition(",")
            if head != "data:image/jpeg;base64":
                raise Frame(f"image_url is not a JPEG data URI: {url[:40]!r}")
            try:
                with Image.open(io.BytesIO(base64.b64decode(data, validate=True))) as im:
                    fmt, size = im.format, im.size
                    grey = float(np.asarray(im.convert("L"), dtype=float).mean())
            except Exception as exc:
                raise Frame(f"image does not decode ({type(exc).__name__})") from None
            if fmt != "JPEG":
                raise Frame(f"image is {fmt}, not JPEG")
            out.append({"size": size, "time": grey / GREY_PER_SECOND, "label": label})
            label = None
        else:
            raise Frame(f"unknown content part {kind!r}")
    if not out:
        raise Frame("no image_url part")
    return out


class VisionServer:
    """A multimodal chat server that reads the frames: a request whose images are missing,
    not JPEG data URIs or undecodable gets a 400 naming why; otherwise it answers one caption
    per frame, ``<t>s: The frame shows second <t>.``, from the time the frame's brightness
    encodes. Every request is kept in ``seen`` (text, frame times, sizes, labels, body size)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"data": [{"id": "vision-echo"}]})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                content = json.loads(raw)["messages"][-1]["content"]
                try:
                    frames = read_frames(content)
                except Frame as exc:
                    with server.lock:
                        server.problems.append(str(exc))
                    self._send(400, {"error": {"message": str(exc)}})
                    return
                with server.lock:
                    server.seen.append({"text": prompt_text(content), "bytes": len(raw),
                                        "times": [f["time"] for f in frames],
                                        "sizes": [f["size"] for f in frames],
                                        "labels": [f["label"] for f in frames]})
                reply = "\n".join(f"{int(f['time'])}s: The frame shows second "
                                  f"{f['time']:.1f}." for f in frames)
                self._send(200, {"choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant",
                                                          "content": reply}}]})

            def _send(self, code: int, obj: dict) -> None:
                send_json(self, code, obj)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@contextmanager
def serving(srv: Any) -> Iterator[Any]:
    """Serve ``srv.httpd`` on a daemon thread for the block, then shut it down."""
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


@contextmanager
def chat_server(**kw: Any) -> Iterator[ChatServer]:
    with serving(ChatServer(**kw)) as srv:
        yield srv



@contextmanager
def vision_server() -> Iterator[VisionServer]:
    with serving(VisionServer()) as srv:
        yield srv


def main() -> None:
    """Serve in this process until it is ended; the URL is the first line on stdout."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vision", action="store_true", help="the multimodal server")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    ap.add_argument("--keep-alive", action="store_true",
                    help="HTTP/1.1: connections stay open between requests")
    ap.add_argument("--http-server", action="store_true",
                    help="with --keep-alive: Python's http.server (threads) instead of the "
                         "lean one-thread loop")
    args = ap.parse_args()
    if args.keep_alive and not args.delay and not args.vision and not args.http_server:
        lean = LeanChatServer()  # stands for vLLM: cheap on the shared cores
        print(lean.url, flush=True)
        lean.serve_forever()  # until the benchmark ends the process
        return
    srv = VisionServer() if args.vision else ChatServer(delay=args.delay,
                                                        keep_alive=args.keep_alive)
    print(srv.url, flush=True)
    srv.httpd.serve_forever()  # until the benchmark ends the process


if __name__ == "__main__":
    main()
