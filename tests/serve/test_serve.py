"""The JSON API on a real uvicorn server (127.0.0.1, random port) with httpx."""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.search.query import Searcher
from howtocap.serve import create_app
from howtocap.serve.guard import Limits
from tests.support.search import LLM_SHIFT, Renamed, ServerThread, encoder, shared_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_run(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def searcher(run: Path) -> Searcher:
    return Searcher.open(run, encoder())


@pytest.fixture(scope="module")
def server(run: Path, searcher: Searcher) -> Iterator[ServerThread]:
    # no rate limit here: these tests are about answers; the guard has its own servers below
    with ServerThread(create_app(run, searcher=searcher, max_k=50,
                                 limits=Limits(rate_per_s=0))) as srv:
        yield srv


@pytest.fixture()
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def raw_get(server: ServerThread, path: str) -> tuple[int, bytes]:
    """Send the path byte for byte (httpx would normalise ``..`` away)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_search_get_and_post(client: httpx.Client) -> None:
    r = client.get("/api/search", params={"q": "brush the cat's fur", "k": 3})
    assert r.status_code == 200
    data = r.json()
    top = data["hits"][0]
    assert (top["video_id"], top["start"], top["end"]) == ("kitchen", 3.0, 6.0)
    assert top["orig_start"] == 3.0 + LLM_SHIFT
    assert top["media"] == "/media/kitchen" and top["page"] == "/video/kitchen"
    lines = [c["text"] for c in top["context"] if c["in_clip"]]
    assert any("comb the cat" in t for t in lines)  # the ASR line spoken during the clip
    assert len(data["hits"]) == 3
    r = client.post("/api/search", json={"q": "count and sort the coins", "k": 1, "by": "both"})
    assert r.status_code == 200 and r.json()["hits"][0]["video_id"] == "garage"
    assert r.json()["hits"][0]["text"] == "count and sort the coins"


def test_search_by_meaning_not_by_string(client: httpx.Client) -> None:
    """Over HTTP: a paraphrase finds its clip through the text embedding, and ``by=video``
    answers a query naming what a clip's photograph shows (that the frames alone decide is
    checked in test_search.py on an index whose captions say nothing)."""
    r = client.get("/api/search", params={"q": "the spaceship takes off", "k": 2})
    top = r.json()["hits"][0]
    assert (top["video_id"], top["start"], top["text"]) == ("kitchen", 6.0, "launch the rocket")
    r = client.post("/api/search", json={"q": "a photo of a motorcycle", "k": 6, "by": "video"})
    hits = r.json()["hits"]
    assert len(hits) == 6
    assert (hits[0]["video_id"], hits[0]["start"]) == ("garage", 0.0)
    assert hits[0]["text"] == "check the motorcycle tires"


def test_video_list_detail_and_thumbnail(client: httpx.Client, run: Path) -> None:
    assert [v["video_id"] for v in client.get("/api/videos").json()] == ["garage", "kitchen"]
    d = client.get("/api/videos/kitchen").json()
    aligned = pd.read_parquet(run / "aligned").query("video_id == 'kitchen'")
    assert len(d["captions"]) == len(aligned) == 4
    kept = [c for c in d["captions"] if c["kept"]]
    assert len(kept) == 3 and all(c["llm_start"] - c["start"] == LLM_SHIFT for c in kept)
    assert [c for c in d["captions"] if not c["kept"]][0]["text"].startswith("a dropped")
    assert len(d["subtitles"]) == 3 and d["media"] == "/media/kitchen"
    r = client.get("/api/videos/kitchen/thumbnail", params={"t": 4.0})
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    assert r.content[:2] == b"\xff\xd8"
    again = client.get("/api/videos/kitchen/thumbnail", params={"t": 4.0})
    assert again.content == r.content
    assert client.get("/api/videos/kitchen/thumbnail", params={"t": -1}).status_code == 422


def test_thumbnails_show_the_middle_of_the_window(client: httpx.Client, run: Path) -> None:
    """A hit's thumbnail is the frame at its window's middle (the clip export's .jpg rule,
    ``clips.window.window_middle``), never at its start, which after alignment is where the
    step before ends; the served picture is that frame and not the previous step's."""
    from urllib.parse import parse_qs, urlparse

    from howtocap.clips.window import window_middle
    from howtocap.io.video import decode_jpeg, frame_at
    from howtocap.serve.app import thumbnail_jpeg

    paths = pd.read_parquet(run / "videos.parquet").set_index("video_id")["video_path"]
    hits = client.get("/api/search", params={"q": "launch the rocket", "k": 6}).json()["hits"]
    assert len(hits) == 6
    for hit in hits:
        t = float(parse_qs(urlparse(hit["thumbnail"]).query)["t"][0])
        assert hit["end"] - hit["start"] >= 1.0
        assert t == pytest.approx(window_middle(hit["start"], hit["end"]), abs=0.05)
        assert abs(t - hit["start"]) >= 0.5
        jpeg = client.get(hit["thumbnail"]).content
        path = Path(paths[hit["video_id"]])
        assert jpeg == thumbnail_jpeg(path, t)
        if hit["start"] >= 1.0:  # a step before it exists: the picture is not that step
            shown = decode_jpeg(jpeg).astype(float)
            own, before = (np.asarray(frame_at(path, x).resize(shown.shape[1::-1]), float)
                           for x in (t, hit["start"] - 1.0))
            assert np.abs(shown - own).mean() < 0.5 * np.abs(shown - before).mean()


def test_range_requests_return_the_right_bytes(client: httpx.Client, run: Path) -> None:
    path = Path(pd.read_parquet(run / "videos.parquet").set_index("video_id")
                .loc["kitchen", "video_path"])
    data = path.read_bytes()
    r = client.get("/media/kitchen", headers={"Range": "bytes=100-1099"})
    assert r.status_code == 206
    assert r.content == data[100:1100]
    assert r.headers["content-range"] == f"bytes 100-1099/{len(data)}"
    r = client.get("/media/kitchen", headers={"Range": f"bytes={len(data) - 10}-"})
    assert r.status_code == 206 and r.content == data[-10:]
    full = client.get("/media/kitchen")
    assert full.status_code == 200 and full.content == data
    assert full.headers["content-type"] == "video/mp4"


@pytest.mark.parametrize("path", [
    "/media/../../etc/passwd", "/media/..%2F..%2Fetc%2Fpasswd", "/media/%2e%2e/%2e%2e/etc/passwd",
    "/media//etc/passwd", "/media/%2Fetc%2Fpasswd", "/media/kitchen/../../../etc/passwd",
    "/static/../../../../etc/passwd", "/static/..%2F..%2F..%2Fetc%2Fpasswd",
    "/api/videos/..%2F..%2Fetc%2Fpasswd/thumbnail?t=0", "/media/unknown",
])
def test_nothing_outside_the_dataset_is_served(server: ServerThread, path: str) -> None:
    status, body = raw_get(server, path)
    assert 400 <= status < 500
    assert b"root:" not in body


def test_absolute_path_of_a_real_file_is_not_a_video_id(server: ServerThread, run: Path,
                                                         client: httpx.Client) -> None:
    video_file = pd.read_parquet(run / "videos.parquet")["video_path"].iloc[0]
    shard = str(RunDir(run).table_files("aligned")[0])
    for p in (f"/media/{video_file}", f"/media/{shard}"):
        r = client.get(p)
        assert r.status_code == 404 and "unknown video id" in r.json()["detail"]


@pytest.mark.parametrize(("method", "url", "kw", "status", "words"), [
    ("GET", "/api/search", {"params": {"q": ""}}, 422, "empty query"),
    ("GET", "/api/search", {"params": {"q": "   "}}, 422, "empty query"),
    ("GET", "/api/search", {}, 422, "empty query"),
    ("GET", "/api/search", {"params": {"q": "x", "k": 0}}, 422, "between 1 and 50"),
    ("GET", "/api/search", {"params": {"q": "x", "k": 10**9}}, 422, "between 1 and 50"),
    ("GET", "/api/search", {"params": {"q": "x", "k": "ten"}}, 422, "valid integer"),
    ("GET", "/api/search", {"params": {"q": "x", "by": "smell"}}, 422, "by: must be one of"),
    ("GET", "/api/search", {"params": {"q": "x" * 501}}, 422, "longer than 500"),
    ("POST", "/api/search", {"content": b"{not json", "headers": {
        "content-type": "application/json"}}, 422, "malformed JSON"),
    ("POST", "/api/search", {"json": {"k": 3}}, 422, "q: Field required"),
    ("POST", "/api/search", {"json": {"q": "x", "k": -5}}, 422, "between 1 and 50"),
    ("GET", "/api/videos/nope", {}, 404, "unknown video id 'nope'"),
    ("GET", "/api/videos/nope/thumbnail", {}, 404, "unknown video id"),
    ("GET", "/api/nothing/here", {}, 404, "no such API endpoint"),
])
def test_bad_requests_get_json_4xx_and_server_stays_up(
        client: httpx.Client, method: str, url: str, kw: dict, status: int, words: str) -> None:
    r = client.request(method, url, **kw)
    assert r.status_code == status
    assert words in r.json()["detail"]
    assert client.get("/api/search", params={"q": "rocket", "k": 1}).status_code == 200


def test_openapi_schema_lists_the_api(client: httpx.Client) -> None:
    schema = client.get("/api/openapi.json").json()
    assert {"/api/search", "/api/videos", "/api/videos/{video_id}"} <= set(schema["paths"])
    assert "post" in schema["paths"]["/api/search"]


def test_concurrent_searches_all_succeed(server: ServerThread) -> None:
    queries = ["pour coffee", "brush the cat", "launch the rocket", "motorcycle tires",
               "count the coins", "telescope moon"] * 8

    def one(q: str) -> int:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            return c.get("/api/search", params={"q": q, "k": 5, "by": "both"}).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(one, queries)) == {200}


def test_without_index_search_says_how_to_build_one(tmp_path: Path, run: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "videos.parquet").write_bytes((run / "videos.parquet").read_bytes())
    for name in ("aligned", "subtitles"):  # the tables, without status or index
        shutil.copytree(run / name, bare / name)
    with ServerThread(create_app(bare)) as srv, httpx.Client(base_url=srv.url) as c:
        r = c.get("/api/search", params={"q": "x"})
        assert r.status_code == 409 and "howtocap index" in r.json()["detail"]
        assert c.get("/api/videos/garage").status_code == 200
        assert c.get("/").status_code == 200 and "<form" in c.get("/").text


def test_index_of_another_encoder_is_refused_at_startup(run: Path) -> None:
    with pytest.raises(HowtocapError, match=r"built with encoder .*--rebuild"):
        create_app(run, encoder=Renamed(encoder(), "another-encoder"))


def test_index_of_an_older_format_is_refused(tmp_path: Path, run: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run / "index", copy / "index")
    meta = json.loads((copy / "index" / "meta.json").read_text())
    (copy / "index" / "meta.json").write_text(json.dumps({**meta, "version": 0}))
    with pytest.raises(InputError, match="rebuild"):
        Searcher.open(copy, encoder())


# -- the guard: who may listen where, API key, limits, rate, health and metrics --------------
KEY = "k3y-for-tests-0123456789"


def raw(port: int, data: bytes, body_chunks: list[bytes] = ()) -> tuple[int, dict, bytes]:
    """One request byte for byte on its own connection; reads until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(data)
        for chunk in body_chunks:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.fixture(scope="module")
def keyed(run: Path, searcher: Searcher) -> Iterator[ServerThread]:
    limits = Limits(api_key=KEY, rate_per_s=0, max_body_bytes=2_000, max_url_bytes=1_000)
    with ServerThread(create_app(run, searcher=searcher, limits=limits)) as srv:
        yield srv


def test_non_loopback_host_is_refused_in_one_line(run: Path) -> None:
    from typer.testing import CliRunner

    from howtocap.cli import app
    from howtocap.serve import serve

    with pytest.raises(HowtocapError, match=r"refusing to listen on 0\.0\.0\.0 .*--api-key-env"):
        serve(run, host="0.0.0.0")
    res = CliRunner().invoke(app, ["serve", str(run), "--host", "192.0.2.7"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "refusing to listen on 192.0.2.7" in out and "--public" in out
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, ["serve", str(run), "--host", "0.0.0.0", "--api-key-env",
                                   "HOWTOCAP_TEST_UNSET_VAR"])
    assert res.exit_code == 2 and "HOWTOCAP_TEST_UNSET_VAR is not set" in " ".join(
        res.output.split())


def test_listen_rules() -> None:
    from howtocap.serve.guard import check_listen, is_loopback

    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        check_listen(host, api_key=None, public=False)
    for host in ("0.0.0.0", "::", "192.0.2.7", "no-such-host.invalid"):
        assert not is_loopback(host), host
    check_listen("0.0.0.0", api_key=KEY, public=False)
    check_listen("0.0.0.0", api_key=None, public=True)
    with pytest.raises(HowtocapError, match="too short"):
        check_listen("0.0.0.0", api_key="short", public=False)


def test_api_key_required_and_accepted(keyed: ServerThread) -> None:
    import base64

    url = keyed.url + "/api/search"
    params = {"q": "brush the cat", "k": 1}
    r = httpx.get(url, params=params)
    assert r.status_code == 401 and "API key" in r.json()["detail"]
    assert r.headers["www-authenticate"].startswith("Basic")  # a browser asks for it
    assert httpx.get(url, params=params, headers={"X-API-Key": KEY + "x"}).status_code == 401
    assert httpx.get(url, params=params,
                     headers={"Authorization": "Bearer " + KEY[:-1]}).status_code == 401
    basic = base64.b64encode(f"anyone:{KEY}".encode()).decode()
    for headers in ({"Authorization": f"Bearer {KEY}"}, {"X-API-Key": KEY},
                    {"Authorization": f"Basic {basic}"}):
        r = httpx.get(url, params=params, headers=headers)
        assert r.status_code == 200, headers
        assert r.json()["hits"][0]["video_id"] == "kitchen"
    for path in ("/media/kitchen", "/api/videos", "/", "/metrics"):
        assert httpx.get(keyed.url + path).status_code == 401, path
    assert httpx.get(keyed.url + "/healthz").status_code == 200  # load balancers need no key


@pytest.mark.parametrize(("params", "status", "words"), [
    ({"q": "x" * 501}, 422, "longer than 500"),
    ({"q": "x", "k": 101}, 422, "between 1 and 100"),
    ({"q": "cut\x00the tomato"}, 422, "control characters"),
])
def test_query_limits(keyed: ServerThread, params: dict, status: int, words: str) -> None:
    r = httpx.get(keyed.url + "/api/search", params=params, headers={"X-API-Key": KEY})
    assert r.status_code == status and words in r.json()["detail"]


def test_body_and_url_limits(keyed: ServerThread) -> None:
    auth = f"X-API-Key: {KEY}\r\nContent-Type: application/json\r\n"
    # a declared 50 MB body is refused at once, without waiting for (or reading) it
    status, headers, body = raw(keyed.port, (
        f"POST /api/search HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 50000000\r\n\r\n")
        .encode())
    assert status == 413 and b"larger than 2000 bytes" in body
    assert headers[b"connection"] == b"close"
    # a chunked body (no Content-Length) is cut off as it streams in
    chunk = b"800\r\n" + b"a" * 0x800 + b"\r\n"
    status, _, body = raw(keyed.port, (
        "POST /api/search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"{auth}\r\n").encode(), [chunk] * 4 + [b"0\r\n\r\n"])
    assert status == 413, body
    r = httpx.post(keyed.url + "/api/search", headers={"X-API-Key": KEY},
                   json={"q": "brush the cat", "pad": "p" * 1_500})  # under the limit: fine
    assert r.status_code == 200
    r = httpx.get(keyed.url + "/api/search?q=" + "u" * 1_200, headers={"X-API-Key": KEY})
    assert r.status_code == 414
    assert httpx.get(keyed.url + "/healthz").json()["status"] == "ok"


def test_rate_limit_answers_429_with_retry_after(run: Path, searcher: Searcher) -> None:
    limits = Limits(rate_per_s=0.5, burst=3)
    with ServerThread(create_app(run, searcher=searcher, limits=limits)) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as c:
        got = [c.get("/api/search", params={"q": "coffee", "k": 1}) for _ in range(6)]
        statuses = [r.status_code for r in got]
        assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses
        limited = [r for r in got if r.status_code == 429]
        wait = int(limited[-1].headers["retry-after"])
        assert 1 <= wait <= 2 and "too many requests" in limited[-1].json()["detail"]
        # another client (as forwarded by a proxy on this machine) has its own budget
        other = c.get("/api/search", params={"q": "coffee", "k": 1},
                      headers={"X-Forwarded-For": "203.0.113.9"})
        assert other.status_code == 200
        assert c.get("/healthz").status_code == 200  # never limited
        time.sleep(wait)
        assert c.get("/api/search", params={"q": "coffee", "k": 1}).status_code == 200


def test_metrics_count_requests_and_latency(run: Path, searcher: Searcher) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with ServerThread(create_app(run, searcher=searcher, limits=Limits(rate_per_s=0))) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as c:
        for q in ("coffee", "rocket", "cat"):
            assert c.get("/api/search", params={"q": q, "by": "both"}).status_code == 200
        assert c.post("/api/search", json={"q": "coins"}).status_code == 200
        assert c.get("/api/videos/nope").status_code == 404
        assert c.get("/media/../../etc/passwd").status_code == 404
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(r.text) for s in fam.samples}

    def count(route: str, status: str, method: str = "GET") -> float:
        return samples.get(("howtocap_http_requests_total", (
            ("method", method), ("route", route), ("status", status))), 0.0)

    assert count("/api/search", "200") == 3
    assert count("/api/search", "200", "POST") == 1
    assert count("/api/videos/{video_id:path}", "404") == 1
    assert samples[("howtocap_http_request_duration_seconds_count",
                    (("route", "/api/search"),))] == 4
    assert samples[("howtocap_search_duration_seconds_count", (("by", "both"),))] == 3
    assert samples[("howtocap_search_duration_seconds_count", (("by", "text"),))] == 1
    assert samples[("howtocap_index_clips", ())] == len(searcher)


def test_healthz(server: ServerThread, searcher: Searcher) -> None:
    r = httpx.get(server.url + "/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "clips": len(searcher)}


@pytest.mark.parametrize("path", [
    "/api/videos/..%2F..%2F..%2Fetc%2Fpasswd/thumbnail?t=1",
    "/api/videos/../../../../etc/passwd/thumbnail?t=1",
    "/api/videos/%2Fetc%2Fpasswd/thumbnail?t=1", "/media/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/media/kitchen%2F..%2F..%2Fetc%2Fpasswd", "/video/..%2F..%2Fetc%2Fpasswd",
])
def test_traversal_on_media_and_thumbnail_routes(server: ServerThread, path: str) -> None:
    status, _, body = raw(server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n"
                                       "Connection: close\r\n\r\n".encode())
    assert 400 <= status < 500 and b"root:" not in body
