"""Subtitles in, one clean ``start, end, text`` table out.
Readers accept what users really have: WebVTT (including YouTube's rolling auto-captions with
word-timing tags), SRT, and the HowTo100M / HowToCaption dumps (``caption.json``, the
"sentencified" JSON, the same as pickle, folders of per-video CSVs). Everything they return has
the same columns, sorted by time, with text cleaned by ``clean_text``. A malformed file raises
``InputError`` naming the file and, where it helps, the line.
The parser is our own (about 150 lines) rather than pysubs2/webvtt-py: those either reject or
silently keep YouTube's rolling duplicates, and we want our own one-line errors anyway."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import closing
from itertools import groupby
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from howtocap.atomic import atomic_write
from howtocap.errors import InputError
from howtocap.hashing import hash_text, safe_name
from howtocap.io.dump_readers import convert_dump
from howtocap.io.inputs import VideoItem
from howtocap.io.subtitle_dump import FORMAT_VERSION, DumpWriter, ParquetStore, is_converted
from howtocap.io.subtitle_rows import clean_text, entry_rows, read_csv_part, rows_frame, tidy_rows
from howtocap.schemas import Rows, rows


class ASR(Protocol):
    """A speech recognizer (``howtocap.asr``): what ``subtitles_for_video`` falls back to."""

    def transcribe(self, path: Path) -> pd.DataFrame: ...


log = logging.getLogger(__name__)

SUBTITLE_SUFFIXES = (".vtt", ".srt")


# -- decoding -----------------------------------------------------------------------------------
def read_text(path: Path) -> str:
    """UTF-8 (BOM or not) or UTF-16 with a BOM; legacy Windows-1252 files are accepted with a
    warning because old SRTs often are; anything else is rejected rather than guessed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, not a subtitle file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read ({exc.strerror})") from None
    if not data.strip():
        raise InputError(path, "empty file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise InputError(path, f"broken UTF-16 text at byte {exc.start}") from None
    if b"\x00" in data:
        raise InputError(path, "binary data, not a text subtitle file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = InputError(path, f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at "
                               f"offset {exc.start}); re-save it as UTF-8")
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        raise bad from None
    if any(ord(c) < 32 and c not in "\r\n\t" for c in text):
        raise bad
    log.warning("%s: not UTF-8; read as Windows-1252", path)
    return text


# -- cue parsing --------------------------------------------------------------------------------
_TS = r"(?:(\d+):)?(\d{1,2}):(\d{1,2})(?:[.,](\d{1,3}))?"
_TIMING = re.compile(rf"^\s*{_TS}\s*-->\s*{_TS}(?:\s+(.*))?$")
_LOOKS_TIMED = re.compile(r"^\s*\d+:\d+.*(?:-->|--|->|\s-\s)")


def _seconds(h: str | None, m: str, s: str, frac: str | None) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + (int(frac.ljust(3, "0")) / 1000
                                                         if frac else 0.0)


def _parse_timing(line: str) -> tuple[float, float] | None:
    m = _TIMING.match(line)
    if not m:
        return None
    g = m.groups()
    if int(g[2]) >= 60 or int(g[6]) >= 60 or (g[0] is not None and int(g[1]) >= 60) \
            or (g[4] is not None and int(g[5]) >= 60):
        return None
    return _seconds(*g[0:4]), _seconds(*g[4:8])


_Cue = tuple[float, float, list[str], int]  # start, end, raw payload lines, line number


def _blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """Blank-line separated blocks with the 1-based line number of their first line."""
    lines = enumerate(text.splitlines(), start=1)
    for filled, run in groupby(lines, key=lambda x: bool(x[1].strip())):
        if filled:
            block = list(run)
            yield block[0][0], [line.rstrip() for _, line in block]


def _parse_cues(path: Path, text: str, kind: str) -> list[_Cue]:
    cues: list[_Cue] = []
    for first, block in _blocks(text):
        head = block[0].strip()
        if kind == "vtt" and (head.startswith(("WEBVTT", "NOTE", "STYLE", "REGION"))
                              and "-->" not in head):
            continue
        # timing is the first line, or the second after a cue id / SRT counter
        idx = next((i for i, ln in enumerate(block[:2]) if "-->" in ln), None)
        times = None if idx is None else _parse_timing(block[idx])
        if times is None:
            bad = idx if idx is not None else next(
                (i for i, ln in enumerate(block[:2]) if _LOOKS_TIMED.match(ln)), None)
            if bad is not None:
                raise InputError(path, f"line {first + bad}: bad timestamp line "
                                       f"{block[bad].strip()[:60]!r}")
            if cues:
                # cue text that contained a blank (or whitespace-only) line, as YouTube's
                # auto-captions do: it belongs to the previous cue
                cues[-1][2].extend(block)
            continue
        cues.append((times[0], times[1], block[idx + 1:], first + idx))
    return cues


def _overlap(prev: list[str], cur: list[str]) -> int:
    """How many leading lines of ``cur`` repeat the trailing lines of ``prev`` (rolling cues)."""
    return next((k for k in range(min(len(prev), len(cur)), 0, -1) if prev[-k:] == cur[:k]), 0)


def _cues_to_frame(path: Path, cues: list[_Cue]) -> pd.DataFrame:
    """Drop rolling repeats, merge exact repeats, drop end<start cues, clip overlaps."""
    rows: list[list[Any]] = []
    prev_lines: list[str] = []
    dropped = 0
    for start, end, raw, _line in sorted(cues, key=lambda c: (c[0], c[3])):
        if end < start:
            dropped += 1
            continue
        lines = [t for t in (clean_text(r) for r in raw) if t]
        if not lines:
            continue  # YouTube's blank transition cue, or only [Music]
        new = lines[_overlap(prev_lines, lines):]
        prev_lines = lines
        if not new:
            sound_only = any(r.strip() and not clean_text(r) for r in raw)
            if rows and not sound_only:  # a repeat of what was said: it is still on screen
                rows[-1][1] = max(rows[-1][1], end)
            continue
        text = " ".join(new)
        if rows and rows[-1][2] == text and start <= rows[-1][1] + 0.05:
            rows[-1][1] = max(rows[-1][1], end)
            continue
        rows.append([start, end, text])
    if dropped:
        log.warning("%s: dropped %d cue(s) whose end is before their start", path, dropped)
    df = rows_frame(tidy_rows([(s, e, t, None) for s, e, t in rows], clean=False))
    df.attrs["dropped_cues"] = dropped
    return df


def _sniff(text: str) -> str | None:
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("WEBVTT"):
        return "vtt"
    timing = next((line for line in head.splitlines()[:50] if "-->" in line), None)
    return None if timing is None else "srt" if re.search(r"\d,\d", timing) else "vtt"


def read_subtitle_file(path: Path) -> pd.DataFrame:
    """A WebVTT (plain or YouTube auto-captions) or SRT file as ``start, end, text`` rows."""
    path = Path(path)
    text = read_text(path)
    sniffed = _sniff(text)
    if sniffed is None:
        raise InputError(path, "no cues found (expected WebVTT or SRT lines like "
                               "'00:00:01.000 --> 00:00:02.000')")
    # content decides over the extension: a WebVTT body saved as .srt is still WebVTT
    cues = _parse_cues(path, text, sniffed)
    if not cues:
        raise InputError(path, "no cues found")
    df = _cues_to_frame(path, cues)
    df.attrs["format"] = sniffed  # what the file really is, for the ``source`` column
    return df


read_vtt = read_srt = read_subtitle_file  # the content decides, not the extension


# -- HowTo100M-style sources --------------------------------------------------------------------
class SubtitleSource:
    """Subtitles for many videos from one place, looked up by video id. A folder is listed once
    and each file read when asked for; a Parquet table is read by row groups; a JSON, pickle or
    CSV dump is streamed once into Parquet under ``cache_dir`` (a private temporary folder when
    not given), so memory stays bounded however large the dump (``io.subtitle_dump``).
    ``select`` (ids) and ``limit`` (the first N, in the source's order) restrict what is kept."""

    def __init__(self, path: str | Path, *, cache_dir: str | Path | None = None,
                 select: Iterable[str] | None = None, limit: int | None = None,
                 progress: bool = False) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(self.path, "no such file or folder")
        kind = "folder" if self.path.is_dir() else {
            ".json": "json", ".pkl": "pickle", ".pickle": "pickle", ".csv": "csv",
            ".parquet": "parquet"}.get(self.path.suffix.lower())
        if kind is None:
            raise InputError(self.path, "unknown subtitle source; expected a folder of per-video "
                                        ".csv/.vtt/.srt files, or a .json, .pickle, .csv or "
                                        ".parquet dump")
        self.kind = kind
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.select = frozenset(select) if select is not None else None
        self.limit = limit
        self.progress = progress
        self._lock = threading.Lock()
        self._store: Any = None
        self._failed: InputError | None = None
        self._files: dict[str, Path] | None = None

    @classmethod
    def open(cls, path: str | Path, **kw: Any) -> SubtitleSource:
        return cls(path, **kw)

    def __getstate__(self) -> dict[str, Any]:
        """Travels as its settings (e.g. to a worker process), which reopens the converted file
        from ``cache_dir`` instead of converting again."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_lock", "_store", "_failed", "_files")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._store = self._failed = self._files = None

    # -- loading ---------------------------------------------------------------------------
    def store(self) -> Any:
        """The Parquet store behind a dump (converted on first use; a failure is kept, so a
        broken dump is reported once per video without being re-read each time)."""
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._store is None:
                try:
                    self._store = open_store(self)
                except InputError as exc:
                    self._failed = exc
                    raise
            return self._store

    def close(self) -> None:
        """Let go of the store and its column of every video id (1.2M on HowTo100M): the
        next lookup opens the converted file again (``cache_dir``), without converting."""
        with self._lock:
            self._store = self._files = None

    def _folder(self) -> dict[str, Path]:
        with self._lock:
            if self._files is None:
                files: dict[str, Path] = {}
                for p in sorted(self.path.iterdir()):
                    if p.suffix.lower() in (".csv", *SUBTITLE_SUFFIXES) and p.is_file() and \
                            (self.select is None or p.stem in self.select):
                        files.setdefault(p.stem, p)
                if not files and self.select is None:
                    raise InputError(self.path, "folder holds no <video_id>.csv/.vtt/.srt files")
                self._files = dict(list(files.items())[:self.limit])
            return self._files

    # -- lookup ----------------------------------------------------------------------------
    def video_ids(self) -> list[str]:
        """Every (selected) video id, in the source's order."""
        if self.kind == "folder":
            return list(self._folder())
        return self.store().ids.to_pylist()

    def count(self) -> int:
        """How many (selected) videos: ``len(video_ids())`` without listing them."""
        if self.kind == "folder":
            return len(self._folder())
        return len(self.store())

    def id_array(self, lo: int, hi: int) -> Any:
        """``video_ids()[lo:hi]`` as an Arrow string array: a run of 1.2M videos never lists
        them all (a dump's ids are one: no Python string a video)."""
        if self.kind == "folder":
            return pa.array(list(self._folder())[lo:hi], pa.string())
        return self.store().id_array(lo, hi)

    def holds(self, ids: Any) -> np.ndarray:
        """Which of ``ids`` (an Arrow array of distinct ids) the source has, all at once."""
        if self.kind == "folder":
            files = self._folder()
            return np.array([v in files for v in ids.to_pylist()], dtype=bool)
        return self.store().holds(ids)

    def get(self, video_id: str, frame: bool = True) -> pd.DataFrame | dict[str, Any] | None:
        """The video's subtitles (``start, end, text``), or ``None`` if the source lacks it
        (``frame=False``: maybe as plain columns, see ``ParquetStore.get``)."""
        if self.kind == "folder":
            file = self._folder().get(video_id)
            if file is None:
                return None
            if file.suffix.lower() in SUBTITLE_SUFFIXES:
                return read_subtitle_file(file)
            return rows_frame(tidy_rows(entry_rows(file, video_id, read_csv_part(file))))
        return self.store().get(video_id, frame)

    def stats(self) -> dict[str, int]:
        """Memory high-water marks of the dump reader (rows buffered while converting, row
        groups held while reading): what the streaming test checks stays bounded."""
        return {} if self._store is None else self._store.stats()


# -- the per-video stage function ---------------------------------------------------------------
def subtitles_for_video(item: VideoItem, *, source: SubtitleSource | None = None,
                        asr: ASR | None = None) -> pd.DataFrame:
    """One video's subtitles as a ``subtitles`` table: the item's explicit subtitle file, else a
    sidecar ``<stem>.vtt/.srt`` next to the video, else ``source`` (``--subtitles``), else
    ASR (when ``asr`` is given)."""
    return subtitles_and_origin(item, source=source, asr=asr)[0].to_pandas()


def subtitles_and_origin(item: VideoItem, *, source: SubtitleSource | None = None,
                          asr: ASR | None = None, sidecars: bool = True
                          ) -> tuple[Rows, Path | str]:
    """``subtitles_for_video`` as plain columns (``schemas.Rows``, what the subtitles stage
    commits), plus where the rows came from: the file read, "htm" or "asr"."""
    path = item.subtitle_path or (item.sidecar_subtitle() if sidecars else None)
    df: Any = None if path is None else read_subtitle_file(path)
    kind, origin = ("", "") if df is None else (df.attrs["format"], path)
    if df is None and source is not None:
        df, kind, origin = source.get(item.video_id, frame=False), "htm", "htm"
    if df is None and asr is not None and item.video_path is not None:
        df, kind, origin = asr.transcribe(item.video_path), "asr", "asr"
    if df is None:
        if item.video_path is None and source is not None:
            raise InputError(source.path, f"no subtitles for video {item.video_id!r} (and no "
                                          "video file to transcribe)")
        where = item.video_path or item.video_id
        raise InputError(where, "no subtitles found (no sidecar .vtt/.srt, not in --subtitles)"
                         + ("" if asr is not None and item.video_path is not None
                            else " and ASR is off"))
    start = np.asarray(df["start"], dtype="float64")
    out = rows("subtitles", len(start), video_id=item.video_id, start=start,
               end=np.asarray(df["end"], dtype="float64"), text=list(df["text"]), source=kind)
    return out, origin


# -- the Parquet store behind a dump ---------------------------------------------------------
def _cache_file(source: SubtitleSource, cache_dir: Path) -> Path:
    """One converted file per (source file as it is now, selection): a changed dump or another
    --ids/--limit converts again; a resumed or sharded run finds it."""
    st = source.path.stat()
    sel = "\n".join(sorted(source.select)) if source.select is not None else "*"
    key = hash_text(f"{FORMAT_VERSION}|{source.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|"
                    f"{source.limit}|{sel}")
    return cache_dir / f"{safe_name(source.path.stem)}-{key:016x}.parquet"


def open_store(source: SubtitleSource) -> ParquetStore:
    """The store behind a ``SubtitleSource``: the Parquet file itself, or the dump converted."""
    if source.kind == "parquet":
        return ParquetStore(source.path, source.path, select=source.select, limit=source.limit)
    cache_dir = source.cache_dir
    if cache_dir is None:  # a private folder, removed with the source
        cache_dir = Path(tempfile.mkdtemp(prefix="howtocap-subtitles-"))
        weakref.finalize(source, shutil.rmtree, cache_dir, True)
    out = _cache_file(source, cache_dir)
    high_water = 0 if is_converted(out) else _convert(source, out).max_buffered_rows
    store = ParquetStore(out, source.path, select=source.select, limit=source.limit)
    store.max_buffered_rows = high_water
    return store


def _convert(source: SubtitleSource, out: Path) -> DumpWriter:
    """``source``'s dump streamed into the Parquet file ``out``, atomically."""
    written: list[DumpWriter] = []
    atomic_write(out, lambda tmp: written.append(convert_dump(
        source.path, source.kind, tmp, select=source.select, limit=source.limit,
        progress=source.progress)))
    return written[0]


def convert_subtitles(src: str | Path, out: str | Path, *, ids: Iterable[str] | None = None,
                      limit: int | None = None, progress: bool = False) -> tuple[int, int]:
    """Any subtitle source -> one clean Parquet file that ``--subtitles`` reads by row groups
    without converting again; returns ``(videos, rows)``. Do it once for a pickle (which cannot
    be streamed) or a dump read by many runs."""
    out = Path(out)
    if out.suffix.lower() != ".parquet":
        raise InputError(out, "the converted file must end in .parquet")
    select = frozenset(ids) if ids is not None else None
    source = SubtitleSource.open(src, select=select, limit=limit, progress=progress)
    if source.kind in ("json", "pickle", "csv"):
        writer = _convert(source, out)
        if writer.layout == "videos":
            return writer.videos, writer.rows
        # records: group each video's rows now, so readers need not
        tmp_src = out.with_name(f".{out.name}.records.parquet")
        os.replace(out, tmp_src)
        try:
            source = SubtitleSource.open(tmp_src, select=select, limit=limit)
            return _write_clean(source, out)
        finally:
            tmp_src.unlink(missing_ok=True)
    return _write_clean(source, out)


def _write_clean(source: SubtitleSource, out: Path) -> tuple[int, int]:
    """Every video of ``source`` via ``get``, as whole clean videos (errors kept per video)."""
    counts: list[int] = []

    def write(tmp: str) -> None:
        with closing(DumpWriter(tmp, "videos")) as writer:
            for vid in source.video_ids():
                try:
                    df = source.get(vid)
                except InputError as exc:  # kept per video; a folder's message names its file
                    writer.add_video(vid, None,
                                     str(exc) if source.kind == "folder" else exc.problem)
                    continue
                if df is None:
                    continue
                cols = [df[c].tolist() for c in ("start", "end", "text")]
                score = df["score"].tolist() if "score" in df.columns else [None] * len(df)
                writer.add_video(vid, [(s, e, t, None if sc is None or sc != sc else sc)
                                       for s, e, t, sc in zip(*cols, score, strict=True)])
        counts.extend([writer.videos, writer.rows])

    atomic_write(out, write)
    return counts[0], counts[1]
