"""Subtitle rows before any file format: text cleaning and the ``start, end, text`` rows that
every reader (per-video files in ``subtitles``, streamed dumps in ``dump_readers``) builds.
Its own module so both readers import it and neither imports the other's internals."""

from __future__ import annotations

import html
import math
import re
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.errors import InputError

COLUMNS = ["start", "end", "text"]

# -- text cleaning ------------------------------------------------------------------------------
_TIMING_TAG = re.compile(r"<\d{1,2}:\d{2}(?::\d{2})?[.,]\d{1,3}>")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>|</?(?:c|i|b|u|v|lang|ruby|rt)(?:\.[\w.-]+)?>")
_SOUND = re.compile(r"\[[^\[\]]*\]|♪+|♫+")
_SHORT_PAREN = re.compile(r"\((?:\s*[^()\s]+){1,3}\s*\)")
_SPEAKER = re.compile(r"(?:^|\s)(?:>>+|&gt;&gt;)\s*")
_DASH = re.compile(r"^\s*-\s+")
_WS = re.compile(r"\s+")
# Nothing above can change a line without one of these or whitespace other than single spaces
# between words: most ASR lines are plain words, and a HowTo100M dump has tens of millions of
# lines, so they skip the seven substitutions (the check is one regex search a line).
_SPECIAL = re.compile(r"[<>&\[(♪♫\u200b]")
# Whitespace but the space (``str.isspace``; ``str.split`` parts words at each of them),
# written out: finding them among all code points slowed every import.
ODD_SPACES = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003"
              "\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# The same test for a video's lines joined by NUL, as one character class (what the regex
# engine scans fastest): a special character or whitespace but a space; the edges and double
# spaces are substrings (``_needs_cleaning``).
_CLEAN_CHARS = re.compile("[" + re.escape("<>&[(♪♫\u200b" + ODD_SPACES) + "]")
_START_END = itemgetter(0, 1)


def clean_text(text: str) -> str:
    """Spoken words only: no markup, no ``[Music]``/``(applause)``, no ``>>`` speaker turns.
    Parentheses are removed only when they hold at most three words (sound descriptions such as
    ``(laughs)``); longer parentheticals are more likely real speech and are kept."""
    if text[:1] != "-" and " ".join(text.split()) == text and not _SPECIAL.search(text):
        return text
    text = _TIMING_TAG.sub("", text)
    text = _TAG.sub("", text)
    text = html.unescape(text).replace("\u200b", "")
    text = _SPEAKER.sub(" ", text)
    text = _SOUND.sub(" ", text)
    text = _SHORT_PAREN.sub(" ", text)
    text = _DASH.sub("", text)
    return _WS.sub(" ", text).strip()


# -- rows ------------------------------------------------------------------------------------------
Row = tuple[float, float, str, "float | None"]  # start, end, text, score (HowToCaption pairs)


def entry_rows(where: Path, video_id: str, entry: Any) -> list[Row]:
    """One video's entry, validated and flattened (text not yet cleaned).
    ``{"start": [...], "end": [...], "text": [...]}`` or a list of ``{start,end,text}`` dicts.
    HowToCaption files hold a list of captions (or ``(caption, score)`` pairs) per position: each
    becomes its own row with its score."""
    def bad(problem: str) -> InputError:
        return InputError(where, f"video {video_id!r}: {problem}")

    if isinstance(entry, pd.DataFrame):
        entry = entry.to_dict(orient="list")
    if isinstance(entry, list):
        if not all(isinstance(e, dict) for e in entry):
            raise bad("expected a list of {start, end, text} objects")
        try:
            entry = {k: [e[k] for e in entry] for k in ("start", "end", "text")}
        except KeyError as exc:
            raise bad(f"an item lacks {exc.args[0]!r}") from None
    if not isinstance(entry, dict):
        raise bad(f"expected an object with start/end/text lists, got {type(entry).__name__}")
    missing = [k for k in COLUMNS if k not in entry]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    starts, ends, texts = entry["start"], entry["end"], entry["text"]
    if not all(isinstance(x, (list, tuple)) for x in (starts, ends, texts)):
        raise bad("start, end and text must be lists")
    if not len(starts) == len(ends) == len(texts):
        raise bad(f"start/end/text lengths differ ({len(starts)}/{len(ends)}/{len(texts)})")
    rows: list[Row] = []
    try:
        if all(type(t) is str for t in texts):  # the common case: one plain line each
            return list(zip(map(float, starts), map(float, ends), texts,
                            repeat(None, len(texts)), strict=True))
        for s, e, t in zip(starts, ends, texts, strict=True):
            s, e = float(s), float(e)
            for item in (t if isinstance(t, (list, tuple)) else [t]):
                if isinstance(item, (list, tuple)) and len(item) == 2:
                    rows.append((s, e, str(item[0]), float(item[1])))
                else:
                    rows.append((s, e, "" if item is None else str(item), None))
    except (TypeError, ValueError):
        raise bad("start/end values must be numbers") from None
    return rows


def _needs_cleaning(joined: str) -> bool:
    """Whether ``clean_text`` would change a line of ``joined`` (lines parted by NUL)."""
    return (_CLEAN_CHARS.search(joined) is not None or "  " in joined or "\0-" in joined
            or "\0 " in joined or " \0" in joined)


def tidy_rows(rows: list[Row], clean: bool = True) -> list[Row]:
    """Cleaned text, no empty lines or end<start rows, sorted by (start, end) (stable), and an
    end that runs into the next line's start clipped to it: in plain Python, because a
    DataFrame per video costs more than the work itself on a million videos."""
    # clean_text changes no line when none of them, joined by NUL, has a character it acts
    # on or whitespace other than single spaces inside a line (one search a video)
    if clean and rows and _needs_cleaning("\0" + "\0".join([r[2] for r in rows]) + "\0"):
        rows = [(s, e, clean_text(t), sc) for s, e, t, sc in rows]
    rows = [r for r in rows if r[2] and r[1] >= r[0]]  # NaN times fail the comparison
    rows.sort(key=_START_END)
    for i in range(len(rows) - 1):
        s, e, t, sc = rows[i]
        nxt = rows[i + 1][0]
        if e > nxt > s:
            rows[i] = (s, nxt, t, sc)
    return rows


def rows_frame(rows: list[Row]) -> pd.DataFrame:
    """``start, end, text`` (+ ``score`` when any row has one) from tidy rows."""
    df = pd.DataFrame({"start": pd.Series([r[0] for r in rows], dtype="float64"),
                       "end": pd.Series([r[1] for r in rows], dtype="float64"),
                       "text": pd.Series([r[2] for r in rows], dtype=object)})
    if any(r[3] is not None for r in rows):
        df["score"] = pd.Series([math.nan if r[3] is None else r[3] for r in rows],
                                dtype="float64")
    return df


def read_csv_part(path: Path, nrows: int | None = None) -> pd.DataFrame:
    """A ``start,end,text`` CSV (its first ``nrows`` rows), or one line naming the file."""
    try:
        df = pd.read_csv(path, keep_default_na=False, nrows=nrows)
    except pd.errors.EmptyDataError:
        raise InputError(path, "empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a readable CSV ({' '.join(str(exc).split())[:120]})") \
            from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(path, f"needs columns start,end,text; missing {','.join(missing)}")
    return df
