"""Subtitle readers: YouTube rolling cues, SRT, malformed files, HowTo100M-style sources."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.errors import InputError
from howtocap.io.inputs import VideoItem
from howtocap.io.subtitle_rows import clean_text
from howtocap.io.subtitles import (
    SubtitleSource,
    read_srt,
    read_subtitle_file,
    read_vtt,
    subtitles_for_video,
)
from howtocap.schemas import SCHEMAS

# What yt-dlp --write-auto-subs writes: every cue repeats the previous line, new words carry
# <time><c> tags, and 10-ms "transition" cues hold the finished line alone.
YOUTUBE_VTT = """WEBVTT
Kind: captions
Language: en

00:00:00.160 --> 00:00:02.350 align:start position:0%
_SPACE_
hi<00:00:00.480><c> everyone</c><00:00:00.960><c> today</c>\
<00:00:01.520><c> we're</c><00:00:01.760><c> making</c>

00:00:02.350 --> 00:00:02.360 align:start position:0%
hi everyone today we're making
_SPACE_

00:00:02.360 --> 00:00:05.030 align:start position:0%
hi everyone today we're making
banana<00:00:02.880><c> bread</c><00:00:03.600><c> so</c><00:00:04.080><c> first</c>

00:00:05.030 --> 00:00:05.040 align:start position:0%
banana bread so first
_SPACE_

00:00:05.040 --> 00:00:07.990 align:start position:0%
banana bread so first
[Music]

00:00:07.990 --> 00:00:08.000 align:start position:0%
[Music]
_SPACE_

00:00:08.000 --> 00:00:11.270 align:start position:0%
[Music]
&gt;&gt; mash<00:00:08.400><c> three</c><00:00:08.800><c> ripe</c><00:00:09.440><c> bananas</c>

00:00:11.270 --> 00:00:11.280 align:start position:0%
mash three ripe bananas
_SPACE_

00:00:11.280 --> 00:00:14.000 align:start position:0%
mash three ripe bananas
in<00:00:11.600><c> a</c><00:00:11.760><c> bowl</c>
""".replace("_SPACE_", " ")

SRT = """1
00:00:01,000 --> 00:00:03,500
<i>First,</i> preheat the oven
to 180 degrees.

2
00:00:03,000 --> 00:00:06,000
(laughs) Then grease the pan.

3
00:00:07,000 --> 00:00:06,000
This cue ends before it starts.

4
00:00:08,000 --> 00:00:09,000
- Whisk the eggs, [sizzling]

5
00:00:09,000 --> 00:00:10,000
- Whisk the eggs,
"""


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def test_youtube_rolling_cues_give_each_line_once(tmp_path: Path) -> None:
    df = read_vtt(_write(tmp_path, "yt.en.vtt", YOUTUBE_VTT))
    assert list(df.columns) == ["start", "end", "text"]
    assert df["text"].tolist() == ["hi everyone today we're making", "banana bread so first",
                                   "mash three ripe bananas", "in a bowl"]
    assert df["start"].tolist() == pytest.approx([0.16, 2.36, 8.0, 11.28])
    # a line lasts until the next line starts (transition cues extend it, [Music] does not)
    assert df["end"].tolist() == pytest.approx([2.36, 5.04, 11.28, 14.0])
    assert df["start"].is_monotonic_increasing


def test_srt_cleaning_overlap_and_bad_order(tmp_path: Path) -> None:
    df = read_srt(_write(tmp_path, "a.srt", SRT))
    assert df["text"].tolist() == ["First, preheat the oven to 180 degrees.",
                                   "Then grease the pan.", "Whisk the eggs,"]
    # the overlapping first cue is clipped to where the second begins
    assert df[["start", "end"]].values.tolist() == [[1.0, 3.0], [3.0, 6.0], [8.0, 10.0]]
    assert df.attrs["dropped_cues"] == 1


def test_sniffing_bom_and_cp1252(tmp_path: Path) -> None:
    vtt_body = "WEBVTT\n\n1\n00:01.000 --> 00:02.500\nhello  <b>there</b>\n"
    for name in ("x.srt", "x.txt"):  # content decides over a wrong or missing extension
        df = read_subtitle_file(_write(tmp_path, name, vtt_body))
        assert df.values.tolist() == [[1.0, 2.5, "hello there"]]
    bom = _write(tmp_path, "bom.srt", "\ufeff" + SRT.split("\n\n")[0] + "\n")
    assert read_subtitle_file(bom)["text"].tolist() == ["First, preheat the oven to 180 degrees."]
    legacy = _write(tmp_path, "old.srt", "1\n00:00:01,000 --> 00:00:02,000\nCafé crème\n"
                    .encode("cp1252"))
    assert read_srt(legacy)["text"].tolist() == ["Café crème"]


@pytest.mark.parametrize(("content", "problem"), [
    (b"", "empty file"),
    (b"  \n\n", "empty file"),
    (b"WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nok\n\n00:00:0x.000 --> 00:00:03.000\nbad\n",
     r"line 6: bad timestamp line '00:00:0x\.000 --> 00:00:03\.000'"),
    (b"1\n00:00:01,000 --> 00:00:02,000\nok\n\n2\n00:00:02,000 - 00:00:03,000\nbad\n",
     "line 6: bad timestamp line"),
    (b"1\n00:00:01,000 --> 00:00:75,000\nseconds out of range\n", "line 2: bad timestamp"),
    (b"WEBVTT\n\nNOTE nothing here\n", "no cues found"),
    (b"just some text\nwithout any timing\n", "no cues found"),
    (b"1\n00:00:01,000 --> 00:00:02,000\n\x81\x8d broken\n", r"not UTF-8 text \(invalid byte 0x81"),
    (b"\x00\x01\x02binary\x00", "binary data"),
])
def test_malformed_files_raise_one_line_input_errors(tmp_path: Path, content: bytes,
                                                     problem: str) -> None:
    path = _write(tmp_path, "bad.srt", content)
    with pytest.raises(InputError, match=problem) as info:
        read_subtitle_file(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_vtt(tmp_path / "nope.vtt")


def test_clean_text() -> None:
    assert clean_text(" >> so <c.colorE5E5E5>now</c>  we&#39;re [Applause] done ♪ ") == \
        "so now we're done"
    assert clean_text("(this is a longer aside we keep)") == "(this is a longer aside we keep)"
    assert clean_text("[Music]") == ""



def test_tidy_rows_cleans_a_video_exactly_as_line_by_line() -> None:
    """``tidy_rows`` skips ``clean_text`` when one search of a video's lines joined finds
    nothing it would act on: a fuzz of lines with markup, sound tags, dashes, odd
    whitespace (tab, NBSP, newline, ideographic space) at either edge or inside, gets the
    rows the per-line cleaning gives, for videos where one line or none needs it."""
    import random

    from howtocap.io.subtitle_rows import ODD_SPACES, tidy_rows

    rng = random.Random(5)
    odd = ["-", "- ", " ", "  ", "\t", "\xa0", "\n", "\u3000", "<i>", "&amp;", "[Music]",
           "(laughs)", "\u266a", "\u200b", ">> "]
    words = ["stir", "the", "soup", "now", "add", "salt"]
    cleaned = 0
    for _ in range(3000):
        lines = [" ".join(rng.choices(words, k=rng.randint(1, 5))) for _ in range(4)]
        if rng.random() < 0.7:  # one line gets one odd piece at its start, end or inside
            i, piece = rng.randrange(4), rng.choice(odd)
            at = rng.choice([0, len(lines[i]), lines[i].find(" ") if " " in lines[i] else 0])
            lines[i] = lines[i][:at] + piece + lines[i][at:]
        rows = [(float(k), float(k) + 1.0, t, None) for k, t in enumerate(lines)]
        want = tidy_rows([(s, e, clean_text(t), sc) for s, e, t, sc in rows], clean=False)
        got = tidy_rows(rows)
        assert got == want, lines
        cleaned += want != tidy_rows(rows, clean=False)
    assert cleaned > 1000  # the fuzz does reach lines that cleaning changes
    spaces = "".join(c for c in map(chr, range(0x110000)) if c.isspace() and c != " ")
    assert spaces == ODD_SPACES

HTM = {
    "vid_a": {"start": [0.0, 5.2, 3.0], "end": [5.0, 9.0, 5.1],
              "text": ["first  step", "[Music]", "stir the <i>soup</i>"]},
    "vid_b": {"start": [1, 2], "end": [2, 4], "text": ["one", "two"]},
}


def _check_htm(src: SubtitleSource) -> None:
    assert sorted(src.video_ids()) == ["vid_a", "vid_b"]
    a = src.get("vid_a")
    assert a is not None
    assert a.values.tolist() == [[0.0, 3.0, "first step"], [3.0, 5.1, "stir the soup"]]
    b = src.get("vid_b")
    assert b is not None and b["text"].tolist() == ["one", "two"]
    assert b["start"].dtype == "float64"
    assert src.get("not_there") is None


def test_howto100m_json_pickle_and_records(tmp_path: Path) -> None:
    j = tmp_path / "caption.json"
    j.write_text(json.dumps(HTM))
    _check_htm(SubtitleSource.open(j))
    p = tmp_path / "sentencified_htm.pickle"
    p.write_bytes(pickle.dumps(HTM))
    _check_htm(SubtitleSource.open(p))
    records = [{"video_id": v, "start": s, "end": e, "text": t}
               for v, d in HTM.items()
               for s, e, t in zip(d["start"], d["end"], d["text"], strict=True)]
    r = tmp_path / "records.json"
    r.write_text(json.dumps(records))
    _check_htm(SubtitleSource.open(r))
    per_video_lists = {v: [{"start": s, "end": e, "text": t}
                           for s, e, t in zip(d["start"], d["end"], d["text"], strict=True)]
                       for v, d in HTM.items()}
    pv = tmp_path / "lists.json"
    pv.write_text(json.dumps(per_video_lists))
    _check_htm(SubtitleSource.open(pv))


def test_howtocaption_lists_with_scores(tmp_path: Path) -> None:
    data = {"v": {"start": [12, 19], "end": [20, 27],
                  "text": [[["Unload a shotgun", 0.57]],
                           [["Load it", 0.5], ["Load the gun", 0.4]]]}}
    p = tmp_path / "howtocaption.pickle"
    p.write_bytes(pickle.dumps(data))
    df = SubtitleSource.open(p).get("v")
    assert df is not None
    assert df["text"].tolist() == ["Unload a shotgun", "Load it", "Load the gun"]
    assert df["score"].tolist() == pytest.approx([0.57, 0.5, 0.4])


def test_csv_folder_is_read_lazily(tmp_path: Path) -> None:
    folder = tmp_path / "raw_caption"
    folder.mkdir()
    pd.DataFrame({"start": [0.5, 2.0], "end": [2.0, 4.0], "text": ["hello", "world"]}).to_csv(
        folder / "vid_1.csv", index=False)
    (folder / "vid_2.csv").write_text("start,end,text\n1.0,oops,broken\n")
    (folder / "vid_3.vtt").write_text("WEBVTT\n\n00:01.000 --> 00:02.000\nfrom vtt\n")
    src = SubtitleSource.open(folder)
    assert sorted(src.video_ids()) == ["vid_1", "vid_2", "vid_3"]
    df = src.get("vid_1")  # the broken vid_2 is never read for this
    assert df is not None and df.values.tolist() == [[0.5, 2.0, "hello"], [2.0, 4.0, "world"]]
    v3 = src.get("vid_3")
    assert v3 is not None and v3["text"].tolist() == ["from vtt"]
    assert src.get("vid_9") is None
    with pytest.raises(InputError, match=r"vid_2\.csv: video 'vid_2': start/end values"):
        src.get("vid_2")


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("c.json", b'{"v": {"start": [1], "end": [2]', "invalid JSON at line 1"),
    ("c.json", b'{"v": {"start": [1, 2], "end": [2], "text": ["a", "b"]}}',
     "video 'v': start/end/text lengths differ"),
    ("c.json", b'{"v": {"start": [1], "end": [2]}}', "video 'v': missing text"),
    ("c.json", b"[1, 2]", "item 0: expected an object"),
    ("c.pickle", b"not a pickle", "not a readable pickle"),
    ("c.txt", b"x", "unknown subtitle source"),
])
def test_bad_sources_name_the_file(tmp_path: Path, name: str, content: bytes,
                                   problem: str) -> None:
    path = _write(tmp_path, name, content)
    with pytest.raises(InputError, match=problem) as info:
        SubtitleSource.open(path).get("v")
    assert str(info.value).startswith(str(path))


def test_empty_folder_source(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no <video_id>.csv"):
        SubtitleSource.open(tmp_path).video_ids()


def test_subtitles_for_video_precedence(tmp_path: Path) -> None:
    video = tmp_path / "v1.mp4"
    video.write_bytes(b"not decoded here")
    (tmp_path / "v1.en.vtt").write_text("WEBVTT\n\n00:01.000 --> 00:02.000\nsidecar line\n")
    explicit = _write(tmp_path, "other.srt", "1\n00:00:03,000 --> 00:00:04,000\nexplicit\n")
    src_file = tmp_path / "caption.json"
    src_file.write_text(json.dumps({"v1": {"start": [5], "end": [6], "text": ["from htm"]}}))
    source = SubtitleSource.open(src_file)

    df = subtitles_for_video(VideoItem("v1", video, explicit), source=source)
    assert df.values.tolist() == [["v1", 3.0, 4.0, "explicit", "srt", ""]]
    df = subtitles_for_video(VideoItem("v1", video), source=source)
    assert df.values.tolist() == [["v1", 1.0, 2.0, "sidecar line", "vtt", ""]]
    # the subtitles table itself (config_id is set when the stage's batch is committed)
    assert list(df.columns) == list(SCHEMAS["subtitles"])
    assert df.dtypes.astype(str).tolist() == \
        ["object", "float64", "float64", "object", "object", "object"]
    (tmp_path / "v1.en.vtt").unlink()
    df = subtitles_for_video(VideoItem("v1", video), source=source)
    assert df.values.tolist() == [["v1", 5.0, 6.0, "from htm", "htm", ""]]
    with pytest.raises(InputError, match=r"v2\.mp4: no subtitles found .* ASR is off"):
        subtitles_for_video(VideoItem("v2", tmp_path / "v2.mp4"), source=source)


# -- big dumps: streamed, converted to Parquet, read by row groups (howtocap.io.subtitle_dump) --
def test_parquet_source_gathers_scattered_videos_from_row_groups(tmp_path: Path) -> None:
    """Anyone's Parquet: rows need not be grouped by video, are cleaned per video when read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [("a", 5.0, 6.0, "later <i>line</i>"), ("b", 0.0, 1.0, "bee one"),
            ("a", 0.0, 9.0, "first [Music] line"), ("c", 1.0, 2.0, "sea"),
            ("b", 1.0, 2.0, "bee two"), ("a", 7.0, 8.0, "last")]
    table = pa.table({k: [r[i] for r in rows]
                      for i, k in enumerate(("video_id", "start", "end", "text"))})
    path = tmp_path / "subs.parquet"
    pq.write_table(table, path, row_group_size=2)
    src = SubtitleSource.open(path)
    assert src.video_ids() == ["a", "b", "c"]
    a = src.get("a")
    assert a is not None
    assert a.values.tolist() == [[0.0, 5.0, "first line"], [5.0, 6.0, "later line"],
                                 [7.0, 8.0, "last"]]  # sorted, cleaned, overlap clipped
    assert SubtitleSource.open(path, limit=2).video_ids() == ["a", "b"]
    only_c = SubtitleSource.open(path, select={"c"})
    assert only_c.video_ids() == ["c"] and only_c.get("a") is None
    pq.write_table(table.drop(["video_id"]), tmp_path / "noid.parquet")
    with pytest.raises(InputError, match="needs a video_id column"):
        SubtitleSource.open(tmp_path / "noid.parquet").get("a")


def test_records_csv_and_duplicate_keys(tmp_path: Path) -> None:
    recs = [{"video_id": "a", "start": 3, "end": 4, "text": "two"},
            {"video_id": "b", "start": 0, "end": 1, "text": "bee"},
            {"video_id": "a", "start": 1, "end": 2, "text": "one"}]  # a's records are split
    (tmp_path / "r.json").write_text(json.dumps(recs))
    a = SubtitleSource.open(tmp_path / "r.json").get("a")
    assert a is not None and a["text"].tolist() == ["one", "two"]
    pd.DataFrame(recs).to_csv(tmp_path / "t.csv", index=False)
    src = SubtitleSource.open(tmp_path / "t.csv")
    assert src.video_ids() == ["a", "b"]
    a = src.get("a")
    assert a is not None and a["text"].tolist() == ["one", "two"]
    # a key given twice: the last one counts, as with json.load
    (tmp_path / "d.json").write_text('{"v": {"start": [0], "end": [1], "text": ["old"]}, '
                                     '"v": {"start": [0], "end": [1], "text": ["new"]}}')
    v = SubtitleSource.open(tmp_path / "d.json").get("v")
    assert v is not None and v["text"].tolist() == ["new"]


def test_json_errors_name_line_and_column(tmp_path: Path) -> None:
    body = ",\n".join(f'"v{i}": {{"start": [1], "end": [2], "text": ["x"]}}' for i in range(3000))
    path = _write(tmp_path, "c.json", "{" + body + ',\n"bad": [1, }\n}')
    with pytest.raises(InputError, match=r"c\.json: invalid JSON at line 3001 column 12"):
        SubtitleSource.open(path).video_ids()
    bom = _write(tmp_path, "bom.json", b'\xef\xbb\xbf{"v": {"start": [1], "end": [2], '
                                       b'"text": ["hi"]}}')
    v = SubtitleSource.open(bom).get("v")
    assert v is not None and v["text"].tolist() == ["hi"]
    utf16 = _write(tmp_path, "u16.json", '{"v": 1}'.encode("utf-16"))
    with pytest.raises(InputError, match="not UTF-8 JSON"):
        SubtitleSource.open(utf16).video_ids()


def test_convert_keeps_bad_videos_as_per_video_errors(tmp_path: Path) -> None:
    """A malformed entry fails its own video (one line), not the whole collection."""
    from howtocap.io.subtitles import convert_subtitles

    data = {"good": {"start": [0], "end": [1], "text": ["fine"]},
            "bad": {"start": [0, 1], "end": [1], "text": ["a", "b"]},
            "music": {"start": [0], "end": [1], "text": ["[Music]"]}}
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert convert_subtitles(tmp_path / "c.json", tmp_path / "c.parquet") == (3, 1)
    src = SubtitleSource.open(tmp_path / "c.parquet")
    assert src.video_ids() == ["good", "bad", "music"]
    good = src.get("good")
    assert good is not None and good["text"].tolist() == ["fine"]
    with pytest.raises(InputError, match=r"c\.parquet: video 'bad': start/end/text lengths"):
        src.get("bad")
    music = src.get("music")
    assert music is not None and music.empty  # known, but nothing was said
    with pytest.raises(InputError, match="must end in .parquet"):
        convert_subtitles(tmp_path / "c.json", tmp_path / "c.out")


def test_read_id_list(tmp_path: Path) -> None:
    from howtocap.io.inputs import read_id_list

    ids = _write(tmp_path, "ids.txt", "# header\n\nabc  # note\n-x_Y9\nabc\n  q#1  \n")
    assert read_id_list(ids) == ["abc", "-x_Y9", "q#1"]
    with pytest.raises(InputError, match="no video ids"):
        read_id_list(_write(tmp_path, "empty.txt", "# nothing\n\n"))


def test_a_store_makes_a_repeated_id_one_video(tmp_path: Path) -> None:
    """A video given again is one video, numbered where it first comes: its last run of
    rows for a converted dump (the last key wins, as ``json.load``), all of them for anyone's
    rows; ``select`` and ``limit`` count videos, not runs; ``holds`` answers many at once."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from howtocap.io.subtitle_dump import DumpWriter, ParquetStore

    names = ["a", "b", "a", "c", "b", "d"]  # a run of 3 rows each, in row groups of 4
    out = tmp_path / "repeats.parquet"
    writer = DumpWriter(out, "videos", rows_per_group=4)
    for i, vid in enumerate(names):
        writer.add_rows(vid, [(float(i), i + 0.5, f"{vid} {i} {j}", None) for j in range(3)])
    writer.close()
    assert pq.ParquetFile(out).metadata.num_row_groups == 3  # a repeat in another group
    last = ParquetStore(out, out)
    assert last.id_array(0, 4).to_pylist() == ["a", "b", "c", "d"]
    assert [last.get(v)["text"].tolist()[0] for v in "abcd"] == \
        ["a 2 0", "b 4 0", "c 3 0", "d 5 0"]
    assert last.holds(pa.array(["d", "x", "a"])).tolist() == [True, False, True]
    rows = [(v, float(i), i + 0.5, f"{v} {i}") for i, v in enumerate(names)]
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({k: [r[i] for r in rows] for i, k in
                             enumerate(("video_id", "start", "end", "text"))}), foreign,
                   row_group_size=2)
    every = ParquetStore(foreign, foreign)
    assert every.id_array(0, len(every)).to_pylist() == ["a", "b", "c", "d"]  # with repeats too
    assert every.get("a")["text"].tolist() == ["a 0", "a 2"]
    assert every.get("b")["text"].tolist() == ["b 1", "b 4"]
    assert ParquetStore(foreign, foreign, limit=2).ids.to_pylist() == ["a", "b"]
    some = ParquetStore(foreign, foreign, select=frozenset({"b", "d"}))
    assert some.ids.to_pylist() == ["b", "d"] and some.get("a") is None
    assert some.get("b")["text"].tolist() == ["b 1", "b 4"]
    assert np.array_equal(some.holds(pa.array(["a", "b"])), [False, True])
    distinct = tmp_path / "distinct.parquet"  # no repeat: the sorted order is kept from opening
    pq.write_table(pa.table({"video_id": ["d", "b", "c", "a"], "start": [0.0] * 4,
                             "end": [1.0] * 4, "text": ["d", "b", "c", "a"]}), distinct)
    first = ParquetStore(distinct, distinct, limit=3)  # asked out of the file's order
    assert [first.get(v)["text"].tolist() if v in first else None for v in "acbd"] == \
        [None, ["c"], ["b"], ["d"]]


def test_a_stores_plain_columns_equal_its_frames_across_row_groups(tmp_path: Path) -> None:
    """``ParquetStore.get(frame=False)`` slices a row group's columns decoded once; every
    video (in order, out of order, one without lines, one whose numbers are bad) gets the
    rows its frame has, and a bad video still raises its one line."""
    import random

    import numpy as np

    from howtocap.io.dump_readers import convert_dump
    from howtocap.io.subtitle_dump import ParquetStore

    rng = random.Random(4)
    dump: dict[str, Any] = {}
    for i in range(60):
        n = rng.randint(0, 6)
        dump[f"v{i:02d}"] = {"start": [float(k) for k in range(n)],
                             "end": [k + 0.5 for k in range(n)],
                             "text": [f"line {i} {k}" for k in range(n)]}
    dump["v07"] = {"start": [1, "x"], "end": [2, 3], "text": ["a", "b"]}
    src = tmp_path / "c.json"
    src.write_text(json.dumps(dump))
    out = tmp_path / "c.parquet"
    convert_dump(src, "json", out, rows_per_group=16)
    store = ParquetStore(out, src, cached_groups=2)
    assert store.pf.metadata.num_row_groups > 5
    order = sorted(dump) + rng.sample(sorted(dump), len(dump))  # file order, then any
    for vid in order:
        if vid == "v07":
            with pytest.raises(InputError, match=r"c\.json: .*v07"):
                store.get(vid, frame=False)
            continue
        cols = store.get(vid, frame=False)
        df = store.get(vid)
        assert isinstance(cols, dict) and df is not None
        assert cols["text"] == df["text"].tolist() == dump[vid]["text"], vid
        assert np.array_equal(cols["start"], df["start"].to_numpy())
        assert np.array_equal(cols["end"], df["end"].to_numpy())
    assert store._decoded.cache_info().currsize <= 2  # no longer held than the groups


def test_a_store_finds_videos_by_window_and_by_id_in_any_order(tmp_path: Path) -> None:
    """Windows of ids in the file's order, and each video found by its id in any order (a
    run's shards, or ``--ids``), equal to the dump; an id not in it is None; a key given
    twice is one video, the last entry winning (as ``json.load``)."""
    from howtocap.io.dump_readers import convert_dump
    from howtocap.io.subtitle_dump import ParquetStore

    dump = {f"v{i:02d}": {"start": [float(i)], "end": [i + 1.0], "text": [f"line {i}"]}
            for i in range(40)}
    src = tmp_path / "c.json"
    src.write_text(json.dumps(dump))
    out = tmp_path / "c.parquet"
    convert_dump(src, "json", out, rows_per_group=8)
    store = ParquetStore(out, src)
    assert len(store) == 40
    seen = []
    for lo in range(0, 40, 7):
        seen += store.id_array(lo, lo + 7).to_pylist()
    assert seen == list(dump)
    for vid in ("v39", "v03", "v17", "v03", "v00"):
        got = store.get(vid)
        assert vid in store and got["text"].tolist() == dump[vid]["text"]
        assert got["start"].tolist() == dump[vid]["start"]
    assert store.get("nope") is None and "nope" not in store
    entry = json.dumps(dump["v01"])
    later = json.dumps(dump["v02"])
    keys = [f'"k{i:02d}": {entry}' for i in range(12)] + [f'"k03": {later}']
    (tmp_path / "d.json").write_text("{" + ", ".join(keys) + "}")
    twice = ParquetStore(*_converted(tmp_path / "d.json"))
    assert len(twice) == 12 and twice.get("k03")["text"].tolist() == ["line 2"]


def _converted(src: Path) -> tuple[Path, Path]:
    from howtocap.io.dump_readers import convert_dump

    out = src.with_suffix(".parquet")
    convert_dump(src, "json", out)
    return out, src
