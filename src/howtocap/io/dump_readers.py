"""The field's subtitle dumps streamed into the store's Parquet (``subtitle_dump``): HowTo100M's
``caption.json`` (several GB) and collections of records (a JSON list, a CSV) are read with
ijson or pandas in chunks, never whole (a pickle cannot be streamed: it is loaded once). A
malformed entry fails its own video (a per-video error row), not the collection."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.errors import InputError
from howtocap.io.subtitle_dump import ROWS_PER_GROUP, DumpWriter
from howtocap.io.subtitle_rows import COLUMNS, Row, entry_rows, read_csv_part, tidy_rows


# -- reading JSON as a stream --------------------------------------------------------------
class _Tracked:
    """A binary file that keeps the chunk the parser read last and where it starts, so a JSON
    error can be placed."""

    def __init__(self, fh: Any, on_read: Callable[[int], None] | None) -> None:
        self.fh, self.on_read = fh, on_read
        self.begin = fh.tell()  # after a byte-order mark
        self.start, self.chunk = self.begin, b""

    def read(self, n: int = -1) -> bytes:
        self.start += len(self.chunk)
        self.chunk = self.fh.read(n)
        if self.on_read is not None and self.chunk:
            self.on_read(len(self.chunk))
        return self.chunk

    def error_offset(self, message: str) -> int | None:
        """Where a yajl error is, in the file: its context snippet located in the last chunk
        (None when the snippet cannot be placed exactly)."""
        lines = message.split("\n")
        if len(lines) < 3 or "^" not in lines[2]:
            return None
        snippet = lines[1].lstrip(" ")
        k = lines[2].index("^") - (len(lines[1]) - len(snippet))
        if not snippet.strip():
            return self.start + len(self.chunk)  # premature end: at the end of the data
        flat = self.chunk.replace(b"\n", b" ").replace(b"\r", b" ")
        hit = flat.find(snippet.encode())
        if hit < 0 or flat.find(snippet.encode(), hit + 1) >= 0:
            return None
        return self.start + min(len(self.chunk), max(0, hit + k - 1))  # caret: 1 past

    def line_column(self, offset: int) -> tuple[int, int]:
        """Line and column of a byte offset, counted again from the start (an error is rare:
        no count is kept while the file streams)."""
        line, last_newline, pos = 1, self.begin - 1, self.begin
        with open(self.fh.name, "rb") as fh:
            fh.seek(pos)
            while pos < offset and (buf := fh.read(min(1 << 20, offset - pos))):
                line += buf.count(b"\n")
                if (nl := buf.rfind(b"\n")) >= 0:
                    last_newline = pos + nl
                pos += len(buf)
        return line, offset - last_newline


def _json_error(path: Path, reader: _Tracked, exc: Exception) -> InputError:
    raw = exc.args[0] if exc.args else str(exc)
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    problem = message.split("\n")[0]
    for prefix in ("parse error: ", "lexical error: "):
        problem = problem.removeprefix(prefix)
    problem = problem.rstrip(".") or type(exc).__name__
    at = reader.error_offset(message)
    where = (f"line {reader.line_column(reader.start)[0]}" if at is None
             else "line {} column {}".format(*reader.line_column(at)))
    if "UTF8" in problem or "UTF-8" in problem:
        return InputError(path, f"not UTF-8 JSON (at {where})")
    return InputError(path, f"invalid JSON at {where}: {problem}")


def _json_stream(path: Path, on_read: Callable[[int], None] | None
                 ) -> tuple[str, Iterator[Any]]:
    """``("videos", (id, entry)…)`` for ``{id: entry}``, ``("records", record…)`` for a list."""
    import ijson

    with path.open("rb") as fh:
        head = fh.read(4096)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(path, "not UTF-8 JSON (UTF-16); re-save it as UTF-8")
    skip = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    first = head[skip:].lstrip()[:1]
    if not first:
        raise InputError(path, "empty file")
    if first not in (b"{", b"["):
        raise InputError(path, "expected a mapping video_id -> subtitles (a JSON object) or a "
                               "list of records")
    fh = path.open("rb")
    fh.seek(skip)
    reader = _Tracked(fh, on_read)
    layout, events = (("videos", ijson.kvitems(reader, "", use_float=True)) if first == b"{"
                      else ("records", ijson.items(reader, "item", use_float=True)))

    def guarded() -> Iterator[Any]:
        try:
            yield from events
        except ijson.JSONError as exc:
            raise _json_error(path, reader, exc) from None
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 JSON") from None
        finally:
            fh.close()

    return layout, guarded()


# -- converting ----------------------------------------------------------------------------
def _record_rows(path: Path, i: int, rec: Any) -> tuple[str, list[Row] | str]:
    """One record's video id and its rows (or the per-video problem with its numbers)."""
    if not isinstance(rec, dict) or "video_id" not in rec:
        raise InputError(path, f"item {i}: expected an object with video_id, start, end, text")
    if (missing := next((k for k in COLUMNS if k not in rec), None)) is not None:
        raise InputError(path, f"item {i}: missing {missing!r}")
    vid = str(rec["video_id"])
    try:
        return vid, entry_rows(path, vid, {k: [rec[k]] for k in COLUMNS})
    except InputError as exc:
        return vid, exc.problem


def _write_videos(writer: DumpWriter, path: Path, entries: Iterable[tuple[Any, Any]],
                  select: frozenset[str] | None, limit: int | None) -> None:
    for key, entry in entries:
        if limit is not None and writer.videos >= limit:
            break
        vid = str(key)
        if select is not None and vid not in select:
            continue
        try:
            rows = tidy_rows(entry_rows(path, vid, entry))
        except InputError as exc:
            writer.add_video(vid, None, exc.problem)
            continue
        writer.add_video(vid, rows)


def _write_records(writer: DumpWriter, path: Path, records: Iterable[Any],
                   select: frozenset[str] | None, limit: int | None) -> None:
    kept: set[str] = set()
    for i, rec in enumerate(records):
        vid, rows = _record_rows(path, i, rec)
        if select is not None and vid not in select:
            continue
        if vid not in kept:
            if limit is not None and len(kept) >= limit:
                continue  # keep scanning: a kept video's records may come later
            kept.add(vid)
        writer.add_rows(vid, rows)
    writer.videos = len(kept)


def _csv_records(path: Path) -> Iterator[dict[str, Any]]:
    """A single ``video_id,start,end,text`` CSV, chunk by chunk, as records."""
    head = list(read_csv_part(path, nrows=0).columns)
    if "video_id" not in head:
        raise InputError(path, "a single-table source needs a video_id column "
                               "(or give a folder of <video_id>.csv files)")
    try:
        for chunk in pd.read_csv(path, keep_default_na=False, chunksize=ROWS_PER_GROUP,
                                 dtype={"video_id": str}):
            yield from chunk[["video_id", *COLUMNS]].to_dict(orient="records")
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({' '.join(str(exc).split())[:120]})") \
            from None


def _load_pickle(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)  # noqa: S301 - the user's own dataset file
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
        raise InputError(path, f"not a readable pickle ({type(exc).__name__})") from None


def convert_dump(src: Path, kind: str, out: str | Path, *, select: frozenset[str] | None = None,
                 limit: int | None = None, progress: bool = False,
                 rows_per_group: int = ROWS_PER_GROUP) -> DumpWriter:
    """Stream a ``json`` / ``pickle`` / ``csv`` dump into a Parquet file at ``out``."""
    from howtocap.progress import progress_bar

    shown = progress and kind == "json"
    with progress_bar(f"reading {src.name} (MB)", transient=True, disable=not shown) as bar:
        task = bar.add_task("read", total=max(1, src.stat().st_size // 1_000_000))
        on_read = (lambda n: bar.update(task, advance=n / 1e6)) if shown else None
        if kind == "json":
            layout, stream = _json_stream(src, on_read)
        elif kind == "pickle":
            data = _load_pickle(src)
            if isinstance(data, dict):
                layout, stream = "videos", iter(data.items())
            elif isinstance(data, list):
                layout, stream = "records", iter(data)
            else:
                raise InputError(src, f"expected a mapping video_id -> subtitles, got "
                                      f"{type(data).__name__}")
        elif kind == "csv":
            layout, stream = "records", _csv_records(src)
        else:
            raise ValueError(f"not a dump kind: {kind}")
        writer = DumpWriter(out, layout, rows_per_group)
        try:
            if layout == "videos":
                _write_videos(writer, src, stream, select, limit)
            else:
                _write_records(writer, src, stream, select, limit)
        finally:
            writer.close()
            close = getattr(stream, "close", None)
            if close is not None:  # --limit stops early: release the file now
                close()
        return writer
