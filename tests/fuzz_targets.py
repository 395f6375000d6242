"""Property-based fuzz targets (Hypothesis) for everything that reads user input.

Each target draws an input, feeds it to one reader and checks the contract: a valid result, or
one of the project's one-line errors (``HowtocapError`` / ``InputError``) — never any other
exception. ``tests/test_fuzz.py`` runs them with a few examples; ``benchmarks/bench_fuzz.py``
with thousands, counting cases and crashes (``Tally`` keeps going after a crash, so every
distinct crash is listed, not only the first).

Inputs are built from the field's real shapes (WebVTT/SRT cues with YouTube timing tags,
HowTo100M caption.json entries, HowToCaption score pairs, CSV manifests, LLM replies with every
timestamp form the parser accepts, YAML configs with the CLI's option names), then mutated
(truncated, bytes flipped, re-encoded), so most cases get past the first check.
"""

from __future__ import annotations

import contextlib
import json
import math
import pickle
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pandas as pd
from hypothesis import strategies as st

from howtocap.errors import HowtocapError

# -- shared pieces -------------------------------------------------------------------------------
WORDS = st.sampled_from(["crack", "the", "eggs", "whisk", "Add", "2.5", "cups", "salt", "[Music]",
                         "(laughs)", ">>", "&amp;", "<i>", "</i>", "<c>", "♪", "-->", "s:", "12s",
                         "é", "中文", "\u200b", "\t", "\"", "'", "#", ",", ";", ":", "-", ""])
LINE = st.lists(st.one_of(WORDS, st.text(max_size=8)), max_size=8).map(" ".join)
NUM = st.one_of(st.integers(-5, 100_000), st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0, 1, 59, 60, 61, 99, 3600]))


@st.composite
def timestamp(draw: st.DrawFn) -> str:
    """Mostly valid clock times (as real files hold), sometimes 61 minutes or 3-digit hours."""
    wild = draw(st.integers(0, 9)) == 0
    h = draw(st.integers(0, 120 if wild else 3))
    m, s = (draw(st.integers(0, 99 if wild else 59)) for _ in range(2))
    frac = draw(st.sampled_from(["", ".", ".5", ",500", ".1234", ",00"] if wild else
                                [".000", ".500", ",250", ".5"]))
    form = draw(st.sampled_from(["{h:02d}:{m:02d}:{s:02d}{f}", "{m:02d}:{s:02d}{f}",
                                 "{h}:{m}:{s}{f}", "{s}{f}", "{m:02d}:{s:02d}"] if wild else
                                ["{h:02d}:{m:02d}:{s:02d}{f}", "{m:02d}:{s:02d}{f}"]))
    return form.format(h=h, m=m, s=s, f=frac)


@st.composite
def subtitle_text(draw: st.DrawFn) -> str:
    """A WebVTT or SRT body: real-looking cues, some broken, some YouTube-style rolling."""
    vtt = draw(st.booleans())
    parts = ["WEBVTT\nKind: captions\n"] if vtt and draw(st.booleans()) else []
    for i in range(draw(st.integers(0, 8))):
        cue = []
        if not vtt or draw(st.booleans()):
            cue.append(draw(st.sampled_from([str(i + 1), "", "NOTE x", "abc"])))
        arrow = draw(st.sampled_from(["-->"] * 8 + ["->", "--", " - "]))
        cue.append(f"{draw(timestamp())} {arrow} {draw(timestamp())}"
                   + draw(st.sampled_from(["", " align:start position:0%", " x"])))
        for _ in range(draw(st.integers(0, 3))):
            text = draw(LINE)
            if draw(st.booleans()):
                text = f"{text}<{draw(timestamp())}><c> {draw(LINE)}</c>"
            cue.append(text)
        parts.append("\n".join(c for c in cue if c or draw(st.booleans())))
    sep = draw(st.sampled_from(["\n\n", "\r\n\r\n", "\n \n", "\n"]))
    return sep.join(parts)


def mutate(draw: st.DrawFn, data: bytes) -> bytes:
    """Leave it, truncate it, flip bytes, or re-encode it (UTF-16, Windows-1252, junk)."""
    how = draw(st.sampled_from(["keep"] * 5 + ["cut", "flip", "utf16", "junk", "bom"]))
    if how == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        return bytes(buf)
    if how == "utf16":
        return data.decode("utf-8", "replace").encode("utf-16")
    if how == "junk":
        return draw(st.binary(max_size=200))
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    return data


@st.composite
def subtitle_file(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix = draw(st.sampled_from([".vtt", ".srt", ".txt"]))
    return suffix, mutate(draw, draw(subtitle_text()).encode())


JSON_LEAF = st.one_of(st.none(), st.booleans(), NUM, st.text(max_size=10), LINE)
JSON_ANY = st.recursive(JSON_LEAF, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)),
    max_leaves=12)
TIME_LIST = st.lists(st.one_of(NUM, st.text(max_size=4), st.none()), max_size=6)
TEXT_ITEM = st.one_of(LINE, st.none(), NUM, st.lists(LINE, max_size=3),
                      st.lists(st.tuples(LINE, NUM).map(list), max_size=3))  # HowToCaption


@st.composite
def video_entry(draw: st.DrawFn) -> Any:
    """HowTo100M's ``{start, end, text}`` lists (lengths may differ), records, or junk."""
    kind = draw(st.sampled_from(["lists", "lists", "records", "junk"]))
    if kind == "junk":
        return draw(JSON_ANY)
    n = draw(st.integers(0, 5))
    start = draw(st.lists(NUM, min_size=n, max_size=n)) if draw(st.booleans()) \
        else draw(TIME_LIST)
    end = draw(st.lists(NUM, min_size=n, max_size=n)) if draw(st.booleans()) \
        else draw(TIME_LIST)
    text = draw(st.lists(TEXT_ITEM, min_size=n, max_size=n))
    entry = {"start": start, "end": end, "text": text}
    for key in list(entry):
        if draw(st.integers(0, 9)) == 0:
            del entry[key]
    if kind == "records":
        return [dict(zip(entry, vals, strict=False)) for vals in zip(*entry.values(),
                                                                     strict=False)]
    return entry


VIDEO_ID = st.one_of(st.text(min_size=0, max_size=12), st.sampled_from(
    ["vid1", "a/b", "../x", ".", "", " ", "ü", "x" * 300]))


@st.composite
def dump_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A caption.json (mapping or sentencified records), as JSON (maybe broken) or a pickle."""
    if draw(st.booleans()):
        data: Any = draw(st.dictionaries(VIDEO_ID, video_entry(), max_size=4))
    else:
        data = draw(st.lists(st.one_of(
            st.fixed_dictionaries({"video_id": VIDEO_ID, "start": NUM, "end": NUM,
                                   "text": TEXT_ITEM}), JSON_ANY), max_size=5))
    if draw(st.integers(0, 5)) == 0:
        return ".pickle", mutate(draw, pickle.dumps(data))
    return ".json", mutate(draw, json.dumps(data).encode())


CSV_CELL = st.one_of(LINE, NUM.map(str), st.sampled_from(["", '"', '""', "a,b", "x\ny", "NaN"]))


def csv_text(draw: st.DrawFn, columns: list[str]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for _ in range(draw(st.integers(0, 5))):
        w.writerow([draw(CSV_CELL) for _ in range(draw(st.integers(0, len(columns) + 1)))])
    return buf.getvalue()


COLUMN = st.sampled_from(["video_id", "start", "end", "text", "video_path", "subtitle_path",
                          "score", "", "Start"])


@st.composite
def csv_file(draw: st.DrawFn) -> bytes:
    cols = draw(st.lists(COLUMN, max_size=6))
    if draw(st.booleans()):
        cols = [c for c in ("video_id", "start", "end", "text") if c not in cols] + cols
    return mutate(draw, csv_text(draw, cols).encode())


@st.composite
def manifest_file(draw: st.DrawFn) -> bytes:
    cols = draw(st.lists(COLUMN, max_size=4))
    if draw(st.booleans()):
        cols = ["video_id", "video_path", *cols]
    return mutate(draw, csv_text(draw, cols).encode())


@st.composite
def reply_text(draw: st.DrawFn) -> str:
    """An LLM reply: list markers, every accepted timestamp form, chatter, junk."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        t = draw(st.one_of(st.integers(0, 100_000).map(str), st.floats(0, 1e6).map(
            lambda x: f"{x:.2f}"), timestamp()))
        form = draw(st.sampled_from(["{t}s: {x}", "{t} s - {x}", "[{t}s] {x}", "({t} sec) {x}",
                                     "{t}: {x}", "At {t}s, {x}", "{t}s-{t}s: {x}", "{x} ({t}s)",
                                     "{x} [{t}]", "{x}. {t}s: {x}", "{x}", "**{t}s**: {x}"]))
        marker = draw(st.sampled_from(["", "- ", "1. ", "* ", "(2) ", "## ", "•"]))
        lines.append(marker + form.format(t=t, x=draw(LINE)))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.text(max_size=40)))
    return "\n".join(lines)


OPTION = st.sampled_from(["block_words", "block-words", "clip_seconds", "llm_url", "template",
                          "concurrency", "limit", "temperature", "max_tokens", "stop", "constrain",
                          "nope", "", "config"])
YAML_VALUE = st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=3), st.dictionaries(
    st.text(max_size=4), JSON_LEAF, max_size=2))


@st.composite
def yaml_file(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 3)) == 0:  # raw text: YAML syntax errors, tabs, anchors, tags
        return mutate(draw, draw(st.text(alphabet=st.sampled_from(
            list("abc:-{}[]&*!|>'\"#\n\t %@`,?0123456789.")), max_size=80)).encode())
    import yaml

    data = draw(st.dictionaries(OPTION, YAML_VALUE, max_size=5))
    return mutate(draw, yaml.safe_dump(data).encode())


CAPTION_VALUES = st.fixed_dictionaries({}, optional={
    "block_words": NUM, "clip_seconds": NUM, "template": st.one_of(LINE, st.sampled_from(
        ["paper", "fewshot", "actions", "concise", "{asr}", "<block>", "/nonexistent.txt"])),
    "range_slack": NUM, "constrain": JSON_LEAF, "retries": NUM,
    "generation": st.one_of(JSON_LEAF, st.dictionaries(st.sampled_from(
        ["temperature", "top_p", "max_tokens", "stop", "seed", "x"]), JSON_LEAF, max_size=3))})
LLM_VALUES = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=8), "url": st.one_of(st.none(), LINE), "concurrency": NUM,
    "timeout": NUM, "max_retries": NUM, "x": JSON_LEAF})


# -- the contracts --------------------------------------------------------------------------------
def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def check_frame(df: pd.DataFrame, where: str) -> None:
    """What every subtitle reader promises: start/end/text, finite sorted times, end >= start."""
    assert list(df.columns[:3]) == ["start", "end", "text"], (where, list(df.columns))
    assert (df["end"] >= df["start"]).all(), where
    assert df["start"].is_monotonic_increasing, where
    assert all(isinstance(t, str) and t for t in df["text"]), where


def run_subtitle_file(case: tuple[str, bytes]) -> None:
    from howtocap.io.subtitles import read_subtitle_file

    with tempfile.TemporaryDirectory() as d:
        df = read_subtitle_file(_write(Path(d), "sub" + case[0], case[1]))
    check_frame(df, "subtitle file")


def run_dump(case: tuple[str, bytes]) -> None:
    from howtocap.io.subtitles import SubtitleSource

    with tempfile.TemporaryDirectory() as d:
        src = SubtitleSource.open(_write(Path(d), "caption" + case[0], case[1]),
                                  cache_dir=Path(d) / "cache")
        for vid in src.video_ids()[:5]:
            try:
                df = src.get(vid)
            except HowtocapError:
                continue  # this video's own one-line problem; the others still read
            assert df is not None
            check_frame(df, "dump")


def run_csv(case: bytes) -> None:
    """One CSV as a whole-dump source (video_id,start,end,text) and as a per-video file."""
    from howtocap.io.subtitles import SubtitleSource

    with tempfile.TemporaryDirectory() as d:
        src = SubtitleSource.open(_write(Path(d), "all.csv", case), cache_dir=Path(d) / "c")
        try:
            for vid in src.video_ids()[:5]:
                try:
                    df = src.get(vid)
                except HowtocapError:
                    continue
                check_frame(df, "csv dump")
        except HowtocapError:
            pass
        folder = Path(d) / "raw_caption"
        folder.mkdir()
        _write(folder, "vid1.csv", case)
        df = SubtitleSource.open(folder).get("vid1")
        assert df is not None
        check_frame(df, "csv part")


def run_manifest(case: bytes) -> None:
    from howtocap.io.inputs import read_id_list, resolve_inputs

    with tempfile.TemporaryDirectory() as d:
        path = _write(Path(d), "manifest.csv", case)
        try:
            items = resolve_inputs([path])
            assert all(it.video_id for it in items)
        finally:
            ids = read_id_list(path) if path.stat().st_size else None
            assert ids is None or all(ids)


def run_reply(case: tuple[str, float, float, float]) -> None:
    from howtocap.llm.blocks import Block
    from howtocap.llm.parse import norm_text, parse_reply

    text, start, length, slack = case
    block = Block(0, start, start + length, "")
    res = parse_reply(text, block, 8.0, slack)
    lo, hi = math.floor(block.start) - slack, math.ceil(block.end) + slack
    keys = [norm_text(c.text) for c in res.captions]
    assert len(set(keys)) == len(keys)
    for c in res.captions:
        assert lo <= c.start <= hi and c.end == c.start + 8.0 and c.text.strip()


def run_config(case: tuple[bytes, dict[str, Any], dict[str, Any]]) -> None:
    from howtocap.cliutil import load_yaml_config, validated
    from howtocap.llm import LLMOptions
    from howtocap.llm.captioner import CaptionConfig

    data, cap, llm = case
    values = {"config": None, "block_words": 200, "clip_seconds": 8.0, "llm_url": None,
              "template": None, "concurrency": 4, "limit": None, "temperature": None,
              "max_tokens": None, "stop": None, "constrain": True}
    ctx = click.Context(click.Command("caption"))
    with tempfile.TemporaryDirectory() as d:
        try:
            merged = load_yaml_config(ctx, _write(Path(d), "cfg.yaml", data), values)
            assert set(merged) == set(values)
        except HowtocapError:
            pass
    with contextlib.suppress(HowtocapError):
        validated(CaptionConfig, **cap).resolved_template()
    validated(LLMOptions, **llm)


TARGETS: dict[str, tuple[Any, Callable[[Any], None]]] = {
    "vtt/srt files": (subtitle_file(), run_subtitle_file),
    "caption.json / pickle dumps": (dump_file(), run_dump),
    "CSV sources (dump + per video)": (csv_file(), run_csv),
    "manifests + --ids lists": (manifest_file(), run_manifest),
    "LLM reply parser": (st.tuples(reply_text(), st.floats(0, 1e5), st.floats(0, 600),
                                   st.sampled_from([0.0, 2.0])), run_reply),
    "config loader + settings": (st.tuples(yaml_file(), CAPTION_VALUES, LLM_VALUES), run_config),
}


@dataclass
class Tally:
    """Cases tried and crashes (anything but a valid result or a ``HowtocapError``)."""

    cases: int = 0
    one_line_errors: int = 0
    crashes: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    def run(self, fn: Callable[[Any], None], case: Any, *, keep_going: bool) -> None:
        self.cases += 1
        try:
            fn(case)
        except HowtocapError as exc:
            msg = str(exc)
            self.one_line_errors += 1
            if "\n" in msg or not msg.strip():
                self._crash(f"not one line: {msg!r}", case, keep_going)
        except Exception as exc:  # the contract is broken: record it (or fail the test)
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self._crash(f"{type(exc).__name__}: {str(exc)[:200]} at "
                        f"{Path(where.filename).name}:{where.lineno}", case, keep_going, exc)

    def _crash(self, what: str, case: Any, keep_going: bool,
               exc: BaseException | None = None) -> None:
        self.kinds[what.split(" at ")[0][:80]] += 1
        if len(self.crashes) < 50:
            self.crashes.append(f"{what} <- {case!r}"[:600])
        if not keep_going:
            if exc is not None:
                raise exc
            raise AssertionError(what)
