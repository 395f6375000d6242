"""Turn the CLI's INPUT... (video files, folders, manifest CSVs) into a list of videos."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from howtocap.errors import HowtocapError, InputError

VIDEO_EXTS = {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".ts"}
SUBTITLE_EXTS = (".vtt", ".srt")


@dataclass(frozen=True)
class VideoItem:
    """One video to process; ``subtitle_path`` is an explicit subtitle file, if any.
    ``video_url`` / ``subtitle_url``: where a remote input lives (``remote_source``), passed
    through untouched for the ``download`` step, which turns them into local paths."""

    video_id: str
    video_path: Path | None
    subtitle_path: Path | None = None
    video_url: str = ""
    subtitle_url: str = ""

    def video_file(self) -> Path:
        """The video file a step decodes, or one line saying there is none."""
        if self.video_path is None or not str(self.video_path):
            raise InputError(self.video_id, "no video file")
        return Path(self.video_path)

    @property
    def remote(self) -> bool:
        return bool(self.video_url or self.subtitle_url)

    def sidecar_subtitle(self) -> Path | None:
        """``<stem>.vtt`` / ``.srt`` (also ``<stem>.en.vtt`` as yt-dlp writes) next to the video."""
        if self.video_path is None:
            return None
        return next((c for ext in SUBTITLE_EXTS for c in (self.video_path.with_suffix(ext),
                     self.video_path.with_suffix(".en" + ext)) if c.exists()), None)


def _read_manifest(path: Path) -> list[VideoItem]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except UnicodeDecodeError as exc:
        raise InputError(path, f"manifest is not UTF-8 ({exc.reason})") from None
    except csv.Error as exc:
        raise InputError(path, f"not a readable CSV manifest ({exc})") from None
    if not rows:
        raise InputError(path, "manifest is empty (expected a header video_id,video_path)")
    cols = set(rows[0])
    if not {"video_id", "video_path"} <= cols:
        raise InputError(path, f"manifest needs columns video_id,video_path[,subtitle_path]; "
                               f"found {','.join(sorted(c for c in cols if c))}")
    items = []
    for i, row in enumerate(rows, start=2):
        vid = (row.get("video_id") or "").strip()
        if not vid:
            raise InputError(path, f"line {i}: empty video_id")
        vp = (row.get("video_path") or "").strip()
        sp = (row.get("subtitle_path") or "").strip()
        vu, su = (remote_source(v, path.parent, f"{path}: line {i}") for v in (vp, sp))
        items.append(VideoItem(vid, None if vu else listed_path(path, i, vp, path.parent),
                               None if su else listed_path(path, i, sp, path.parent),
                               vu or "", su or ""))
    return items


URL_SCHEMES = ("http", "https", "s3", "gs", "gcs")
# A YouTube video id (what HowTo100M's CSVs list): 11 of [A-Za-z0-9_-]
YOUTUBE_ID = re.compile(r"^[A-Za-z0-9_-]{11}$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def remote_source(value: str, base: Path, where: str) -> str | None:
    """``value`` when it names a remote input (``http(s)://``, ``s3://``, ``gs://`` or a
    YouTube id), else None (a local path). A malformed URL is one line naming ``where``.
    An 11-character YouTube id is taken as a local path when such a file exists there."""
    m = _SCHEME.match(value)
    if m is None:
        if YOUTUBE_ID.match(value) and not (base / value).exists():
            return value
        return None
    if m.group(1).lower() not in URL_SCHEMES:
        raise HowtocapError(f"{where}: unsupported URL {value!r} (take http(s)://, s3://, "
                            f"gs:// or a YouTube id)")
    try:
        host = urlsplit(value).netloc
    except ValueError as exc:
        raise HowtocapError(f"{where}: malformed URL {value!r} ({exc})") from None
    if not host or any(c.isspace() for c in value) or "\0" in value:
        raise HowtocapError(f"{where}: malformed URL {value!r} (no host or bucket, or a "
                            f"space in it)")
    return value


def url_video_id(url: str) -> str:
    """A video id for a URL given as an INPUT: YouTube's id, else the file name's stem."""
    parts = urlsplit(url)
    if YOUTUBE_ID.match(url):
        return url
    v = parse_qs(parts.query).get("v", [""])[0]
    if "youtube" in parts.netloc and YOUTUBE_ID.match(v):
        return v
    name = parts.path.rstrip("/").rsplit("/", 1)[-1]
    return Path(name).stem or parts.netloc


def listed_path(table: Path, line: int, value: str, base: Path) -> Path | None:
    """A path cell of a CSV (``None`` when empty), resolved from ``base``; a NUL byte, which no
    file system takes (and ``Path.resolve`` raises on), is one line naming the table."""
    if not value:
        return None
    if "\0" in value:
        raise InputError(table, f"line {line}: a path holds a NUL byte")
    return (base / value).resolve()


def resolve_inputs(inputs: list[str | Path | VideoItem]) -> list[VideoItem]:
    """Videos from files, folders (recursive), ``.csv`` manifests and URLs (``http(s)://``,
    ``s3://``, ``gs://``, YouTube); duplicates keep the first."""
    items: list[VideoItem] = []
    for raw in inputs:
        if isinstance(raw, VideoItem):  # already resolved (``run`` after ``download``)
            items.append(raw)
            continue
        if isinstance(raw, str) and (url := remote_source(raw, Path.cwd(), raw)):
            items.append(VideoItem(url_video_id(url), None, video_url=url))
            continue
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or folder")
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in VIDEO_EXTS
                           and p.is_file())
            items += [VideoItem(p.stem, p.resolve()) for p in found]
        elif path.suffix.lower() == ".csv":
            items += _read_manifest(path)
        else:
            items.append(VideoItem(path.stem, path.resolve()))
    unique: dict[str, VideoItem] = {}
    for it in items:
        unique.setdefault(it.video_id, it)
    return list(unique.values())


_COMMENT = re.compile(r"(?:^|\s)#.*$")


def read_id_list(path: str | Path) -> list[str]:
    """Video ids from a text file, one a line; blank lines and ``#`` comments are ignored and a
    repeated id counts once (``--ids``)."""
    path = Path(path)
    text = read_text(path, "--ids takes a text file with one video id a line")
    ids = [v for line in text.splitlines() if (v := _COMMENT.sub("", line).strip())]
    if not ids:
        raise InputError(path, "no video ids (one a line; blank lines and # comments are "
                               "ignored)")
    return list(dict.fromkeys(ids))


def read_text(path: str | Path, folder: str = "expected a text file") -> str:
    """A UTF-8 file's text (a BOM tolerated), or one ``InputError`` line naming it (``folder``:
    what to say when it is a folder)."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, f"is a folder; {folder}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason})") from None


def read_json(path: str | Path) -> Any:
    """A JSON file, or one ``InputError`` line naming it."""
    try:
        return json.loads(read_text(path, "expected a JSON file"))
    except json.JSONDecodeError as exc:
        raise InputError(Path(path), f"not valid JSON (line {exc.lineno}: {exc.msg})") from None


def select_videos(items: list[VideoItem], ids: str | Path | Sequence[str] | None,
                  limit: int | None) -> list[VideoItem]:
    """The videos ``--ids`` (a file or a list) and ``--limit`` keep, in input order."""
    if ids is not None:
        keep = set(read_id_list(ids) if isinstance(ids, (str, Path)) else ids)
        items = [it for it in items if it.video_id in keep]
    return items[:limit] if limit is not None else items


def resolve_videos(inputs: Sequence[str | Path | VideoItem]) -> list[VideoItem]:
    """``resolve_inputs``, or one line when the inputs hold no video at all."""
    items = resolve_inputs(list(inputs))
    if not items:
        raise HowtocapError(f"no videos found in {', '.join(map(str, inputs))}")
    return items
