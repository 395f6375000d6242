"""A real HTTP file server on 127.0.0.1 for the download tests and benchmark, with scripted
misbehaviour by path prefix: ``/hang/…`` never answers (until the server stops), ``/nolen/…``
sends no Content-Length (a size limit must abort mid-stream), ``/slow/…`` trickles its bytes
(a kill lands mid-download), ``/page/NAME`` serves NAME.mp4 at a URL without an extension,
``/status/CODE/…`` answers that HTTP status;
``delay`` adds a fixed wait to every request (so concurrency
matters in the benchmark). It counts requests and bytes sent per path."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.chat_server import serving

TYPES = {".mp4": "video/mp4", ".vtt": "text/vtt", ".srt": "application/x-subrip"}


class MediaServer:
    def __init__(self, root: Path, *, delay: float = 0.0, trickle: float = 0.05) -> None:
        self.root, self.delay, self.trickle = Path(root), delay, trickle
        self.requests: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.stop = threading.Event()
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                with lock:
                    server.requests[path] += 1
                if server.delay:
                    time.sleep(server.delay)
                mode, _, rest = path.lstrip("/").partition("/")
                if mode == "status":  # /status/429/… answers that code
                    self.send_error(int(rest.split("/")[0]))
                    return
                if mode == "hang":
                    server.stop.wait(60)  # bounded: the server's end releases it
                    return
                name = {"nolen": rest, "slow": rest, "page": rest + ".mp4"}.get(
                    mode, path.lstrip("/"))
                file = server.root / name
                if not file.is_file():
                    self.send_error(404, "Not Found")
                    return
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", TYPES.get(file.suffix, "video/mp4"))
                if mode != "nolen":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                step = 4096 if mode == "slow" else 1 << 20
                try:
                    for i in range(0, len(data), step):
                        self.wfile.write(data[i:i + step])
                        with lock:
                            server.sent[path] += len(data[i:i + step])
                        if mode == "slow" and server.stop.wait(server.trickle):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    return
                if mode == "nolen":
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@contextmanager
def media_server(root: Path, **kw: float) -> Iterator[MediaServer]:
    srv = MediaServer(root, **kw)
    with serving(srv):
        try:
            yield srv
        finally:
            srv.stop.set()  # stalled replies end before the server closes
