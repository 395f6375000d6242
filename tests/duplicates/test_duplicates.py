"""The duplicates step on real generated videos: planted copies (re-encode, crop, resize,
trimmed copy, and a copy trimmed at both ends, halved and re-encoded at CRF 32) and a repeated
clip are found among distinct videos, each group keeps the id the rule says, distinct videos
that share an intro or a still photograph are not copies, and ``--drop-duplicates`` leaves
their rows out of export and of train's data."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.duplicates.config import DuplicatesConfig
from howtocap.duplicates.match import match_segments
from howtocap.duplicates.run import duplicates_run, find_duplicates
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.io.export import export_run
from howtocap.io.inputs import VideoItem
from howtocap.io.video import probe
from howtocap.samples import make_narrated_video
from howtocap.schemas import conform
from tests.support.stages import write_rows

# Distinct real photographs (with the samples' pan and zoom) per video: distinct footage.
PHOTOS = {"a": ["astronaut", "coffee", "rocket", "horse"],
          "b": ["camera", "chelsea", "coins", "moon"],
          "c": ["motorcycle_left", "page", "retina", "brick"],
          "e": ["ihc", "gravel"]}
# Copies of "a", named so that each kept-id rule decides once: a smaller id that is shorter
# (trim) or smaller (resize, crop) must lose to "a"; the re-encode ties on length and size and
# loses on the id.
COPIES = {"a1_trim": ["-ss", "1.5", "-t", "5"],
          "a0_small": ["-vf", "scale=96:96"],
          "a2_crop": ["-vf", "crop=128:128:8:8"],
          "a_reenc": ["-b:v", "150k"],
          # the case of issue #41: 0.6 s (of 8) cut at each end, half size, CRF 32
          "a3_trim_half": ["-ss", "0.6", "-t", "6.8", "-vf", "scale=72:72", "-crf", "32"]}
# Distinct videos that share footage but are not copies: p and q open with the same 4-s intro
# (half of each), r and s show the same photograph as a 3-s still (first in r, last in s);
# each is 8 s.
NEGATIVE_BODIES = {"p": ["cell", "grass", "text"], "q": ["chessboard_RGB", "coins", "horse"],
                   "r": ["clock_motion", "color", "rocket"], "s": ["camera", "retina", "page"]}
INTRO, STILL = ["hubble_deep_field", "logo"], "phantom"


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", *args], check=True)


def _concat(parts: list[list[str]], out: Path) -> None:
    """``parts`` (each one ffmpeg input's options) one after the other, 144 px at 5 fps."""
    fit = "scale=144:144:force_original_aspect_ratio=increase,crop=144:144,setsar=1,fps=5"
    graph = "".join(f"[{i}:v]{fit}[p{i}];" for i in range(len(parts))) + \
        "".join(f"[p{i}]" for i in range(len(parts))) + f"concat=n={len(parts)}:v=1[v]"
    _ffmpeg(*[a for p in parts for a in p], "-filter_complex", graph, "-map", "[v]",
            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(out))


def _caption_rows(vid: str, duration: float) -> list[dict[str, Any]]:
    """One kept aligned caption per 2 s of a video."""
    return [{"video_id": vid, "start": float(t), "end": float(t + 2), "text": f"{vid} at {t}",
             "orig_start": float(t), "orig_end": float(t + 2), "offset": 0.0, "score": 0.5,
             "kept": True, "encoders": "default", "source": "llm", "block": 0, "model": "m"}
            for t in range(0, int(duration) - 1, 2)]


def _make_run(root: Path, videos: dict[str, Path], cache: Path) -> RunDir:
    rd = RunDir(root)
    rd.record_videos([VideoItem(v, p) for v, p in videos.items()])
    if not rd.cache_dir.exists():
        os.symlink(cache, rd.cache_dir)  # one frame cache: each video is embedded once
    rows = [r for vid, path in videos.items()
            for r in _caption_rows(vid, probe(path).duration if path.exists() else 4.0)]
    write_rows(rd, "aligned", conform(pd.DataFrame(rows), "aligned"))
    return rd


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("dups")
    media = root / "media"
    made = {v: make_narrated_video(media, v, [(p, p, p) for p in photos], seconds_per_step=2.0,
                                   fps=5, size=144, audio=False, subtitles=None).video_path
            for v, photos in PHOTOS.items()}
    for name, args in COPIES.items():
        _ffmpeg("-i", str(made["a"]), *args, "-c:v", "libx264", "-preset", "ultrafast",
                str(media / f"{name}.mp4"))
    # "d": 4 s of b (its seconds 2-6) then 4 s of e: a repeated clip, not a copy of b
    _ffmpeg("-ss", "2", "-t", "4", "-i", str(made["b"]), "-t", "4", "-i", str(made["e"]),
            "-filter_complex", "[0:v][1:v]concat=n=2:v=1[v]", "-map", "[v]", "-c:v", "libx264",
            "-preset", "ultrafast", str(media / "d.mp4"))
    cache = root / "cache"
    cache.mkdir()
    everything = {v: made[v] for v in ("a", "b", "c")}
    everything |= {v: media / f"{v}.mp4" for v in (*COPIES, "d")}
    dup_run = _make_run(root / "run", everything, cache)
    result = duplicates_run(dup_run.root, progress=False)
    clean_run = _make_run(root / "clean", {v: made[v] for v in ("a", "b", "c")}, cache)
    clean = duplicates_run(clean_run.root, progress=False)
    return {"root": root, "run": dup_run, "result": result, "clean_run": clean_run,
            "clean": clean, "table": pd.read_parquet(dup_run.table_path("duplicates")),
            "cache": cache, "made": made}


@pytest.fixture(scope="module")
def shared(runs: dict[str, Any]) -> pd.DataFrame:
    """The duplicates table of a run of four distinct videos that share an intro (p, q) or a
    still photograph (r, s)."""
    from howtocap.photos import packaged_photos

    media = runs["root"] / "shared"
    parts = {v: make_narrated_video(media, v, [(p, p, p) for p in photos],
                                    seconds_per_step=2.0, fps=5, size=144, audio=False,
                                    subtitles=None).video_path
             for v, photos in {**NEGATIVE_BODIES, "intro": INTRO}.items()}
    still = ["-loop", "1", "-framerate", "5", "-t", "3",
             "-i", str(packaged_photos()[f"skimage:{STILL}"])]
    body = {v: ["-t", "4" if v in "pq" else "5", "-i", str(parts[v])] for v in NEGATIVE_BODIES}
    intro = ["-t", "4", "-i", str(parts["intro"])]
    plan = {"p": [intro, body["p"]], "q": [intro, body["q"]], "r": [still, body["r"]],
            "s": [body["s"], still]}
    for v, inputs in plan.items():
        _concat(inputs, media / f"{v}_shared.mp4")
    rd = _make_run(runs["root"] / "shared_run",
                   {f"{v}_shared": media / f"{v}_shared.mp4" for v in plan}, runs["cache"])
    duplicates_run(rd.root, progress=False)
    return pd.read_parquet(rd.table_path("duplicates"))


@pytest.mark.slow
def test_planted_copies_are_found_and_distinct_videos_are_not(runs: dict[str, Any]) -> None:
    t = runs["table"]
    videos = t[t["kind"] == "video"]
    assert dict(zip(videos["video_id"], videos["duplicate_of"], strict=True)) == \
        {name: "a" for name in COPIES}  # every kind of copy, and nothing else
    assert (videos["similarity"] >= DuplicatesConfig().threshold).all()
    involved = set(t["video_id"]) | set(t["duplicate_of"])
    assert "c" not in involved  # a distinct video is in no pair
    assert runs["result"].duplicate_videos == len(COPIES) and runs["result"].groups == 1
    trim = videos.set_index("video_id").loc["a1_trim"]  # its 5 s sit 1.5 s into "a"
    assert trim["seconds"] >= 4 and abs(trim["dup_start"] - 1.5) <= 1.0
    assert abs(trim["end"] - trim["start"] - 5) <= 1


@pytest.mark.slow
def test_a_trimmed_halved_reencoded_copy_is_a_duplicate_video(runs: dict[str, Any]) -> None:
    """Issue #41: cut at both ends, half size, CRF 32: its seconds dip below the threshold here
    and there, but they still line up with its source's, so it is the same video."""
    t = runs["table"]
    row = t[t["video_id"] == "a3_trim_half"]
    assert list(row["kind"]) == ["video"] and list(row["duplicate_of"]) == ["a"]
    # alone with its source (not joined to it through the other copies): matched directly
    made = runs["made"]
    rd = _make_run(runs["root"] / "trim_half", {"a": made["a"], "b": made["b"], "c": made["c"],
                                                "a3_trim_half": made["a"].parent /
                                                "a3_trim_half.mp4"}, runs["cache"])
    duplicates_run(rd.root, progress=False)
    alone = pd.read_parquet(rd.table_path("duplicates"))
    assert list(zip(alone["video_id"], alone["duplicate_of"], alone["kind"], strict=True)) == \
        [("a3_trim_half", "a", "video")]
    assert alone["seconds"].iloc[0] >= DuplicatesConfig().min_seconds


@pytest.mark.slow
def test_distinct_videos_sharing_an_intro_or_a_photo_are_not_one_video(
        shared: pd.DataFrame) -> None:
    """An intro or a still photograph two videos share is footage they share (a repeated clip
    at most), not a copy: neither is dropped as a duplicate video."""
    assert (shared["kind"] == "clip").all(), shared
    pairs = {frozenset((r.video_id, r.duplicate_of)) for r in shared.itertuples()}
    assert pairs <= {frozenset(("p_shared", "q_shared")), frozenset(("r_shared", "s_shared"))}
    for r in shared.itertuples():  # the shared footage: p's and q's first 4 s, r's first 3 s
        if r.video_id in ("p_shared", "q_shared", "r_shared"):
            assert r.start < 4


@pytest.mark.slow
def test_the_repeated_clip_is_found_with_its_windows(runs: dict[str, Any]) -> None:
    t = runs["table"]
    clips = t[t["kind"] == "clip"]
    assert list(zip(clips["video_id"], clips["duplicate_of"], strict=True)) == [("d", "b")]
    row = clips.iloc[0]
    assert abs(row["start"] - 0) <= 1 and abs(row["end"] - 4) <= 1  # d's first 4 s
    assert abs(row["dup_start"] - 2) <= 1 and abs(row["dup_end"] - 6) <= 1  # b's 2-6 s


@pytest.mark.slow
def test_a_run_without_duplicates_reports_none(runs: dict[str, Any]) -> None:
    assert runs["clean"].duplicate_videos == 0 and runs["clean"].clips == 0
    assert pd.read_parquet(runs["clean_run"].table_path("duplicates")).empty


def _rows(df: pd.DataFrame) -> set[tuple[str, float]]:
    return set(zip(df["video_id"], df["start"], strict=True))


@pytest.mark.slow
def test_drop_duplicates_in_every_export_format(runs: dict[str, Any]) -> None:
    rd, out = runs["run"], runs["root"] / "export"
    path, n_all = export_run(rd.root, fmt="csv", out=out / "all.csv")
    path, n_kept = export_run(rd.root, fmt="csv", out=out / "kept.csv", drop_duplicates=True)
    every, kept = pd.read_csv(out / "all.csv"), pd.read_csv(path)
    assert n_kept == len(kept) < n_all == len(every)
    clip = runs["table"].query("kind == 'clip'").iloc[0]
    mid = (every["start"] + every["end"]) / 2
    in_clip = (every["video_id"] == "d") & (mid >= clip["start"]) & (mid < clip["end"])
    expected = every[~every["video_id"].isin(list(COPIES)) & ~in_clip]
    assert _rows(kept) == _rows(expected)
    assert in_clip.any() and (kept["video_id"] == "d").any()  # d keeps its other footage
    js, n_js = export_run(rd.root, fmt="howtocaption", out=out / "kept.json",
                          drop_duplicates=True)
    data = json.loads(js.read_text())
    assert n_js == n_kept and set(data) == set(kept["video_id"])
    from howtocap.io.webdataset import export_webdataset

    wds = export_webdataset(rd.root, out / "wds", frames_per_clip=1, image_size=32,
                            progress=False, drop_duplicates=True)
    index = pd.read_parquet(wds.out / "index.parquet")
    assert _rows(index) == _rows(expected)


@pytest.mark.slow
def test_drop_duplicates_in_train_data(runs: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    """What train hands its loop: the run's clips less the duplicates'."""
    import howtocap.train.api as api

    seen: dict[str, list[Any]] = {}

    class Stop(Exception):
        pass

    def loop(cfg: Any, enc: Any, train_clips: list[Any], eval_clips: list[Any],
             **_: Any) -> Any:
        seen["clips"] = train_clips + eval_clips
        raise Stop

    monkeypatch.setattr(api, "run", loop)
    got = {}
    for drop in (False, True):
        with pytest.raises(Stop):
            api.train(runs["run"].root, out_dir=tmp_path / str(drop), drop_duplicates=drop,
                      progress=False)
        got[drop] = {(c.video_id, c.start) for c in seen["clips"]}
    clip = runs["table"].query("kind == 'clip'").iloc[0]
    expected = {r for r in got[False] if r[0] not in COPIES
                and not (r[0] == "d" and clip["start"] <= r[1] + 1 < clip["end"])}
    assert got[True] == expected and len(got[True]) < len(got[False])


@pytest.mark.slow
def test_no_duplicates_drops_nothing(runs: dict[str, Any]) -> None:
    root, out = runs["clean_run"].root, runs["root"] / "clean_export"
    export_run(root, fmt="csv", out=out / "all.csv")
    export_run(root, fmt="csv", out=out / "kept.csv", drop_duplicates=True)
    assert pd.read_csv(out / "all.csv").equals(pd.read_csv(out / "kept.csv"))


def test_kept_id_rule_longest_then_pixels_then_id() -> None:
    """Synthetic rows: four copies of one footage; each rule level decides one comparison."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    rows = {"z_long": base, "b_short": base[2:18], "c_lowres": base, "y_same": base}
    dur = {"z_long": 20.0, "b_short": 16.0, "c_lowres": 20.2, "y_same": 19.9}
    px = {"z_long": 640 * 360, "b_short": 640 * 360, "c_lowres": 320 * 180, "y_same": 640 * 360}
    ids = list(rows)
    df, _ = find_duplicates(ids, [rows[v] for v in ids], lambda i: rows[ids[i]],
                            [dur[v] for v in ids], lambda i: px[ids[i]], DuplicatesConfig())
    assert set(df["duplicate_of"]) == {"y_same"}  # ties z_long on length and size, smaller id
    assert set(df["video_id"]) == {"z_long", "b_short", "c_lowres"}


def test_match_segments_follows_one_offset() -> None:
    """A 6-row piece of A appears 10 rows into B: one segment, at that offset."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(12, 32)).astype(np.float32)
    b = rng.normal(size=(20, 32)).astype(np.float32)
    b[10:16] = a[3:9]
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    segs = match_segments(a, b, threshold=0.9, min_seconds=3)
    assert [(s.a0, s.a1, s.b0, s.b1, s.seconds) for s in segs] == [(3, 8, 10, 15, 6)]


class _Result:
    def __init__(self, code: int, output: str) -> None:
        self.returncode, self.stderr = code, output


def _cli(*args: str) -> _Result:
    """The ``howtocap`` app in this process (its console writes to the captured stderr)."""
    from typer.testing import CliRunner

    from howtocap.cli import app

    res = CliRunner().invoke(app, list(args))
    return _Result(res.exit_code, res.output)


@pytest.mark.slow
def test_bad_input_is_one_line(runs: dict[str, Any], tmp_path: Path) -> None:
    missing = _cli("duplicates", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "not a run directory" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    empty = _cli("duplicates", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no videos" in empty.stderr
    assert len(empty.stderr.strip().splitlines()) == 1
    bad = _cli("duplicates", str(runs["run"].root), "--threshold", "1.5")
    assert bad.returncode == 2 and "--threshold" in bad.stderr
    # export --drop-duplicates before `howtocap duplicates` ran
    fresh = _make_run(tmp_path / "fresh", {"c": runs["run"].root.parent / "media" / "c.mp4"},
                      runs["root"] / "cache")
    with pytest.raises(HowtocapError, match="no duplicates table"):
        export_run(fresh.root, fmt="csv", drop_duplicates=True)
    gone = _make_run(tmp_path / "gone", {"x": tmp_path / "x.mp4"}, runs["root"] / "cache")
    with pytest.raises(InputError, match="nothing to compare"):
        duplicates_run(gone.root, progress=False)


@pytest.mark.slow
def test_cli_finds_and_export_drops(runs: dict[str, Any], tmp_path: Path) -> None:
    """The commands a user types: ``duplicates`` prints one summary line, ``export
    --drop-duplicates`` writes the filtered rows."""
    done = _cli("duplicates", str(runs["clean_run"].root), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "3 videos: 0 near-duplicate video(s)" in done.stderr
    out = tmp_path / "pairs.csv"
    exp = _cli("export", str(runs["run"].root), "--format", "csv", "--out", str(out),
               "--drop-duplicates")
    assert exp.returncode == 0, exp.stderr
    assert not set(pd.read_csv(out)["video_id"]) & set(COPIES)
