"""Benchmark readers on tiny fixtures written in each benchmark's published file format."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from howtocap.errors import HowtocapError, InputError
from howtocap.evaluate.benchmarks import read_benchmark


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0")
    return path


# --- MSR-VTT 1k-A (MSRVTT_JSFUSION_test.csv) ------------------------------------------------
MSRVTT_CSV = """key,vid_key,video_id,sentence
ret0,msr7579,video7579,a girl wearing red top and black trouser is putting a sweater on a dog
ret1,msr7725,video7725,young people sit around the edges of a room clapping and raising their arms
ret2,msr9258,video9258,a person is using a phone
"""


def test_msrvtt(tmp_path: Path) -> None:
    ann = tmp_path / "MSRVTT_JSFUSION_test.csv"
    ann.write_text(MSRVTT_CSV)
    v1 = _touch(tmp_path / "videos" / "all" / "video7579.mp4")
    v2 = _touch(tmp_path / "videos" / "all" / "video7725.webm")
    samples = read_benchmark("msrvtt", ann, tmp_path / "videos")
    assert [s.video_id for s in samples] == ["video7579", "video7725", "video9258"]
    assert samples[0].caption.startswith("a girl wearing red top")
    assert [s.video_path for s in samples] == [v1, v2, None]  # missing file -> skipped later
    assert all(s.start is None and s.end is None for s in samples)


def test_msrvtt_missing_column(tmp_path: Path) -> None:
    ann = tmp_path / "MSRVTT_JSFUSION_test.csv"
    ann.write_text("key,vid_key,video_id\nret0,msr7579,video7579\n")
    with pytest.raises(InputError) as exc:
        read_benchmark("msrvtt", ann, tmp_path)
    assert str(ann) in str(exc.value) and "missing column sentence" in str(exc.value)
    assert "\n" not in str(exc.value)


# --- YouCook2 (youcookii_annotations_trainval.json) ----------------------------------------
def _youcook(tmp_path: Path, drop: str | None = None) -> Path:
    val_ann = [{"segment": [41, 54], "id": 0, "sentence": "spread margarine on two slices of "
                                                          "white bread"},
               {"segment": [84, 96], "id": 1, "sentence": "place a slice of cheese on the "
                                                          "bread"}]
    if drop:
        del val_ann[1][drop]
    db = {"database": {
        "GLd3aX16zBg": {"duration": 241.62, "subset": "training", "recipe_type": "113",
                        "annotations": [{"segment": [90, 102], "id": 0,
                                         "sentence": "spread margarine on bread"}],
                        "video_url": "https://www.youtube.com/watch?v=GLd3aX16zBg"},
        "xHr8X2Wpmno": {"duration": 210.0, "subset": "validation", "recipe_type": "101",
                        "annotations": val_ann,
                        "video_url": "https://www.youtube.com/watch?v=xHr8X2Wpmno"},
    }}
    path = tmp_path / "youcookii_annotations_trainval.json"
    path.write_text(json.dumps(db))
    return path


def test_youcook2_validation_clips(tmp_path: Path) -> None:
    ann = _youcook(tmp_path)
    v = _touch(tmp_path / "raw_videos" / "validation" / "101" / "xHr8X2Wpmno.mkv")
    samples = read_benchmark("youcook2", ann, tmp_path / "raw_videos")
    assert [(s.video_id, s.start, s.end) for s in samples] == [
        ("xHr8X2Wpmno", 41.0, 54.0), ("xHr8X2Wpmno", 84.0, 96.0)]
    assert samples[1].caption == "place a slice of cheese on the bread"
    assert all(s.video_path == v for s in samples)
    assert samples[0].clip_key != samples[1].clip_key  # two clips of one video
    train = read_benchmark("youcook2", ann, tmp_path / "raw_videos", subset="training")
    assert [(s.start, s.end) for s in train] == [(90.0, 102.0)] and train[0].video_path is None


def test_youcook2_missing_key(tmp_path: Path) -> None:
    ann = _youcook(tmp_path, drop="segment")
    with pytest.raises(InputError, match=r"\['annotations'\]\[1\]\['segment'\]: Field required"):
        read_benchmark("youcook2", ann, None)
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"results": {}}))
    with pytest.raises(InputError, match="missing key 'database'"):
        read_benchmark("youcook2", bad, None)


# --- MSVD (test_list.txt + raw-captions.pkl) -----------------------------------------------
def _msvd(tmp_path: Path, ids: list[str]) -> Path:
    d = tmp_path / "msvd_data"
    d.mkdir()
    (d / "test_list.txt").write_text("\n".join(ids) + "\n")
    caps = {"-4wsuPCjDBc_5_15": [["a", "squirrel", "is", "eating", "a", "peanut"],
                                 ["a", "chipmunk", "eats"], ["a", "squirrel", "eats", "food"]],
            "-7KMZQEsJW4_205_208": [["a", "woman", "is", "slicing", "an", "onion"],
                                    ["someone", "is", "cutting", "onions"]],
            "-8y1Q0rA3n8_108_115": [["a", "man", "plays", "a", "guitar"]]}
    with (d / "raw-captions.pkl").open("wb") as fh:
        pickle.dump(caps, fh)
    return d


def test_msvd_every_caption_is_a_query(tmp_path: Path) -> None:
    d = _msvd(tmp_path, ["-4wsuPCjDBc_5_15", "-7KMZQEsJW4_205_208"])
    v = _touch(tmp_path / "YouTubeClips" / "-4wsuPCjDBc_5_15.avi")
    for ann in (d, d / "test_list.txt"):
        samples = read_benchmark("msvd", ann, tmp_path / "YouTubeClips")
        assert len(samples) == 5
        assert samples[0].caption == "a squirrel is eating a peanut"
        assert {s.clip_key for s in samples} == {("-4wsuPCjDBc_5_15", None, None),
                                                 ("-7KMZQEsJW4_205_208", None, None)}
        assert samples[0].video_path == v and samples[4].video_path is None


def test_msvd_missing_video_in_captions(tmp_path: Path) -> None:
    d = _msvd(tmp_path, ["-4wsuPCjDBc_5_15", "not_a_video_1_2"])
    with pytest.raises(InputError, match="no captions for video 'not_a_video_1_2'"):
        read_benchmark("msvd", d, None)


def test_msvd_refuses_code_in_pickle(tmp_path: Path) -> None:
    d = _msvd(tmp_path, ["-4wsuPCjDBc_5_15"])
    with (d / "raw-captions.pkl").open("wb") as fh:
        pickle.dump({"-4wsuPCjDBc_5_15": [os.getcwd]}, fh)  # a callable, not a caption
    with pytest.raises(InputError, match="raw-captions.pkl: is not a caption pickle"):
        read_benchmark("msvd", d, None)


# --- LSMDC (LSMDC16_challenge_1000_publictect.csv, tab-separated, no header) ---------------
LSMDC_ROWS = [
    ["1004_Juno_00.00.32.849-00.00.40.464", "00.00.32.849", "00.00.40.464", "00.00.32.849",
     "00.00.40.464", "SOMEONE walks down a suburban street."],
    ["1004_Juno_00.00.41.257-00.00.43.135", "00.00.41.257", "00.00.43.135", "00.00.41.257",
     "00.00.43.135", "She drinks from a large bottle of juice."],
]


def test_lsmdc(tmp_path: Path) -> None:
    ann = tmp_path / "LSMDC16_challenge_1000_publictect.csv"
    ann.write_text("\n".join("\t".join(r) for r in LSMDC_ROWS) + "\n")
    v = _touch(tmp_path / "clips" / "1004_Juno" / f"{LSMDC_ROWS[0][0]}.avi")
    samples = read_benchmark("lsmdc", ann, tmp_path / "clips")
    assert [s.video_id for s in samples] == [LSMDC_ROWS[0][0], LSMDC_ROWS[1][0]]
    assert samples[1].caption == "She drinks from a large bottle of juice."
    assert samples[0].video_path == v and samples[1].video_path is None


def test_lsmdc_missing_column(tmp_path: Path) -> None:
    ann = tmp_path / "LSMDC16_challenge_1000_publictect.csv"
    rows = [LSMDC_ROWS[0], LSMDC_ROWS[1][:5]]  # second line lost its sentence
    ann.write_text("\n".join("\t".join(r) for r in rows) + "\n")
    with pytest.raises(InputError, match=r"line 2: expected 6 tab-separated columns .* found 5"):
        read_benchmark("lsmdc", ann, None)


# --- plain CSV ------------------------------------------------------------------------------
def test_csv_paths_and_clips(tmp_path: Path) -> None:
    a = _touch(tmp_path / "vids" / "a.mp4")
    b = _touch(tmp_path / "vids" / "sub" / "b.mp4")
    ann = tmp_path / "set.csv"
    ann.write_text("video_id,video_path,caption,start,end\n"
                   "a,a.mp4,pour the coffee,0,2.5\n"
                   "a,a.mp4,brush the cat,2.5,5\n"
                   "b,,launch the rocket,,\n"
                   "c,missing.mp4,read the page,,\n")
    samples = read_benchmark("csv", ann, tmp_path / "vids")
    assert [(s.video_id, s.video_path, s.start, s.end) for s in samples] == [
        ("a", a, 0.0, 2.5), ("a", a, 2.5, 5.0), ("b", b, None, None), ("c", None, None, None)]
    # without --videos, paths are relative to the CSV
    ann2 = tmp_path / "vids" / "own.csv"
    ann2.write_text("video_id,video_path,caption\na,a.mp4,pour the coffee\n")
    assert read_benchmark("csv", ann2, None)[0].video_path == a


def test_csv_missing_column_and_bad_times(tmp_path: Path) -> None:
    ann = tmp_path / "set.csv"
    ann.write_text("video_id,video_path,text\na,a.mp4,pour the coffee\n")
    with pytest.raises(InputError, match="missing column caption"):
        read_benchmark("csv", ann, tmp_path)
    ann.write_text("video_id,video_path,caption,start,end\na,a.mp4,pour,3,1\n")
    with pytest.raises(InputError, match="line 2: give both start and end"):
        read_benchmark("csv", ann, tmp_path)
    ann.write_text("video_id,video_path,caption,start,end\na,a.mp4,pour,zero,1\n")
    with pytest.raises(InputError, match="line 2: start must be seconds"):
        read_benchmark("csv", ann, tmp_path)


def test_unknown_kind_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HowtocapError, match="unknown benchmark 'didemo'"):
        read_benchmark("didemo", tmp_path / "x.json", None)
    with pytest.raises(InputError, match="annotation file does not exist"):
        read_benchmark("msrvtt", tmp_path / "nope.csv", None)
