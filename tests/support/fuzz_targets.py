"""Property-based fuzz targets (Hypothesis) for everything that reads user input.

Each target draws an input, feeds it to one reader and checks the contract: a valid result, or
one of the project's one-line errors (``HowtocapError`` / ``InputError``) — never any other
exception. ``tests/test_fuzz.py`` runs them with a few examples;
``benchmarks/robustness/bench_fuzz.py`` with thousands, counting cases and crashes (``Tally``
keeps going after a crash, so every distinct crash is listed, not only the first).

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
        as_manifest: HowtocapError | None = None
        try:  # only the one-line error is caught: any other exception is the crash it is
            items = resolve_inputs([path])
            assert all(it.video_id for it in items)
        except HowtocapError as exc:
            as_manifest = exc
        if path.stat().st_size:  # the same bytes as an --ids list
            ids = read_id_list(path)
            assert all(ids)
        if as_manifest is not None:
            raise as_manifest


def run_reply(case: tuple[str, float, float, float]) -> None:
    from howtocap.caption.blocks import Block
    from howtocap.caption.parse import norm_text, parse_reply

    text, start, length, slack = case
    block = Block(0, start, start + length, "")
    res = parse_reply(text, block, 8.0, slack)
    lo, hi = math.floor(block.start) - slack, math.ceil(block.end) + slack
    keys = [norm_text(c.text) for c in res.captions]
    assert len(set(keys)) == len(keys)
    for c in res.captions:
        assert lo <= c.start <= hi and c.end == c.start + 8.0 and c.text.strip()


def run_config(case: tuple[bytes, dict[str, Any], dict[str, Any]]) -> None:
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.cli.common import load_yaml_config, validated
    from howtocap.llm import LLMOptions

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


# -- structured mutation of valid files ---------------------------------------------------------
def _perturb_once(draw: st.DrawFn, node: Any) -> Any:
    """Walk into a random branch and replace what is there by junk (or drop a key)."""
    if isinstance(node, dict) and node and draw(st.integers(0, 2)):
        key = draw(st.sampled_from(sorted(node, key=repr)))
        node = dict(node)
        if draw(st.integers(0, 3)) == 0:
            del node[key]
        else:
            node[key] = _perturb_once(draw, node[key])
        return node
    if isinstance(node, list) and node and draw(st.integers(0, 2)):
        i = draw(st.integers(0, len(node) - 1))
        return [*node[:i], _perturb_once(draw, node[i]), *node[i + 1:]]
    return draw(JSON_ANY)


def perturb(draw: st.DrawFn, data: Any) -> Any:
    """A valid structure with 0-2 places broken: gets deepest into a reader's checks."""
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        data = _perturb_once(draw, data)
    return data


def json_bytes(draw: st.DrawFn, data: Any, bad: bool = True) -> bytes:
    """JSON as the releases write it (one line, maybe NaN), then perturbed and mutated (only
    when ``bad``: in a case of several files one is broken, so the others get read)."""
    if not bad:
        return json.dumps(data).encode()
    return mutate(draw, json.dumps(perturb(draw, data)).encode())


def table_bytes(draw: st.DrawFn, header: list[str] | None, rows: list[list[str]],
                delimiter: str = ",", bad: bool = True) -> bytes:
    """A CSV/TSV of valid rows with cells replaced, rows cut short or padded, columns dropped."""
    import csv
    import io

    header = list(header) if header is not None else None
    if bad and header and draw(st.integers(0, 5)) == 0:
        del header[draw(st.integers(0, len(header) - 1))]
    body = []
    for row in rows:
        row = list(row)
        how = draw(st.sampled_from(["keep"] * 6 + ["cell", "cut", "pad"])) if bad else "keep"
        if how == "cell" and row:
            row[draw(st.integers(0, len(row) - 1))] = draw(CSV_CELL)
        elif how == "cut":
            row = row[: draw(st.integers(0, len(row)))]
        elif how == "pad":
            row.append(draw(CSV_CELL))
        body.append(row)
    buf = io.StringIO()
    if delimiter == "\t":  # LSMDC: plain tab-joined lines, no quoting
        buf.write("".join("\t".join(r) + "\n" for r in body))
    else:
        w = csv.writer(buf, delimiter=delimiter)
        if header is not None:
            w.writerow(header)
        w.writerows(body)
    return mutate(draw, buf.getvalue().encode()) if bad else buf.getvalue().encode()


SENTENCE = st.one_of(st.sampled_from(["crack the eggs into a bowl", "whisk the eggs",
                                     "add 2.5 cups of flour", "Pour the batter ♪"]), LINE)
YT_ID = st.one_of(st.sampled_from(["GLd3aX16zBg", "-4wsuPCjDBc", "_uAZw6L_R5g", "xHr8X2Wpmno"]),
                  VIDEO_ID)


@st.composite
def youcook2_json(draw: st.DrawFn) -> dict[str, Any]:
    """``youcookii_annotations_trainval.json``: whole-second segments, recipe_type a string."""
    db: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        vid, t, anns = draw(YT_ID), draw(st.integers(0, 40)), []
        for i in range(draw(st.integers(0, 4))):
            s = t + draw(st.integers(0, 20))
            t = s + draw(st.sampled_from([1, 4, 10, 30, 0, -1]))
            ann: dict[str, Any] = {"id": i, "segment": [s, t], "sentence": draw(SENTENCE)}
            if draw(st.integers(0, 3)) == 0:  # our generated TDR sets carry key objects
                ann["key_objects"] = draw(st.lists(st.sampled_from(["egg", "pan", "Salt"]),
                                                   max_size=3))
            anns.append(ann)
        db[vid] = {"duration": float(t + draw(st.integers(0, 30))), "subset": draw(
            st.sampled_from(["training", "validation", "validation", "testing"])),
            "recipe_type": draw(st.sampled_from(["113", "201", "101"])), "annotations": anns,
            "video_url": f"https://www.youtube.com/watch?v={vid}"}
    return {"database": db}


@st.composite
def eval_annotation(draw: st.DrawFn) -> tuple[str, dict[str, bytes]]:
    """One ``howtocap eval`` benchmark's files, in its published form, then broken."""
    kind = draw(st.sampled_from(["msrvtt", "youcook2", "msvd", "lsmdc", "csv"]))
    n = draw(st.integers(0, 4))
    if kind == "msrvtt":  # MSRVTT_JSFUSION_test.csv
        rows = [[f"ret{i}", f"msr{7000 + i}", f"video{7000 + i}", draw(LINE)] for i in range(n)]
        return kind, {"ann.csv": table_bytes(draw, ["key", "vid_key", "video_id", "sentence"],
                                             rows)}
    if kind == "youcook2":
        return kind, {"ann.json": json_bytes(draw, draw(youcook2_json()))}
    if kind == "msvd":  # test_list.txt + raw-captions.pkl of token lists
        ids = [f"-4wsuPCjDBc_{5 * i}_{5 * i + 10}" for i in range(n)]
        caps = {v: [draw(LINE).split() for _ in range(draw(st.integers(0, 3)))] for v in ids}
        listed = ids + draw(st.lists(VIDEO_ID, max_size=1))
        return kind, {"test_list.txt": mutate(draw, "\n".join(listed).encode()),
                      "raw-captions.pkl": mutate(draw, pickle.dumps(perturb(draw, caps)))}
    if kind == "lsmdc":  # LSMDC16_challenge_1000_publictect.csv: 6 tab-separated fields
        rows = [[f"1001_Flight_00.00.{i:02d}.000-00.00.{i + 5:02d}.000", f"00.00.{i:02d}.000",
                 f"00.00.{i + 5:02d}.000", f"00.00.{i:02d}.000", f"00.00.{i + 5:02d}.000",
                 draw(LINE)] for i in range(n)]
        return kind, {"ann.csv": table_bytes(draw, None, rows, "\t")}
    rows = [[f"v{i}", draw(st.sampled_from([f"v{i}.mp4", "", "../x.mp4", "a\x00b.mp4"])),
             draw(LINE), *draw(st.sampled_from([["", ""], ["0", "5"], ["2.5", "1"], ["nan", "inf"],
                                                ["-1", "3"]]))] for i in range(n)]
    return kind, {"ann.csv": table_bytes(draw, ["video_id", "video_path", "caption", "start",
                                                "end"], rows)}


@st.composite
def crosstask_release(draw: st.DrawFn) -> dict[str, bytes]:
    """A CrossTask release folder: tasks_primary.txt, videos_val.csv, annotations/*.csv."""
    files: dict[str, bytes] = {}
    tasks, records = {}, []
    for t in draw(st.lists(st.sampled_from(["16815", "23521", "113766", ""]), min_size=1,
                           max_size=3, unique=True)):
        steps = draw(st.lists(st.sampled_from(["pour milk", "add sugar", "whisk", "stir mixture",
                                               "pour milk"] * 3 + [""]), min_size=1, max_size=4))
        n = len(steps) + draw(st.sampled_from([0] * 8 + [1, -1]))
        records.append(f"{t}\nMake Pancakes\nhttps://www.wikihow.com/Make-Pancakes\n{n}\n"
                       f"{','.join(steps)}\n")
        tasks[t] = len(steps)
    bad = draw(st.sampled_from(["tasks", "videos", "annotations"]))
    files["tasks_primary.txt"] = "\n".join(records).encode()
    if bad == "tasks":
        files["tasks_primary.txt"] = mutate(draw, files["tasks_primary.txt"])
    videos = [[t, draw(st.sampled_from(["_uAZw6L_R5g", "-4wsuPCjDBc", "zQZ3Fh", "a/b"])),
               "https://www.youtube.com/watch?v=x"] for t in list(tasks) + ["91537"]]
    files["videos_val.csv"] = table_bytes(draw, None, videos, bad=bad == "videos")
    for t, vid, _ in videos:
        rows = []
        for _ in range(draw(st.integers(0, 4))):
            s = draw(st.floats(0, 300, allow_nan=False)) if draw(st.booleans()) \
                else draw(NUM)
            rows.append([str(draw(st.integers(0, tasks.get(t, 3) + 1))), f"{s:.2f}"
                         if isinstance(s, float) else str(s),
                         f"{s + draw(st.floats(-5, 30)):.2f}" if isinstance(s, float) else "x"])
        if "/" not in vid:
            files[f"annotations/{t}_{vid}.csv"] = table_bytes(draw, None, rows,
                                                              bad=bad == "annotations")
    return files


@st.composite
def dvc_files(draw: st.DrawFn) -> dict[str, bytes]:
    """A predictions file (densevid_eval submission) and a ground truth (PDVC's yc2_val.json
    with ``v_`` keys, or YouCook2's release)."""
    vids = draw(st.lists(st.sampled_from(["v_GLd3aX16zBg", "v_xHr8X2Wpmno", "v_x"]), max_size=3,
                         unique=True))
    gt: dict[str, Any] = {}
    if draw(st.booleans()):
        for v in vids:
            k = draw(st.integers(0, 3))
            ts = [[float(5 * i), float(5 * i + draw(st.integers(-1, 9)))] for i in range(k)]
            gt[v] = {"duration": 60.0, "timestamps": ts, "sentences": [draw(LINE)
                                                                       for _ in range(k)]}
        if draw(st.integers(0, 4)) == 0:  # yc2_test.json's placeholders
            gt["v_test"] = {"duration": 1.0, "timestamps": [[0, 1]], "sentences": ["None"]}
    else:
        gt = draw(youcook2_json())
    pred = {"version": "VERSION 1.0", "results": {v: [
        {"sentence": draw(LINE), "timestamp": [float(s), float(s + draw(st.integers(-1, 9)))]}
        for s in draw(st.lists(st.integers(0, 50), max_size=3))]
        for v in draw(st.lists(st.sampled_from([*vids, "v_other"]), max_size=3))},
        "external_data": {"used": False, "details": ""}}
    bad = draw(st.booleans())
    return {"pred.json": json_bytes(draw, pred, bad), "gt.json": json_bytes(draw, gt, not bad)}


@st.composite
def tdr_files(draw: st.DrawFn) -> dict[str, bytes]:
    """TDR's YouCook2 annotations and its scripts, ``{goal: [[sentence]]}`` or the recipe crawl
    ``{food name: [{"split_ins": [...]}]}`` (empty sentences occur)."""
    sents = st.lists(st.one_of(SENTENCE, SENTENCE, st.just("")), min_size=1, max_size=4)
    goals = draw(st.lists(st.sampled_from(["113", "201", "burger", "pancakes"]), min_size=1,
                          max_size=3, unique=True))
    if draw(st.booleans()):
        scripts: dict[str, Any] = {g: [draw(sents) for _ in range(draw(st.integers(1, 2)))]
                                   for g in goals}
    else:
        scripts = {g: [{"title": g, "split_ins": draw(sents)}
                       for _ in range(draw(st.integers(1, 2)))] for g in goals}
    bad = draw(st.booleans())
    return {"ann.json": json_bytes(draw, draw(youcook2_json()), bad),
            "scripts.json": json_bytes(draw, scripts, not bad)}


@st.composite
def template_file(draw: st.DrawFn) -> tuple[str, bytes]:
    """A ``--template`` file: plain text with ``{asr}``/``<block>``, or YAML/JSON with prompt,
    system and few-shot examples."""
    suffix = draw(st.sampled_from([".txt", ".yaml", ".yml", ".json"]))
    prompt = draw(LINE) + draw(st.sampled_from([" {asr}", " <block>", "", " {asr} {asr}"])) \
        + draw(LINE)
    if suffix == ".txt":
        return suffix, mutate(draw, prompt.encode())
    data = perturb(draw, {"system": draw(LINE), "prompt": prompt, "examples": [
        [draw(LINE), draw(LINE)] for _ in range(draw(st.integers(0, 2)))]})
    if suffix == ".json":
        return suffix, mutate(draw, json.dumps(data).encode())
    import yaml

    return suffix, mutate(draw, yaml.safe_dump(data, allow_unicode=True).encode())


@st.composite
def pairs_csv(draw: st.DrawFn) -> bytes:
    """``howtocap train`` pairs: ``video_id,video_path,caption,start,end`` (or ``text``)."""
    text_col = draw(st.sampled_from(["caption", "text"]))
    wild = draw(st.integers(0, 3)) == 0  # most files hold only plausible rows
    rows = [[draw(st.sampled_from(["v1", "v2", ""] if wild else ["v1", "v2"])),
             draw(st.sampled_from(["v.mp4", "missing.mp4", "", "a\x00b.mp4", "../v.mp4"] if wild
                                  else ["v.mp4", "v.mp4", "missing.mp4", ""])), draw(SENTENCE),
             *draw(st.sampled_from([["0", "8"], ["3.5", "11.5"], ["5", "5"], ["nan", "1"],
                                    ["0", "inf"], ["x", "1"]] if wild else
                                   [["0", "8"], ["3.5", "11.5"], ["5", "5"]]))]
            for _ in range(draw(st.integers(0, 5)))]
    return table_bytes(draw, ["video_id", "video_path", text_col, "start", "end"], rows)


def _write_all(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def check_clip(start: float | None, end: float | None, where: str) -> None:
    """A clip is the whole video or a finite span that ends after it starts."""
    if start is None or end is None:
        assert start is None and end is None, where
    else:
        assert math.isfinite(start) and math.isfinite(end) and end > start, (where, start, end)


def run_eval_annotation(case: tuple[str, dict[str, bytes]]) -> None:
    from howtocap.evaluate.benchmarks import read_benchmark

    kind, files = case
    with tempfile.TemporaryDirectory() as d:
        _write_all(Path(d), files)
        (Path(d) / "v0.mp4").write_bytes(b"")
        ann = Path(d) / ("test_list.txt" if kind == "msvd" else next(iter(files)))
        samples = read_benchmark(kind, ann, d)
    for s in samples:
        assert isinstance(s.video_id, str) and s.video_id, kind
        assert isinstance(s.caption, str) and s.caption.strip(), kind
        check_clip(s.start, s.end, kind)


def run_crosstask(files: dict[str, bytes]) -> None:
    """The release as ``howtocap crosstask`` reads it: tasks and videos, then each video's
    annotation (a bad one skips that video with one line, as the evaluation does)."""
    from howtocap.evaluate.crosstask import gt_matrix, read_annotation, read_release

    with tempfile.TemporaryDirectory() as d:
        _write_all(Path(d), files)
        rel = read_release(d, "val")
        for v in rel.videos:
            assert v.task_id in rel.tasks and v.video_id
            path = rel.annotation_path(v)
            if not path.is_file():
                continue
            n_steps = len(rel.tasks[v.task_id].steps)
            try:
                seg = read_annotation(path, n_steps)
            except HowtocapError:
                continue
            assert seg.shape[1] == 3 and ((seg[:, 0] >= 0) & (seg[:, 0] < n_steps)).all()
            assert gt_matrix(seg, 30, n_steps).shape == (30, n_steps)


def run_dvc(files: dict[str, bytes]) -> None:
    """``howtocap dvc-eval``'s inputs; when both load, the scores (METEOR's JVM left out)."""
    import warnings

    from howtocap.dvc.data import load_ground_truth, load_predictions
    from howtocap.dvc.evaluate import evaluate

    with tempfile.TemporaryDirectory() as d:
        _write_all(Path(d), files)
        loaded, errors = [], []
        for load, name in ((load_predictions, "pred.json"), (load_ground_truth, "gt.json")):
            try:
                loaded.append(load(Path(d) / name))
            except HowtocapError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        pred, gt = loaded  # what dvc-eval scores (a file with a BOM reads; json.loads would not)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate(pred, gt, meteor=False)
    for m, v in res["scores"].items():
        assert v is None or (math.isfinite(v) and v >= 0), (m, v)


def run_tdr(files: dict[str, bytes]) -> None:
    from howtocap.tdr.data import read_annotations, read_scripts

    with tempfile.TemporaryDirectory() as d:
        _write_all(Path(d), files)
        errors = []
        try:
            anns = read_annotations(Path(d) / "ann.json", key_objects=False)
            for a in anns.values():
                assert math.isfinite(a.duration), a
                for s in a.steps:
                    assert math.isfinite(s.start) and math.isfinite(s.end) and s.end >= s.start
                    assert s.sentence.strip()
        except HowtocapError as exc:
            errors.append(exc)
        try:
            scripts = read_scripts(Path(d) / "scripts.json")
            assert all(sc and all(s.strip() for s in sc) for v in scripts.values() for sc in v)
        except HowtocapError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]


def run_template(case: tuple[str, bytes]) -> None:
    from howtocap.caption.prompt import resolve_template

    with tempfile.TemporaryDirectory() as d:
        tpl = resolve_template(_write(Path(d), "mine" + case[0], case[1]))
    assert "0.0s: crack the eggs" in tpl.render("0.0s: crack the eggs")
    assert all(isinstance(a, str) and isinstance(b, str) for a, b in tpl.examples)


def run_pairs(case: bytes) -> None:
    """A CSV of training pairs as ``howtocap train`` reads it, then grouped into clips (a probe
    that knows one video file stands in for PyAV's)."""
    from howtocap.errors import InputError
    from howtocap.io.pairs import build_clips, read_pairs

    with tempfile.TemporaryDirectory() as d:
        video = _write(Path(d), "v.mp4", b"")

        def check(p: Path) -> float:
            if p.resolve() != video.resolve():
                raise InputError(p, "cannot open video")
            return 20.0

        ps = build_clips(read_pairs(_write(Path(d), "pairs.csv", case)), check=check, log=None)
    for c in ps.clips:
        check_clip(c.start, c.end, "pairs")
        assert c.video_id and c.captions and all(t.strip() for t in c.captions)


TARGETS: dict[str, tuple[Any, Callable[[Any], None]]] = {
    "vtt/srt files": (subtitle_file(), run_subtitle_file),
    "caption.json / pickle dumps": (dump_file(), run_dump),
    "CSV sources (dump + per video)": (csv_file(), run_csv),
    "manifests + --ids lists": (manifest_file(), run_manifest),
    "LLM reply parser": (st.tuples(reply_text(), st.floats(0, 1e5), st.floats(0, 600),
                                   st.sampled_from([0.0, 2.0])), run_reply),
    "config loader + settings": (st.tuples(yaml_file(), CAPTION_VALUES, LLM_VALUES), run_config),
    "eval annotations (MSR-VTT, YouCook2, MSVD, LSMDC, CSV)": (eval_annotation(),
                                                              run_eval_annotation),
    "CrossTask release": (crosstask_release(), run_crosstask),
    "dvc-eval predictions + ground truth": (dvc_files(), run_dvc),
    "TDR annotations + scripts": (tdr_files(), run_tdr),
    "--template files": (template_file(), run_template),
    "training-pair CSVs": (pairs_csv(), run_pairs),
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
