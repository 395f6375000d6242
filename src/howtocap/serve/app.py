"""The web page and JSON API over one run directory (FastAPI). Besides its static files and
the run's tables and cache it reads only video files registered in ``DIR/videos.parquet``: a
URL's video id is looked up there, never joined into a path, so ``..`` or encoded slashes can
only give 404 (who may connect: ``guard.py``). Search answers on the event loop (a thread hop
costs more than the HNSW search) with JSON built from the index's columns."""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import json
import logging
import math
import mimetypes
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import pandas as pd
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from howtocap.atomic import atomic_write_bytes
from howtocap.clips.window import window_middle
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import safe_name
from howtocap.search import BY, BY_CHOICES, K
from howtocap.search.index import read_meta
from howtocap.search.query import Hit, Ranked, Searcher
from howtocap.serve.defaults import HOST, MAX_BODY_BYTES, MAX_K, MAX_QUERY_CHARS, PORT, RATE_LIMIT
from howtocap.serve.guard import Guard, Limits, Metrics, check_listen

if TYPE_CHECKING:
    from howtocap.encoders.base import Encoder

log = logging.getLogger("howtocap.serve")
STATIC = Path(__file__).parent / "static"
THUMB_WIDTH = 320
CONTEXT_SECONDS = 3.0  # subtitle lines this close to a clip are shown with it
MAX_CONTEXT_LINES = 8
ROW_CACHE = 50_000  # rows whose static JSON part is kept (a short string each)


class SearchBody(BaseModel):
    q: str
    k: int = K
    by: str = BY


SEARCH_PARAMS = [
    {"name": "q", "in": "query", "required": True, "schema": {"type": "string"},
     "description": "What to look for."},
    {"name": "k", "in": "query", "schema": {"type": "integer", "default": K, "minimum": 1},
     "description": "Number of results (at most the server's --max-k)."},
    {"name": "by", "in": "query", "schema": {"type": "string", "default": BY,
                                             "enum": list(BY_CHOICES)},
     "description": "Compare with caption text, clip video, or both."},
]


class ContextLine(BaseModel):
    start: float | None
    end: float | None
    text: str
    in_clip: bool


class HitOut(Hit):
    media: str | None = None
    thumbnail: str | None = None
    page: str
    context: list[ContextLine]


class SearchOut(BaseModel):
    query: str
    k: int
    by: str
    took_ms: float
    hits: list[HitOut]


def _by_video(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    if df is None or not len(df):
        return {}
    df = df.sort_values(["video_id", "start", "end"], kind="stable")
    return {str(v): g.reset_index(drop=True) for v, g in df.groupby("video_id", sort=False)}


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return round(f, 3) if np.isfinite(f) else None


class _Lines:
    """One video's subtitle lines (sorted by start), searched by time with bisection."""

    def __init__(self, g: pd.DataFrame) -> None:
        self.starts = g["start"].to_numpy(float).tolist()
        self.ends = g["end"].to_numpy(float).tolist()
        self.max_end = np.maximum.accumulate(g["end"].to_numpy(float)).tolist()
        self.texts = g["text"].astype(str).tolist()

    def near(self, start: float, end: float) -> list[dict[str, Any]]:
        """Lines overlapping ``[start - CONTEXT_SECONDS, end + CONTEXT_SECONDS]``."""
        lo, hi = start - CONTEXT_SECONDS, end + CONTEXT_SECONDS
        first = bisect.bisect_left(self.max_end, lo)  # before it every line ends too early
        last = bisect.bisect_right(self.starts, hi)  # from it every line starts too late
        near = (i for i in range(first, last) if self.ends[i] >= lo)
        return [{"start": _num(self.starts[i]), "end": _num(self.ends[i]), "text": self.texts[i],
                 "in_clip": bool(self.ends[i] > start and self.starts[i] < end)}
                for i in itertools.islice(near, MAX_CONTEXT_LINES)]


class Dataset:
    """The run's tables, loaded once, keyed by video id."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise InputError(root, "run directory does not exist")
        rd = RunDir(root, create=False)
        self.paths: dict[str, Path | None] = {
            str(r.video_id): (Path(r.video_path).resolve() if r.video_path else None)
            for r in rd.table("videos").itertuples()}
        self.subtitles, self.aligned, self.captions = (
            _by_video(rd.table(t) if rd.has_table(t) else None)
            for t in ("subtitles", "aligned", "captions"))
        ids = set(self.paths) | set(self.subtitles) | set(self.aligned) | set(self.captions)
        self.video_ids = sorted(ids)
        self.known = frozenset(ids)
        # checked once: result cards are built per request and must stay cheap
        self.has_file = {v: bool(p is not None and p.is_file()) for v, p in self.paths.items()}
        self.lines = {v: _Lines(g) for v, g in self.subtitles.items()}

    def video_file(self, video_id: str) -> Path:
        if video_id not in self.known:
            raise HTTPException(404, f"unknown video id {video_id!r}")
        if (path := self.paths.get(video_id)) is None or not path.is_file():
            raise HTTPException(404, f"video {video_id!r} has no video file")
        return path

    def summary(self, video_id: str) -> dict[str, Any]:
        return {"video_id": video_id, "has_file": self.has_file.get(video_id, False),
                "n_subtitles": len(self.subtitles.get(video_id, ())),
                "n_captions": len(self.aligned.get(video_id, self.captions.get(video_id, ()))),
                "page": f"/video/{quote(video_id, safe='')}"}

    def detail(self, video_id: str) -> dict[str, Any]:
        """Every caption with its ASR lines, LLM times and aligned times (the timeline page)."""
        if video_id not in self.known:
            raise HTTPException(404, f"unknown video id {video_id!r}")
        aligned = self.aligned.get(video_id)
        captions = [
            {"text": str(r.text), "llm_start": _num(r.orig_start), "llm_end": _num(r.orig_end),
             "start": _num(r.start), "end": _num(r.end), "score": _num(r.score),
             "kept": bool(r.kept), "block": int(r.block)} for r in aligned.itertuples()
        ] if aligned is not None else [
            {"text": str(r.text), "llm_start": _num(r.start), "llm_end": _num(r.end),
             "start": None, "end": None, "score": None, "kept": None, "block": int(r.block)}
            for r in self.captions.get(video_id, pd.DataFrame()).itertuples()]
        subtitles = [{"start": _num(r.start), "end": _num(r.end), "text": str(r.text),
                      "source": str(r.source)}
                     for r in self.subtitles.get(video_id, pd.DataFrame()).itertuples()]
        ends = [x for c in captions for x in (c["llm_end"], c["end"]) if x is not None]
        ends += [s["end"] for s in subtitles if s["end"] is not None]
        out = self.summary(video_id)
        return out | {"media": f"/media/{quote(video_id, safe='')}" if out["has_file"] else None,
                      "duration": max(ends) if ends else 0.0, "aligned": aligned is not None,
                      "subtitles": subtitles, "captions": captions}


def _finite(x: Any) -> float | None:
    f = float(x)
    return f if np.isfinite(f) else None


def _fragment(c: dict[str, Any], data: Dataset, i: int) -> bytes:
    """Row ``i``'s JSON object without its scores, left open for them."""
    vid = str(c["video_id"][i])
    start, end = _finite(c["start"][i]), _finite(c["end"][i])
    o_start, o_end = _finite(c["orig_start"][i]), _finite(c["orig_end"][i])
    # context spans both the aligned and the LLM's times
    lo = min((x for x in (start, o_start) if x is not None), default=0.0)
    hi = max((x for x in (end, o_end) if x is not None), default=lo)
    q = quote(vid, safe="")
    has_file = data.has_file.get(vid, False)
    lines = data.lines.get(vid)
    return _dumps({"video_id": vid, "start": start, "end": end, "text": str(c["text"][i]),
                   "orig_start": o_start, "orig_end": o_end, "row": i,
                   "media": f"/media/{q}" if has_file else None,
                   "thumbnail": f"/api/videos/{q}/thumbnail?t={thumb_time(start, end):.1f}"
                   if has_file else None, "page": f"/video/{q}",
                   "context": [] if lines is None else lines.near(lo, hi)})[:-1]


class HitRecords:
    """Search results as JSON bytes built straight from the index's columns: a row never
    changes while the server runs, so all but its scores is serialised once per row (the
    serialisation was a third of a request's cost)."""

    def __init__(self, searcher: Searcher, data: Dataset) -> None:
        self.cols = searcher.columns
        self.data = data
        # a function of the columns, not a bound method: no cycle keeping the records alive
        self.fragment = functools.lru_cache(maxsize=ROW_CACHE)(
            functools.partial(_fragment, self.cols, data))

    def hits_json(self, r: Ranked) -> bytes:
        n = len(r.ids)
        text = [None] * n if r.text is None else r.text.tolist()
        video = [None] * n if r.video is None else r.video.tolist()
        return b"[" + b",".join(
            b"%s,\"score\":%s,\"text_score\":%s,\"video_score\":%s}" % (
                self.fragment(i), _score(s), _score(t), _score(v))
            for i, s, t, v in zip(r.ids.tolist(), r.scores.tolist(), text, video, strict=True)
        ) + b"]"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _score(x: float | None) -> bytes:
    return repr(round(x, 6)).encode() if x is not None and math.isfinite(x) else b"null"


def thumb_time(start: float | None, end: float | None) -> float:
    """A hit's thumbnail shows its window's middle, as the clip export's ``.jpg`` does: the
    start of an aligned window is where the step before it ends."""
    return 0.0 if start is None else max(window_middle(start, start if end is None else end), 0.0)


def thumbnail_jpeg(path: Path, t: float, width: int = THUMB_WIDTH) -> bytes:
    """The frame shown at ``t`` (``io.video.frame_at``), at most ``width`` wide, as JPEG."""
    from howtocap.io.video import frame_at

    img = frame_at(path, t)
    if img.width > width:
        img = img.resize((width, max(1, round(img.height * width / img.width))))
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=82)
    return buf.getvalue()


def create_app(run_dir: str | Path, *, encoder: str | Encoder | None = None,
               searcher: Searcher | None = None, max_k: int = MAX_K,
               max_query_chars: int = MAX_QUERY_CHARS, device: str | None = None,
               limits: Limits | None = None) -> FastAPI:
    """The app for one run directory; loads the tables and the index (if any: else search
    answers 409 with how to build one) up front, or shares ``searcher``. FAISS gets one OpenMP
    thread (process-wide): with many one-query searches at once, more threads per search
    would only fight over the cores."""
    import faiss

    faiss.omp_set_num_threads(1)
    root = Path(run_dir).resolve()
    data = Dataset(root)
    if searcher is None and read_meta(root) is not None:
        searcher = Searcher.open(root, encoder, device=device)
    thumbs_dir = RunDir(root, create=False).cache_dir / "thumbs"
    thumb_lock = threading.Lock()

    app = FastAPI(title="howtocap", version="1", openapi_url="/api/openapi.json",
                  docs_url="/api/docs", redoc_url=None,
                  description="Moment search over a howtocap run directory.")
    metrics = Metrics()
    metrics.clips.set(len(searcher) if searcher is not None else 0)
    app.add_middleware(Guard, limits=limits or Limits(), metrics=metrics)
    records = HitRecords(searcher, data) if searcher is not None else None

    @app.exception_handler(HowtocapError)
    async def _howtocap_error(_: Request, exc: HowtocapError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        msgs = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":
                msgs.append(f"malformed JSON body ({err.get('ctx', {}).get('error', 'invalid')})")
                continue
            loc = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body", "query"))
            msgs.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return JSONResponse({"detail": "; ".join(msgs) or "invalid request"}, status_code=422)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return JSONResponse({"detail": f"internal error ({type(exc).__name__})"}, 500)

    def run_search(q: str | None, k: int, by: str) -> Response:
        q = (q or "").strip()
        if not q:
            raise HTTPException(422, "q: empty query")
        if len(q) > max_query_chars:
            raise HTTPException(422, f"q: query longer than {max_query_chars} characters")
        if not q.isprintable():
            raise HTTPException(422, "q: contains control characters")
        if not 1 <= k <= max_k:
            raise HTTPException(422, f"k: must be between 1 and {max_k}")
        if by not in BY_CHOICES:
            raise HTTPException(422, f"by: must be one of {', '.join(BY_CHOICES)}")
        if searcher is None:
            raise HTTPException(409, f"no index in {root}: run `howtocap index {root}` first")
        assert records is not None
        t0 = time.perf_counter()
        ranked = searcher.search_rows(q, k=k, by=by)
        took = time.perf_counter() - t0
        metrics.search.labels(by).observe(took)
        head = _dumps({"query": q, "k": k, "by": by, "took_ms": round(took * 1000, 2)})
        # bytes, not a dict: FastAPI would re-validate every hit against SearchOut
        return Response(head[:-1] + b',"hits":' + records.hits_json(ranked) + b"}",
                        media_type="application/json")

    @app.get("/api/search", tags=["search"], response_model=SearchOut,
             openapi_extra={"parameters": SEARCH_PARAMS})
    async def search_get(request: Request) -> Response:
        """Clips whose caption (``by=text``), video (``video``) or both best match ``q``."""
        # parameters parsed by hand: FastAPI's per-parameter validation cost more than the
        # HNSW search (profiled); they are declared for the docs in SEARCH_PARAMS
        params = request.query_params
        k_raw = params.get("k", str(K))
        try:
            k = int(k_raw)
        except ValueError:
            raise HTTPException(422, f"k: Input should be a valid integer, unable to parse "
                                     f"{k_raw[:40]!r}") from None
        return run_search(params.get("q"), k, params.get("by", BY))

    @app.post("/api/search", tags=["search"], response_model=SearchOut)
    async def search_post(body: SearchBody) -> Response:
        """Same as ``GET /api/search`` with a JSON body ``{"q", "k", "by"}``."""
        return run_search(body.q, body.k, body.by)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, Any]:
        """Liveness for load balancers (needs no API key and is not rate limited)."""
        return {"status": "ok", "clips": len(searcher) if searcher is not None else 0}

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def prometheus() -> Response:
        """Prometheus text format: requests by route and status, latency histograms."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/info", tags=["videos"])
    def info() -> dict[str, Any]:
        return {"run_dir": str(root), "videos": len(data.video_ids),
                "index": None if searcher is None else {k: searcher.meta.get(k) for k in (
                    "encoder", "n", "dim", "index_type", "source")},
                "max_k": max_k, "max_query_chars": max_query_chars}

    @app.get("/api/videos", tags=["videos"])
    def videos() -> list[dict[str, Any]]:
        return [data.summary(v) for v in data.video_ids]

    @app.get("/api/videos/{video_id:path}/thumbnail", tags=["videos"],
             response_class=Response, responses={200: {"content": {"image/jpeg": {}}}})
    def thumbnail(video_id: str, t: float = 0.0) -> Response:
        path = data.video_file(video_id)
        if not np.isfinite(t) or not 0 <= t <= 1e6:
            raise HTTPException(422, "t: must be between 0 and 1e6 seconds")
        cache = thumbs_dir / safe_name(video_id) / f"{int(round(t * 10))}.jpg"
        if cache.exists():
            jpeg = cache.read_bytes()
        else:
            jpeg = thumbnail_jpeg(path, t)
            with thumb_lock:
                atomic_write_bytes(cache, jpeg)
        return Response(jpeg, media_type="image/jpeg",
                        headers={"Cache-Control": "public, max-age=3600"})

    @app.get("/api/videos/{video_id:path}", tags=["videos"])
    def video(video_id: str) -> dict[str, Any]:
        return data.detail(video_id)

    @app.get("/media/{video_id:path}", tags=["media"], response_class=FileResponse)
    def media(video_id: str) -> FileResponse:
        """The registered video file; supports HTTP Range (206 partial content) for seeking."""
        path = data.video_file(video_id)
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return FileResponse(path, media_type=mime)

    @app.get("/", include_in_schema=False)
    def index_page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/video/{video_id:path}", include_in_schema=False)
    def video_page(video_id: str) -> FileResponse:
        # an unknown id still gets the page (its script shows the API's error), but as a 404
        return FileResponse(STATIC / "video.html", media_type="text/html",
                            status_code=200 if video_id in data.known else 404)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/{rest:path}", include_in_schema=False)
    def api_404(rest: str) -> None:
        raise HTTPException(404, f"no such API endpoint /api/{rest}")

    return app


def serve(run_dir: str | Path, *, host: str = HOST, port: int = PORT,
          encoder: str | None = None, device: str | None = None, max_k: int = MAX_K,
          max_query_chars: int = MAX_QUERY_CHARS, log_level: str = "warning",
          api_key: str | None = None, public: bool = False, rate_limit: float = RATE_LIMIT,
          max_body_bytes: int = MAX_BODY_BYTES, max_connections: int = 1_000) -> None:
    """Serve the page and API until interrupted (``howtocap serve DIR``). A non-loopback
    ``host`` is refused before anything loads unless ``api_key`` or ``public``; beyond
    ``max_connections`` uvicorn answers 503 instead of queueing without bound."""
    import uvicorn

    check_listen(host, api_key=api_key, public=public)
    limits = Limits(api_key=api_key, rate_per_s=rate_limit, max_body_bytes=max_body_bytes)
    app = create_app(run_dir, encoder=encoder, device=device, max_k=max_k,
                     max_query_chars=max_query_chars, limits=limits)
    auth = "API key required" if api_key else "no API key"
    print(f"howtocap: serving {Path(run_dir).resolve()} on http://{host}:{port}/ ({auth}; "
          f"metrics at /metrics)", flush=True)
    if public and not api_key:
        print("howtocap: warning: --public without an API key: anyone who can reach this "
              "machine can search and download the videos", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False,
                limit_concurrency=max_connections)
