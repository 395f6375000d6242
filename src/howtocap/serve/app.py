"""The web page and JSON API over one run directory (FastAPI).

Safety model: the only files this server reads from disk are its own package's static files,
the run directory's tables and cache, and video files *registered in* ``DIR/videos.parquet``.
Video ids from a URL are looked up in that table, never joined into a path, so ``..``,
encoded slashes or absolute paths can only ever produce "unknown video" (404).
"""

from __future__ import annotations

import io
import logging
import mimetypes
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import pandas as pd
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from howtocap.errors import HowtocapError, InputError
from howtocap.rundir import RunDir, atomic_write_bytes, safe_name
from howtocap.search.index import read_meta
from howtocap.search.query import BY_CHOICES, Hit, Searcher

if TYPE_CHECKING:
    from howtocap.encoders.base import Encoder

log = logging.getLogger("howtocap.serve")
STATIC = Path(__file__).parent / "static"
THUMB_WIDTH = 320
CONTEXT_SECONDS = 3.0  # subtitle lines this close to a clip are shown with it
MAX_CONTEXT_LINES = 8


class SearchBody(BaseModel):
    q: str
    k: int = 10
    by: str = "text"


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


def _has(rd: RunDir, table: str) -> bool:
    return rd.table_path(table).exists() or rd.part_dir(table).exists()


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


class Dataset:
    """The run's tables, loaded once, keyed by video id."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise InputError(root, "run directory does not exist")
        self.root = root
        self.rd = RunDir(root, create=False)
        videos = self.rd.videos()
        self.paths: dict[str, Path | None] = {
            str(r.video_id): (Path(r.video_path).resolve() if r.video_path else None)
            for r in videos.itertuples()}
        self.subtitles = _by_video(self.rd.read_table("subtitles")
                                   if _has(self.rd, "subtitles") else None)
        self.aligned = _by_video(self.rd.read_table("aligned")
                                 if _has(self.rd, "aligned") else None)
        self.captions = _by_video(self.rd.read_table("captions")
                                  if _has(self.rd, "captions") else None)
        ids = set(self.paths) | set(self.subtitles) | set(self.aligned) | set(self.captions)
        self.video_ids = sorted(ids)
        self._known = set(ids)
        # checked once: result cards are built per request and must stay cheap
        self.has_file = {v: bool(p is not None and p.is_file()) for v, p in self.paths.items()}
        self._sub_arrays = {v: (g["start"].to_numpy(float), g["end"].to_numpy(float),
                                g["text"].astype(str).tolist())
                            for v, g in self.subtitles.items()}

    def video_file(self, video_id: str) -> Path:
        if video_id not in self._known:
            raise HTTPException(404, f"unknown video id {video_id!r}")
        path = self.paths.get(video_id)
        if path is None or not path.is_file():
            raise HTTPException(404, f"video {video_id!r} has no video file")
        return path

    def context(self, video_id: str, start: float, end: float) -> list[dict[str, Any]]:
        arrays = self._sub_arrays.get(video_id)
        if arrays is None:
            return []
        s, e, texts = arrays
        idx = np.flatnonzero((e >= start - CONTEXT_SECONDS) & (s <= end + CONTEXT_SECONDS))
        return [{"start": _num(s[i]), "end": _num(e[i]), "text": texts[i],
                 "in_clip": bool(e[i] > start and s[i] < end)}
                for i in idx[:MAX_CONTEXT_LINES]]

    def summary(self, video_id: str) -> dict[str, Any]:
        return {
            "video_id": video_id,
            "has_file": self.has_file.get(video_id, False),
            "n_subtitles": len(self.subtitles.get(video_id, ())),
            "n_captions": len(self.aligned.get(video_id, self.captions.get(video_id, ()))),
            "page": f"/video/{quote(video_id, safe='')}",
        }

    def detail(self, video_id: str) -> dict[str, Any]:
        """Every caption with its ASR lines, LLM times and aligned times (the timeline page)."""
        if video_id not in self._known:
            raise HTTPException(404, f"unknown video id {video_id!r}")
        subs = self.subtitles.get(video_id)
        captions: list[dict[str, Any]] = []
        aligned = self.aligned.get(video_id)
        if aligned is not None:
            for r in aligned.itertuples():
                captions.append({
                    "text": str(r.text), "llm_start": _num(r.orig_start),
                    "llm_end": _num(r.orig_end), "start": _num(r.start), "end": _num(r.end),
                    "score": _num(r.score), "kept": bool(r.kept), "block": int(r.block)})
        else:
            for r in self.captions.get(video_id, pd.DataFrame()).itertuples():
                captions.append({
                    "text": str(r.text), "llm_start": _num(r.start), "llm_end": _num(r.end),
                    "start": None, "end": None, "score": None, "kept": None,
                    "block": int(r.block)})
        subtitles = [] if subs is None else [
            {"start": _num(r.start), "end": _num(r.end), "text": str(r.text),
             "source": str(r.source)} for r in subs.itertuples()]
        ends = [x for c in captions for x in (c["llm_end"], c["end"]) if x is not None]
        ends += [s["end"] for s in subtitles if s["end"] is not None]
        out = self.summary(video_id)
        out.update({
            "media": f"/media/{quote(video_id, safe='')}" if out["has_file"] else None,
            "duration": max(ends) if ends else 0.0,
            "aligned": aligned is not None,
            "subtitles": subtitles,
            "captions": captions,
        })
        return out


def thumbnail_jpeg(path: Path, t: float, width: int = THUMB_WIDTH) -> bytes:
    """The first frame at or after ``t`` (the last frame if ``t`` is past the end), as JPEG."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(path, "has no video stream")
            stream = container.streams.video[0]
            if t > 0 and stream.time_base:
                container.seek(int(t / stream.time_base), stream=stream, backward=True)
            last = None
            for frame in container.decode(stream):
                last = frame
                if frame.time is not None and frame.time >= t - 1e-3:
                    break
    except av.error.FFmpegError as exc:
        raise InputError(path, f"cannot decode video ({exc})") from None
    if last is None:
        raise InputError(path, f"no frame at {t:.2f} s")
    img = last.to_image()
    if img.width > width:
        img = img.resize((width, max(1, round(img.height * width / img.width))))
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=82)
    return buf.getvalue()


def create_app(run_dir: str | Path, *, encoder: str | Encoder | None = None,
               searcher: Searcher | None = None, max_k: int = 100,
               max_query_chars: int = 500, device: str | None = None,
               faiss_threads: int | None = 1) -> FastAPI:
    """The app for one run directory. Loads the tables and (if present) the index up front.

    ``searcher`` lets a caller share an already opened index; without an index the page still
    shows videos and the search API answers 409 with how to build one. ``faiss_threads``
    (process-wide): a server answers many one-query searches at once, so one OpenMP thread per
    search is faster than several threads fighting over the cores (``None`` leaves it alone).
    """
    if faiss_threads is not None:
        import faiss

        faiss.omp_set_num_threads(faiss_threads)
    root = Path(run_dir).resolve()
    data = Dataset(root)
    if searcher is None and read_meta(root) is not None:
        searcher = Searcher.open(root, encoder, device=device)
    thumbs_dir = RunDir(root, create=False).cache_dir / "thumbs"
    thumb_lock = threading.Lock()

    app = FastAPI(title="howtocap", version="1", openapi_url="/api/openapi.json",
                  docs_url="/api/docs", redoc_url=None,
                  description="Moment search over a howtocap run directory.")
    app.state.dataset = data
    app.state.searcher = searcher

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

    def run_search(q: str | None, k: int, by: str) -> dict[str, Any]:
        q = (q or "").strip()
        if not q:
            raise HTTPException(422, "q: empty query")
        if len(q) > max_query_chars:
            raise HTTPException(422, f"q: query longer than {max_query_chars} characters")
        if not 1 <= k <= max_k:
            raise HTTPException(422, f"k: must be between 1 and {max_k}")
        if by not in BY_CHOICES:
            raise HTTPException(422, f"by: must be one of {', '.join(BY_CHOICES)}")
        if searcher is None:
            raise HTTPException(409, f"no index in {root}: run `howtocap index {root}` first")
        t0 = time.perf_counter()
        hits = searcher.search(q, k=k, by=by)
        took = (time.perf_counter() - t0) * 1000
        out = []
        for h in hits:
            d = h.to_dict()
            has_file = data.has_file.get(h.video_id, False)
            vid = quote(h.video_id, safe="")
            d["media"] = f"/media/{vid}" if has_file else None
            d["thumbnail"] = f"/api/videos/{vid}/thumbnail?t={h.start:.1f}" if has_file else None
            d["page"] = f"/video/{vid}"
            d["context"] = data.context(h.video_id, min(h.start, h.orig_start or h.start),
                                        max(h.end, h.orig_end or h.end))
            out.append(d)
        return {"query": q, "k": k, "by": by, "took_ms": round(took, 2), "hits": out}

    @app.get("/api/search", tags=["search"], response_model=SearchOut)
    def search_get(q: str | None = None, k: int = 10, by: str = "text") -> dict[str, Any]:
        """Clips whose caption (``by=text``), video (``video``) or both best match ``q``."""
        return run_search(q, k, by)

    @app.post("/api/search", tags=["search"], response_model=SearchOut)
    def search_post(body: SearchBody) -> dict[str, Any]:
        """Same as ``GET /api/search`` with a JSON body ``{"q", "k", "by"}``."""
        return run_search(body.q, body.k, body.by)

    @app.get("/api/info", tags=["videos"])
    def info() -> dict[str, Any]:
        meta = searcher.meta if searcher is not None else None
        return {"run_dir": str(root), "videos": len(data.video_ids),
                "index": None if meta is None else {
                    k: meta.get(k) for k in ("encoder", "n", "dim", "index_type", "source")},
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

    def page(name: str) -> Callable[..., FileResponse]:
        def _page() -> FileResponse:
            return FileResponse(STATIC / name, media_type="text/html")
        return _page

    app.get("/", include_in_schema=False)(page("index.html"))
    app.get("/video/{video_id:path}", include_in_schema=False)(page("video.html"))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/{rest:path}", include_in_schema=False)
    def api_404(rest: str) -> None:
        raise HTTPException(404, f"no such API endpoint /api/{rest}")

    return app


def serve(run_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000,
          encoder: str | None = None, device: str | None = None, max_k: int = 100,
          max_query_chars: int = 500, log_level: str = "warning") -> None:
    """Serve the page and API until interrupted (``howtocap serve DIR``)."""
    import uvicorn

    app = create_app(run_dir, encoder=encoder, device=device, max_k=max_k,
                     max_query_chars=max_query_chars)
    print(f"howtocap: serving {Path(run_dir).resolve()} on http://{host}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
