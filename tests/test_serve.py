"""The JSON API on a real uvicorn server (127.0.0.1, random port) with httpx."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pandas as pd
import pytest

from howtocap.errors import HowtocapError, InputError
from howtocap.search import Searcher
from howtocap.serve import create_app
from search_support import LLM_SHIFT, Renamed, ServerThread, encoder, shared_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_run(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(run: Path) -> Iterator[ServerThread]:
    with ServerThread(create_app(run, searcher=Searcher.open(run, encoder()), max_k=50)) as srv:
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


def test_video_list_detail_and_thumbnail(client: httpx.Client, run: Path) -> None:
    assert [v["video_id"] for v in client.get("/api/videos").json()] == ["garage", "kitchen"]
    d = client.get("/api/videos/kitchen").json()
    aligned = pd.read_parquet(run / "aligned.parquet").query("video_id == 'kitchen'")
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
    for p in (f"/media/{video_file}", f"/media/{str(run / 'aligned.parquet')}"):
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
    for name in ("videos.parquet", "aligned.parquet", "subtitles.parquet"):
        (bare / name).write_bytes((run / name).read_bytes())
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
