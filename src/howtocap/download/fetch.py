"""Fetching one remote file into the media cache: fsspec for direct files (http(s), s3, gs),
yt-dlp for YouTube and other pages (video2dataset's split: a URL ending in a video extension is
a file). A fetch is atomic (docs/download.md). A failure is one exception whose message starts
with its cause; ``ServiceError`` for what a plain re-run may fix, ``HowtocapError`` else."""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from howtocap.atomic import HOST, atomic_write, pid_alive, sweep_temp_files, writer_tag
from howtocap.download.config import DownloadConfig
from howtocap.errors import HowtocapError, ServiceError
from howtocap.io.inputs import VIDEO_EXTS, YOUTUBE_ID

CHUNK = 1 << 20

# The causes a failed download is reported with (the first words of its status message) that a
# plain re-run retries (``service``); the rest (not found, removed or private, geo-blocked, too
# large, not a video, refused) are ``bad input``, retried only with ``--retry-failed``.
SERVICE = {"rate-limited or bot check", "timeout", "unreachable", "server error",
           "download failed"}


def failure(kind: str, detail: str) -> HowtocapError:
    """The exception for a failed download: message ``"<kind>: <detail>"``, its class the
    status table's cause."""
    return (ServiceError if kind in SERVICE else HowtocapError)(f"{kind}: {detail}")


class _Transient(Exception):
    """``(kind, detail)`` of a failure worth another attempt (timeouts, 5xx, 429, a dropped
    connection)."""


def uses_ytdlp(url: str) -> bool:
    """YouTube, or an http(s) page that is not a video file (yt-dlp's extractors)."""
    parts = urlsplit(url)
    if YOUTUBE_ID.match(url) or parts.netloc.lower().endswith(
            ("youtube.com", "youtu.be", "youtube-nocookie.com")):
        return True
    return parts.scheme in ("http", "https") and \
        Path(parts.path).suffix.lower() not in (*VIDEO_EXTS, ".vtt", ".srt")


YTDLP_TMP = "-ytdlp.tmp"  # yt-dlp's private temp folders in the media cache
_WRITER = re.compile(r"\.([A-Za-z0-9-]*)~(\d+)\.[^.]+\.tmp$")


def sweep_media(media: Path) -> int:
    """Remove what killed downloads of this host left in ``media``: temp files (the
    project's sweep) and yt-dlp's temp folders (whose writer is dead)."""
    if not media.is_dir():
        return 0
    removed = sweep_temp_files(media)
    for d in media.iterdir():
        m = _WRITER.search(d.name) if d.name.endswith(YTDLP_TMP) else None
        if m and d.is_dir() and m.group(1) == HOST and not pid_alive(int(m.group(2))):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


# -- fsspec ---------------------------------------------------------------------------------
def storage_options(protocol: str, cfg: DownloadConfig) -> dict[str, Any]:
    """fsspec's options for ``protocol``: the timeouts, then the user's (``--storage-options``:
    per protocol, or ``*`` for all). S3 endpoints: ``AWS_ENDPOINT_URL`` or
    ``{"s3": {"endpoint_url": …}}``."""
    opts: dict[str, Any] = {}
    if protocol in ("http", "https"):
        import aiohttp

        opts["client_kwargs"] = {"timeout": aiohttp.ClientTimeout(
            total=None, sock_connect=cfg.connect_timeout, sock_read=cfg.read_timeout)}
    elif protocol == "s3":
        opts["config_kwargs"] = {"connect_timeout": cfg.connect_timeout,
                                 "read_timeout": cfg.read_timeout,
                                 "retries": {"max_attempts": 1}}  # ours retry (below)
        if endpoint := os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
            opts["endpoint_url"] = endpoint
    return {**opts, **cfg.storage_options.get("*", {}), **cfg.storage_options.get(protocol, {}),
            **(cfg.storage_options.get("gs", {}) if protocol == "gcs" else {})}


def _classify(exc: BaseException, url: str, cfg: DownloadConfig) -> BaseException:
    """A fetch exception as a failure (``failure``) or a ``_Transient``; unknown ones as they
    are (cause "internal", traceback in the log). fsspec wraps the cause (its HTTP ``info``
    raises ``FileNotFoundError`` from a timeout), so the chain is read from the inside out."""
    chain = [exc]
    while len(chain) < 8 and (e := chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(e)
    for e in reversed(chain):
        status, response = getattr(e, "status", None), getattr(e, "response", None)
        code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
        if isinstance(status, int) or code:
            if status in (404, 410) or code in ("404", "NoSuchKey", "NoSuchBucket"):
                return failure("not found", f"HTTP {status or 404} for {url}")
            if status in (401, 403) or code in ("403", "AccessDenied"):
                return failure("removed or private", f"access denied (HTTP {status or 403}) "
                                                     f"for {url}")
            if status == 429 or code in ("SlowDown", "Throttling", "TooManyRequests"):
                return _Transient("rate-limited or bot check",
                                  f"HTTP 429 Too Many Requests from {url}")
            if isinstance(status, int) and status >= 500:
                return _Transient("server error", f"HTTP {status} from {url}")
            if isinstance(status, int):
                return failure("refused", f"HTTP {status} for {url}")
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return _Transient("timeout", f"no answer within {cfg.read_timeout:g} s "
                                         f"(--read-timeout) from {url}")
    for e in reversed(chain):
        if isinstance(e, (ConnectionError, OSError)) and not isinstance(
                e, (FileNotFoundError, PermissionError)) or "Connect" in type(e).__name__:
            return _Transient("unreachable", f"{url} ({' '.join(str(e).split())[:160]})")
    if isinstance(exc, FileNotFoundError):
        where = "HTTP 404 for " if url.startswith("http") else "no such object "
        return failure("not found", f"{where}{url}")
    if isinstance(exc, PermissionError):
        return failure("removed or private", f"access denied for {url}")
    return exc


def _too_large(url: str, size: int, cfg: DownloadConfig) -> HowtocapError:
    return failure("too large", f"{url} is over --max-size ({size:,} > {cfg.max_size:,} bytes)")


def _copy_once(url: str, tmp: Path, cfg: DownloadConfig) -> int:
    """One attempt: stream ``url`` into ``tmp``, aborting past ``max_size``."""
    import fsspec

    protocol = urlsplit(url).scheme.lower()
    fs, path = fsspec.core.url_to_fs(url, **storage_options(protocol, cfg))
    if protocol in ("http", "https"):
        # streamed in one GET (no HEAD first): its Content-Length is the size when sent
        src = fs.open(path, "rb", block_size=0, size=1)
        size = getattr(getattr(src, "r", None), "content_length", None)
    else:
        size = fs.info(path).get("size")
        src = fs.open(path, "rb", block_size=8 * CHUNK)
    with src:
        if size is not None and size > cfg.max_size:
            raise _too_large(url, int(size), cfg)
        n = 0
        with tmp.open("wb") as out:
            while chunk := src.read(CHUNK):
                n += len(chunk)
                if n > cfg.max_size:
                    raise _too_large(url, n, cfg)
                out.write(chunk)
    return n


def fetch_file(url: str, dest: Path, cfg: DownloadConfig, *, video: bool) -> int:
    """``url`` -> ``dest`` (``atomic.atomic_write``: a whole file or none, a full disk one
    line), with retries of transient failures (``cfg.retries``, backoff doubling from
    ``cfg.backoff``); a ``video`` must probe as one before it is kept. Returns its bytes."""
    got: list[int] = []

    def write(tmp: str) -> None:
        got.append(_copy_once(url, Path(tmp), cfg))
        if video:
            check_video(Path(tmp), url)

    attempt = 0
    while True:
        try:
            atomic_write(dest, write)
            return got[-1]
        except HowtocapError:  # too large, not a video, a full disk
            raise
        except Exception as exc:  # noqa: BLE001 - classified; unknown ones re-raised
            found = _classify(exc, url, cfg)
            if found is exc:
                raise
            if not isinstance(found, _Transient):
                raise found from None
            if attempt >= cfg.retries:
                kind, detail = found.args
                raise failure(kind, detail + (f" (after {attempt + 1} tries)"
                                              if attempt else "")) from None
        time.sleep(cfg.backoff * 2 ** attempt)
        attempt += 1


def check_video(path: Path, url: str) -> None:
    """The file decodes as a video (PyAV: a container with a video stream), else "not a
    video"."""
    from howtocap.io.video import probe

    try:
        probe(path)
    except HowtocapError as exc:
        raise failure("not a video", f"{url} ({getattr(exc, 'problem', str(exc))})") from None


# -- yt-dlp ---------------------------------------------------------------------------------
def ytdlp_format(cfg: DownloadConfig) -> str:
    """yt-dlp's format selector: the best at most ``max_height`` in ``format`` with its audio
    (a separate audio track merged in, else a single file holding both), then any container,
    then the smallest there is. ``<=?``: formats of unknown height (direct files) pass."""
    h = cfg.max_height
    ev, ea = {"mp4": ("[ext=mp4]", "[ext=m4a]"), "webm": ("[ext=webm]", "[ext=webm]"),
              "any": ("", "")}[cfg.format]
    if cfg.audio:
        return (f"bv*[height<=?{h}]{ev}+ba{ea}/b[height<=?{h}]{ev}/"
                f"bv*[height<=?{h}]+ba/b[height<=?{h}]/w")
    return f"bv[height<=?{h}]{ev}/bv[height<=?{h}]/b[height<=?{h}]/wv"


def ytdlp_args(url: str, outtmpl: str, cfg: DownloadConfig) -> list[str]:
    """The yt-dlp command line (without the program name) for one video: what
    ``yt-dlp ARGS`` would run, and what ``fetch_ytdlp`` hands ``yt_dlp.parse_options``."""
    if YOUTUBE_ID.match(url):
        url = f"https://www.youtube.com/watch?v={url}"
    args = ["--format", ytdlp_format(cfg), "--no-playlist",
            "--socket-timeout", f"{cfg.read_timeout:g}",
            "--retries", str(cfg.retries), "--fragment-retries", str(cfg.retries),
            "--extractor-retries", str(cfg.retries),
            "--max-filesize", str(cfg.max_size),
            "--output", outtmpl, "--no-progress", "--quiet", "--no-mtime", "--no-cache-dir"]
    if cfg.format != "any":
        args += ["--merge-output-format", cfg.format]
    if cfg.sub_langs:  # YouTube's automatic captions: HowTo100M's narration
        args += ["--write-auto-subs", "--sub-langs", ",".join(cfg.sub_langs),
                 "--sub-format", "vtt"]
    return [*args, "--", url]


# yt-dlp's error messages -> cause, first match wins (rate limits before "unavailable":
# YouTube says "Video unavailable. This content isn't available, try again later" then)
YTDLP_CAUSES: list[tuple[str, re.Pattern[str]]] = [
    ("rate-limited or bot check", re.compile(
        r"HTTP Error 429|Too Many Requests|not a bot|confirm you.re not a robot|rate.?limit"
        r"|try again later|captcha", re.IGNORECASE)),
    ("geo-blocked", re.compile(
        r"available in your country|geo.?restrict|blocked it in your country"
        r"|not available from your location", re.IGNORECASE)),
    ("removed or private", re.compile(
        r"private video|video is private|video unavailable|has been removed|no longer available"
        r"|has been terminated|members.only|join this channel|confirm your age"
        r"|age.restricted|copyright claim", re.IGNORECASE)),
    ("not found", re.compile(
        r"HTTP Error 40[04]|HTTP Error 410|404: Not Found|Unsupported URL|is not a valid URL"
        r"|Incomplete YouTube ID|does not exist", re.IGNORECASE)),
    ("timeout", re.compile(r"timed? ?out", re.IGNORECASE)),
    ("unreachable", re.compile(r"Connection refused|Name or service not known"
                               r"|Failed to resolve|Network is unreachable", re.IGNORECASE)),
]


def ytdlp_failure(message: str, url: str) -> HowtocapError:
    """A yt-dlp error message as a failure with its cause (``YTDLP_CAUSES``)."""
    text = " ".join(message.replace("ERROR:", "").split())[:300]
    for kind, pattern in YTDLP_CAUSES:
        if pattern.search(text):
            return failure(kind, f"{url}: {text}")
    return failure("download failed", f"{url}: {text}")


@dataclass
class _Log:
    """yt-dlp's logger: keeps its messages (the max-filesize notice is not an error)."""

    lines: list[str] = field(default_factory=list)

    def debug(self, msg: str) -> None:
        self.lines.append(msg)

    info = warning = error = debug


@dataclass
class Fetched:
    path: Path
    bytes: int
    subtitle: Path | None = None


def fetch_ytdlp(url: str, dest_stem: Path, cfg: DownloadConfig) -> Fetched:
    """One video (and its automatic-caption VTT) through yt-dlp, in a private temp folder,
    then moved next to ``dest_stem`` (``<stem>.<ext>``, ``<stem>.<lang>.vtt``)."""
    import yt_dlp

    # a temp name ``atomic.sweep_temp_files`` recognises (host, pid): a killed writer's is
    # removed on the next start (``sweep_media``), a live one's never
    work = dest_stem.parent / f".{dest_stem.name}.{writer_tag()}.{uuid.uuid4().hex[:8]}{YTDLP_TMP}"
    work.mkdir(parents=True)
    log = _Log()
    over: list[int] = []

    def limit(d: dict[str, Any]) -> None:  # abort mid-stream (the size may be unknown)
        got = int(d.get("downloaded_bytes") or 0)
        if got > cfg.max_size:
            over.append(got)
            raise yt_dlp.utils.DownloadError(f"File is larger than max-filesize ({got} bytes)")

    try:
        args = ytdlp_args(url, str(work / "media.%(ext)s"), cfg)
        opts = yt_dlp.parse_options(args).ydl_opts
        # the command line's default ignores extraction errors ('only_download'): raise them
        opts.update(logger=log, progress_hooks=[limit], ignoreerrors=False)
        try:
            with yt_dlp.YoutubeDL(opts) as ydl:
                ydl.extract_info(args[-1], download=True)  # the URL (a YouTube id's page)
        except yt_dlp.utils.DownloadError as exc:
            if over:
                raise _too_large(url, over[0], cfg) from None
            raise ytdlp_failure(str(exc), url) from None
        files = [p for p in work.iterdir() if p.is_file()]
        # the video: what is not a subtitle or a leftover (a direct link of unknown type is
        # "media.unknown_video": PyAV probes the content, not the name)
        videos = [p for p in files if p.suffix.lower() not in (".vtt", ".srt", ".part",
                                                                ".ytdl", ".json")]
        if not videos:
            if over or any("larger than max-filesize" in ln for ln in log.lines):
                raise failure("too large", f"{url} is over --max-size ({cfg.max_size:,} "
                                           f"bytes)")
            raise failure("download failed", f"{url}: yt-dlp wrote no video file")
        video = videos[0]
        check_video(video, url)
        subs = sorted(p for p in files if p.suffix.lower() == ".vtt")
        ext = video.suffix.lower() if video.suffix.lower() in VIDEO_EXTS else ".mp4"
        final = dest_stem.with_name(dest_stem.name + ext)
        sub_final = None
        if subs:  # media.en.vtt -> <stem>.en.vtt: the subtitles stage's sidecar name
            lang = subs[0].name.split(".")[-2] if subs[0].name.count(".") > 1 else "en"
            sub_final = dest_stem.with_name(f"{dest_stem.name}.{lang}.vtt")
            os.replace(subs[0], sub_final)
        size = video.stat().st_size
        os.replace(video, final)
        return Fetched(final, size, sub_final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
