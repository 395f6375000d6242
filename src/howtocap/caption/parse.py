"""Turn an LLM reply into timestamped captions (the accepted forms: docs/captions.md, "Parsing").

One caption per timestamped sentence. A timestamp opens a caption when it starts a line (after
an optional list marker) or follows a sentence end (``.!?;:``) inside a line, so
``0s: a. 5s: b.`` gives two captions while ``Add 2.5 cups`` is never split (we split on
timestamps, never on '.'). Kept only when ``floor(block.start) - slack <= t <=
ceil(block.end) + slack`` (the reference uses the same floor/ceil bounds with no slack; slack
defaults to 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from howtocap.caption.blocks import Block

_SEC_UNIT = r"(?:seconds?|secs?|s)\b"
_CLOCK = r"(?:\d{1,2}:)?\d{1,2}:\d{2}(?:\.\d+)?"
_ANY_TIME = rf"(?:\d{{1,5}}(?:\.\d+)?\s*{_SEC_UNIT}|{_CLOCK})"

# A candidate timestamp; which candidates open a caption is decided in _split_line.
_TS = re.compile(
    rf"""(?<![\w.:])
    (?P<open>[\[(])?\s*
    (?:(?:at|timestamp|time)\s*:?\s*)?
    (?:(?P<sec>\d{{1,5}}(?:\.\d+)?)\s*{_SEC_UNIT}|(?P<clock>{_CLOCK})(?!\d|:\d))
    (?:\s*(?:-|–|—|to)\s*{_ANY_TIME})?
    \s*(?P<close>[\])])?
    (?P<sep>\s*[:\-–—|,>]+|\s+|$)?""",
    re.IGNORECASE | re.VERBOSE,
)
_TRAILING_TS = re.compile(rf"\s*[\[(]\s*(?P<t>{_ANY_TIME})\s*[\])]\s*[.!]?\s*$", re.IGNORECASE)
_MARKER = re.compile(r"^\s*(?:[-*•·‣▪◦–—>]+|\d{1,3}[.)](?=\s)|\(\d{1,3}\)|#+)\s*")
_QUOTE_END = re.compile(r"[\"”]\s*([.!?]?)$")
_EDGE_CHARS = " \t*_-–—:|,>"  # edge punctuation (quotes are _strip_quotes's)
_QUOTE_PAIRS = {'"': '"', "“": "”", "'": "'", "‘": "’", "`": "`"}
# Every timestamp form holds a digit: a line without one has no timestamp (and no caption).
_DIGIT = re.compile(r"\d")
# The form nearly every reply line has, ``12s: Text.`` with no other digit after it: on a
# printable-ASCII line it opens exactly one caption at 12 whose text is the rest (what
# ``_split_line`` finds with its general regex, in ~1/4 of the time).
_PLAIN = re.compile(r"(\d{1,5})s:([^0-9]*)")
# Each line of a reply: ``(stamp, text, "")`` when ``_PLAIN`` matches all of it, else
# ``("", "", line)``.
_PLAIN_LINES = re.compile(r"^(?:(\d{1,5})s:([^0-9\n]*)|(.*))$", re.MULTILINE)


@dataclass(frozen=True)
class ParsedCaption:
    start: float
    end: float
    text: str


@dataclass
class ParseResult:
    captions: list[ParsedCaption] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # each caption's norm_text (dedupe key)
    n_no_timestamp: int = 0  # non-blank lines without any usable timestamp
    n_out_of_range: int = 0  # timestamped sentences outside the block's time range
    n_empty: int = 0  # a timestamp followed by no text
    n_duplicates: int = 0  # the same caption twice in one reply


def to_seconds(sec: str | None, clock: str | None) -> float:
    if sec is not None:
        return float(sec)
    assert clock is not None
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


_END_PUNCT = ".!?;,"


def norm_text(text: str) -> str:
    """The key two captions are 'identical' under: case, spacing and end punctuation ignored."""
    return " ".join(text.lower().split()).rstrip(_END_PUNCT)


def _clean_key(text: str) -> str:
    """``norm_text`` of a ``clean_text`` result, whose spacing is already single: no split
    (the parser's dedupe key, once per caption)."""
    return text.lower().rstrip(_END_PUNCT)


def _strip_quotes(text: str) -> str:
    """Quotes off the ends only when they wrap the whole caption or pair with nothing, so
    ``Add the "secret sauce"`` keeps its closing quote."""
    while text:
        first, last = text[0], text[-1]
        close = _QUOTE_PAIRS.get(first)
        if close and len(text) > 1 and last == close and text.count(first) + \
                (text.count(close) if close != first else 0) == 2:
            text = text[1:-1]  # the pair wraps the caption
        elif first in _QUOTE_PAIRS and text.count(close or first) < (2 if close == first else 1):
            text = text[1:]  # an opening quote that nothing closes
        elif last in _QUOTE_PAIRS.values() and _unpaired_close(text):
            text = text[:-1]
        else:
            return text
        text = text.strip(_EDGE_CHARS)
    return text


def _unpaired_close(text: str) -> bool:
    last = text[-1]
    opens = [o for o, c in _QUOTE_PAIRS.items() if c == last]
    if last in ('"', "'", "`"):
        return text.count(last) % 2 == 1
    return sum(text.count(o) for o in opens) < text.count(last)


def clean_text(text: str) -> str:
    if _DIGIT.search(text) is not None:  # a trailing "(12s)" holds a digit
        text = _TRAILING_TS.sub("", text)
    text = _strip_quotes(text.replace("**", "").strip(_EDGE_CHARS))
    if text.count('"') % 2:  # an unbalanced '".' closing an echoed block
        text = _strip_quotes(_QUOTE_END.sub(r"\1", text).strip(_EDGE_CHARS))
    text = " ".join(text.split())
    if not any(map(str.isalpha, text)):
        return ""
    return text[0].upper() + text[1:]


def _opens_caption(line: str, m: re.Match[str]) -> bool:
    if m.start() == 0:  # line start: a unit, a clock, brackets or a separator all suffice
        return True
    marked = (m.group("open") and m.group("close")) or (m.group("sep") or "").strip()
    return bool(marked) and line[: m.start()].rstrip()[-1:] in ".!?;:"


def _split_line(line: str) -> list[tuple[float, str]]:
    """(seconds, text) for every caption a line opens; [] when it has no timestamp."""
    starts = [m for m in _TS.finditer(line) if _opens_caption(line, m)]
    stops = [m.start() for m in starts[1:]] + [len(line)]
    out = [(to_seconds(m.group("sec"), m.group("clock")), line[m.end():stop])
           for m, stop in zip(starts, stops, strict=False)]
    trail = None if out else _TRAILING_TS.search(line)
    m2 = _TS.match(trail.group("t")) if trail else None
    if trail and m2:
        out.append((to_seconds(m2.group("sec"), m2.group("clock")), line[: trail.start()]))
    return out


def _clean_plain(piece: str) -> str | None:
    """``clean_text`` of a plain line's text (printable ASCII, no digit) in its usual form,
    no double quote and no quote at either end, with its few string calls and not its
    general steps; None for any other form (``clean_text`` then decides)."""
    text = piece.strip(_EDGE_CHARS)
    if not text or '"' in text or "**" in text or text[0] in "'`" or text[-1] in "'`":
        return None
    if "  " in text:  # printable ASCII: the space is its only whitespace
        text = " ".join(text.split())
    if not text[0].isalpha() and not any(map(str.isalpha, text)):
        return ""
    return text[0].upper() + text[1:] if text[0].islower() else text


def _captions(line: str) -> list[tuple[float, str]]:
    """(seconds, cleaned text) of every caption ``line`` opens: ``_split_line`` and
    ``clean_text``, with the two common cases answered without their regexes: the plain
    ``12s: Text.`` line, and a line without a digit (no timestamp)."""
    plain = _PLAIN.fullmatch(line) if line.isascii() and line.isprintable() else None
    if plain is not None:
        piece = plain.group(2)
        text = _clean_plain(piece)
        return [(float(plain.group(1)), clean_text(piece) if text is None else text)]
    if _DIGIT.search(line) is None:
        return []
    return [(t, clean_text(piece)) for t, piece in _split_line(line)]


def parse_reply(reply: str, block: Block, clip_seconds: float = 8.0,
                slack: float = 0.0) -> ParseResult:
    """Captions ``(t, t + clip_seconds, text)`` of one reply for one block."""
    res = ParseResult()
    for start, _, end, text, key in parse_rows(reply, block, res, clip_seconds, slack):
        res.captions.append(ParsedCaption(start, end, text))
        res.keys.append(key)
    return res


# A parsed caption as the captioner keeps it: (start, block index, end, text, dedupe key).
CaptionRow = tuple[float, int, float, str, str]


def parse_rows(reply: str, block: Block, counts: ParseResult, clip_seconds: float,
               slack: float) -> list[CaptionRow]:
    """``parse_reply`` as tuples, what the captioner keeps (no object a caption, ~40 a
    video); the counts of what was dropped go into ``counts``.

    A line in the form nearly every reply has, ``12s: Text.`` (printable ASCII, no other
    digit, no ``**``), is read in place: the marker regex, the strip and ``_captions`` would
    leave it as it is (it starts with a digit that no list marker's ``.``/``)`` follows).
    In a reply of such lines, one regex call finds them all (``_PLAIN_LINES``)."""
    lo = math.floor(block.start) - slack
    hi = math.ceil(block.end) + slack
    index = block.index
    seen: set[str] = set()
    out: list[CaptionRow] = []
    reply = reply or ""
    # Printable ASCII lines without "**" (then "\n" is the only line break splitlines
    # knows): one regex call parts the whole reply into plain lines and others
    if reply.isascii() and "**" not in reply and reply.replace("\n", "").isprintable():
        lines = _PLAIN_LINES.findall(reply)
    else:
        lines = [("", "", raw) for raw in reply.splitlines()]
    for stamp, piece, raw in lines:
        if stamp:
            text = _clean_plain(piece)
            found: list[tuple[float, str]] = [
                (float(stamp), clean_text(piece) if text is None else text)]
        else:
            line = _MARKER.sub("", raw.replace("**", "")).strip()
            if not line:
                continue
            found = _captions(line)
            if not found:
                counts.n_no_timestamp += 1
                continue
        for t, text in found:
            if not text:
                counts.n_empty += 1
            elif not lo <= t <= hi:
                counts.n_out_of_range += 1
            else:
                key = _clean_key(text)
                if key in seen:
                    counts.n_duplicates += 1
                else:
                    seen.add(key)
                    t = float(t)
                    out.append((t, index, t + clip_seconds, text, key))
    return out
