"""Captioning from subtitles alone (no video files yet), streaming big dumps, and --asr modes."""

from __future__ import annotations

import json
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from howtocap.errors import InputError
from howtocap.io.inputs import VideoItem
from howtocap.io.subtitle_dump import ROWS_PER_GROUP
from howtocap.io.subtitles import SubtitleSource, read_vtt
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.subtitles.policy import choose_subtitles
from tests.support import cli
from tests.support.chat_server import chat_server
from tests.support.dumps import small_dump, write_caption_json, write_source


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return cli.run_cli(*args, timeout=timeout)


# -- text-only captioning through the CLI ----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["caption.json", "pickle", "records", "csv folder"])
def test_text_only_caption_from_each_source(tmp_path: Path, kind: str) -> None:
    data = small_dump()
    src = write_source(kind, tmp_path / "src", data)
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", "--subtitles", str(src), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0", "--quiet")
    assert res.returncode == 0, res.stderr
    assert "caption: 3 done" in res.stderr and "Traceback" not in res.stderr
    caps = pd.read_parquet(out / "captions")
    assert sorted(caps["video_id"].unique()) == sorted(data)
    subs = pd.read_parquet(out / "subtitles")
    assert set(subs["source"]) == {"htm"}
    assert len(subs) == sum(len(d["text"]) for d in data.values())
    videos = pd.read_parquet(out / "videos.parquet")
    assert sorted(videos["video_id"]) == sorted(data)
    assert (videos["video_path"] == "").all()  # no video file known yet


@pytest.mark.slow
def test_ids_and_limit_select_videos(tmp_path: Path) -> None:
    data = small_dump(5)
    src = write_source("caption.json", tmp_path, data)
    ids = tmp_path / "ids.txt"
    ids.write_text("# the ones we downloaded\nhtm3\n\n  htm1   # a comment\nnot_in_src\nhtm3\n")
    with chat_server() as srv:
        base = ["caption", "--subtitles", str(src), "--llm-url", srv.url, "--parse-workers", "0",
                "--quiet"]
        res = run_cli(*base, "--out", str(tmp_path / "ids"), "--ids", str(ids))
        assert res.returncode == 1, res.stderr  # one id is not in the source: it alone fails
        lines = [ln for ln in res.stderr.splitlines() if "not_in_src" in ln]
        assert len(lines) == 1 and "no subtitles for video 'not_in_src'" in lines[0]
        status = pd.read_parquet(tmp_path / "ids" / "status").set_index("video_id")
        assert status["status"].to_dict() == {"htm1": "ok", "htm3": "ok", "not_in_src": "error"}

        res = run_cli(*base, "--out", str(tmp_path / "lim"), "--limit", "2")
        assert res.returncode == 0, res.stderr
        caps = pd.read_parquet(tmp_path / "lim" / "captions")
        assert sorted(caps["video_id"].unique()) == ["htm0", "htm1"]  # the source's first two


@pytest.mark.slow
def test_text_only_user_mistakes_are_one_line(tmp_path: Path) -> None:
    src = write_source("caption.json", tmp_path, small_dump())
    for args, problem in [
        ((), "nothing to caption: give video files"),
        (("--subtitles", str(src), "--asr", "always"), "--asr always transcribes video files"),
        (("--subtitles", str(src), "--ids", str(tmp_path / "nope.txt")), "nope.txt: no such file"),
        (("--subtitles", str(tmp_path / "missing.json")), "missing.json: no such file"),
    ]:
        res = run_cli("caption", "--out", str(tmp_path / "r"), *args)
        assert res.returncode == 2, (args, res.stderr)
        assert problem in res.stderr and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # a mistake leaves no run directory behind
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": {"start": [1], "end": [2], "text": ["x"]}, "b": {"start": [1]')
    res = run_cli("caption", "--subtitles", str(bad), "--out", str(tmp_path / "r2"))
    assert res.returncode == 2 and "bad.json: invalid JSON at line 1 column" in res.stderr


@pytest.mark.slow
def test_convert_pickle_once_then_caption_from_parquet(tmp_path: Path) -> None:
    data = small_dump(4)
    pkl = write_source("pickle", tmp_path, data)
    out_pq = tmp_path / "caption.parquet"
    res = run_cli("subtitles", "convert", str(pkl), str(out_pq), "--quiet")
    assert res.returncode == 0, res.stderr
    assert "wrote 4 videos (24 subtitle lines)" in res.stderr
    src = SubtitleSource.open(out_pq)
    assert src.video_ids() == list(data)
    with chat_server() as srv:
        res = run_cli("caption", "--subtitles", str(out_pq), "--out", str(tmp_path / "run"),
                      "--llm-url", srv.url, "--parse-workers", "0", "--limit", "3", "--quiet")
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "run" / "cache" / "subtitles").exists()  # read in place, no copy
    caps = pd.read_parquet(tmp_path / "run" / "captions")
    assert sorted(caps["video_id"].unique()) == ["htm0", "htm1", "htm2"]


@pytest.fixture(scope="module")
def narrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-s silent video with a sidecar .vtt (the narration's true times)."""
    d = tmp_path_factory.mktemp("narrated")
    return make_narrated_video(d, "cook", DEFAULT_STEPS[:2], seconds_per_step=2.0, fps=5,
                               size=64, audio=False, subtitles="vtt").video_path


@pytest.mark.slow
def test_align_text_only_run_without_then_with_videos(tmp_path: Path, narrated: Path) -> None:
    cues = read_vtt(narrated.with_suffix(".vtt"))  # the true narration stands in for HowTo100M's
    entry = {"start": cues["start"].tolist(), "end": cues["end"].tolist(),
             "text": cues["text"].tolist()}
    src = tmp_path / "caption.json"
    src.write_text(json.dumps({"cook": entry, "other": entry}))
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", "--subtitles", str(src), "--out", str(out), "--llm-url",
                      srv.url, "--parse-workers", "0", "--quiet")
        assert res.returncode == 0, res.stderr
        # no video files yet: each video reports it in one line; the command does not crash
        res = run_cli("align", str(out), "--quiet")
        assert res.returncode == 1 and "Traceback" not in res.stderr
        for vid in ("cook", "other"):
            lines = [ln for ln in res.stderr.splitlines() if f"align {vid}:" in ln]
            assert len(lines) == 1 and "no video file known" in lines[0], res.stderr
        # given a folder of videos (file name = id), those align; the rest still say so
        videos = tmp_path / "downloaded"
        videos.mkdir()
        shutil.copy(narrated, videos / "cook.mp4")
        shutil.copy(narrated, videos / "unrelated.mp4")
        res = run_cli("align", str(out), "--videos", str(videos), "--quiet")
        assert res.returncode == 1, res.stderr
        assert "recorded 1 video file(s)" in res.stderr and "1 not in this run" in res.stderr
        assert "align: 1 done" in res.stderr
        status = pd.read_parquet(out / "status")
        align = status[status["stage"] == "align"].set_index("video_id")["status"].to_dict()
        assert align == {"cook": "ok", "other": "error"}
        aligned = pd.read_parquet(out / "aligned")
        assert set(aligned["video_id"]) == {"cook"} and len(aligned)
        # re-running the text-only caption keeps the attached file
        res = run_cli("caption", "--subtitles", str(src), "--out", str(out), "--llm-url",
                      srv.url, "--parse-workers", "0", "--quiet")
        assert res.returncode == 0 and "2 already done" in res.stderr
    vids = pd.read_parquet(out / "videos.parquet").set_index("video_id")["video_path"]
    assert vids["cook"] == str((videos / "cook.mp4").resolve()) and vids["other"] == ""
    assert "unrelated" not in vids.index


# -- streaming -------------------------------------------------------------------------------
@pytest.mark.slow
def test_big_caption_json_is_streamed_not_loaded(tmp_path: Path) -> None:
    """Fails if the reader goes back to json.load: that holds every video at once (several
    times the file's size as Python objects); streaming holds one row group."""
    path = tmp_path / "caption.json"
    ids = write_caption_json(path, 20_000, lines=20)
    size = path.stat().st_size
    assert size > 20e6
    tracemalloc.start()
    try:
        src = SubtitleSource.open(path, cache_dir=tmp_path / "cache")
        assert src.video_ids() == ids  # converted: one pass over the file
        # every 10th video, in order: each row group is visited (~800 videos in one)
        n_rows = sum(len(src.get(v)) for v in ids[::10])  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n_rows == 2_000 * 20
    assert peak < size / 2, f"peak {peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB file"
    stats = src.stats()
    assert stats["max_buffered_rows"] < ROWS_PER_GROUP + 100  # one row group being written
    assert stats["max_cached_groups"] <= 4  # a few being read
    assert stats["groups_read"] == src.store().pf.metadata.num_row_groups  # each decoded once
    # a second run over the same source and run directory does not stream again
    again = SubtitleSource.open(path, cache_dir=tmp_path / "cache")
    assert again.video_ids() == ids and again.stats()["max_buffered_rows"] == 0


# -- --asr always | auto | never --------------------------------------------------------------
class FakeASR:
    """``transcribe(path) -> start,end,text`` that records its calls (no Whisper in tests)."""

    def __init__(self, text: str = "words heard by the fake recognizer") -> None:
        self.calls: list[Path] = []
        self.text = text

    def transcribe(self, path: Path) -> pd.DataFrame:
        self.calls.append(Path(path))
        rows = [(0.0, 2.0, self.text)] if self.text else []
        return pd.DataFrame(rows, columns=["start", "end", "text"])


@pytest.mark.slow
@pytest.mark.parametrize("sidecar", [True, False], ids=["sidecar", "no-sidecar"])
@pytest.mark.parametrize("mode", ["always", "auto", "never"])
def test_asr_modes(tmp_path: Path, narrated: Path, mode: str, sidecar: bool) -> None:
    video = tmp_path / "cook.mp4"
    shutil.copy(narrated, video)
    if sidecar:
        shutil.copy(narrated.with_suffix(".vtt"), tmp_path / "cook.vtt")
    asr = FakeASR()
    item = VideoItem("cook", video)
    if mode == "never" and not sidecar:
        with pytest.raises(InputError, match=r"cook\.mp4: no subtitles found .* ASR is off"):
            choose_subtitles(item, mode, None, asr)
        return
    subs = choose_subtitles(item, mode, None, asr)
    expect = "asr" if mode == "always" or not sidecar else "vtt"
    assert set(subs["source"]) == {expect}
    assert asr.calls == ([video] if expect == "asr" else [])
    if expect == "asr":
        assert list(subs["text"]) == [asr.text]


@pytest.mark.slow
def test_asr_always_ignores_every_subtitle_source(tmp_path: Path, narrated: Path) -> None:
    """The bug of issue #9: a sidecar (or manifest subtitle, or --subtitles entry) won."""
    video = tmp_path / "cook.mp4"
    shutil.copy(narrated, video)
    shutil.copy(narrated.with_suffix(".vtt"), tmp_path / "cook.en.vtt")
    explicit = tmp_path / "explicit.srt"
    explicit.write_text("1\n00:00:00,000 --> 00:00:01,000\nexplicit line\n")
    dump = tmp_path / "caption.json"
    dump.write_text(json.dumps({"cook": {"start": [0], "end": [1], "text": ["from htm"]}}))
    source = SubtitleSource.open(dump)
    asr = FakeASR()
    subs = choose_subtitles(VideoItem("cook", video, explicit), "always", source, asr)
    assert list(subs["source"]) == ["asr"] and len(asr.calls) == 1
    # auto keeps the documented order: manifest file, sidecar, --subtitles, ASR
    assert list(choose_subtitles(VideoItem("cook", video, explicit), "auto", source, asr)[
        "source"]) == ["srt"]
    (tmp_path / "cook.en.vtt").unlink()
    assert list(choose_subtitles(VideoItem("cook", video), "never", source, asr)[
        "text"]) == ["from htm"]
    with pytest.raises(InputError, match="--asr always needs a video file"):
        choose_subtitles(VideoItem("cook", None), "always", source, asr)
    with pytest.raises(InputError, match=r"cook\.mp4: no speech found"):
        choose_subtitles(VideoItem("cook", video), "always", None, FakeASR(text=""))
    music = tmp_path / "music.vtt"
    music.write_text("WEBVTT\n\n00:01.000 --> 00:02.000\n[Music]\n")
    with pytest.raises(InputError, match=r"music\.vtt: subtitles have no text"):
        choose_subtitles(VideoItem("cook", video, music), "auto", None, asr)


@pytest.mark.slow
def test_subtitles_stage_uses_the_one_choice(tmp_path: Path, narrated: Path) -> None:
    """The subtitles stage asks choose_subtitles: with --asr always its subtitles come from ASR
    even though a sidecar sits next to the video (the stage alone, no runner)."""
    from howtocap.engine.stage import VideoInput
    from howtocap.subtitles.stage import SubtitlesStage

    video = tmp_path / "cook.mp4"
    shutil.copy(narrated, video)
    shutil.copy(narrated.with_suffix(".vtt"), tmp_path / "cook.vtt")
    asr = FakeASR()
    stage = SubtitlesStage("always")
    stage.setup()
    stage._asr = asr  # the recognizer setup loaded, replaced by a fake that counts calls
    tables = stage.process(VideoInput(VideoItem("cook", video))).tables
    assert list(tables["subtitles"]["source"]) == ["asr"] and len(asr.calls) == 1


@pytest.mark.parametrize("kind", ["caption.json", "records", "csv folder"])
def test_videos_recorded_from_the_sources_ids_equal_one_item_each(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A text-only run records ``videos.parquet`` from the source's Arrow id columns (no
    item a video): the same table as ``record_videos`` of one item each, ``--ids`` the
    source lacks included, paths recorded before kept, across chunks; the run's windows go
    through the videos in that order, whole shards at a time; which ids the source holds
    is answered for many at once."""
    import pyarrow as pa

    import howtocap.caption.run as run_mod
    import howtocap.engine.rundir as rundir_mod
    from howtocap.engine.rundir import RunDir

    monkeypatch.setattr(run_mod, "WINDOW", 4)
    monkeypatch.setattr(rundir_mod, "VIDEO_CHUNK", 3)
    src = SubtitleSource.open(write_source(kind, tmp_path / "src", small_dump(11)),
                              cache_dir=tmp_path / "cache")
    extra = ["zz_not_in_src", "htm3"]  # an --ids entry the source lacks, and a repeat
    tables = []
    for way in ("items", "ids"):
        rd = RunDir(tmp_path / way)
        rd.record_videos([VideoItem("htm4", tmp_path / "htm4.mp4")])  # attached before
        videos = run_mod._Videos(source=src, extra=extra)
        if way == "items":
            rd.record_videos(VideoItem(v, None) for v in videos.video_ids())
        else:
            videos.record(rd)
        tables.append(pd.read_parquet(rd.table_path("videos")))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    got = tables[1].set_index("video_id")["video_path"]
    assert len(got) == 12 and got["htm4"] == str(tmp_path / "htm4.mp4")
    assert got["zz_not_in_src"] == "" and got["htm0"] == ""
    many = [f"zz_{i}" for i in range(9)]  # --ids past the source's 11, across windows of 4
    videos = run_mod._Videos(source=src, extra=many)
    want = src.video_ids() + many
    assert list(videos.video_ids()) == want
    assert [v for a in videos.id_arrays(4) for v in a.to_pylist()] == want
    rd = RunDir(tmp_path / "many", shard_size=5)  # numbered in the order given: shards of it
    videos.record(rd)
    assert [it.video_id for items in videos.windows(rd, 10) for it in items] == want
    held = src.holds(pa.array(["zz_0", "htm3", "htm10", "nope"]))  # all at once
    assert held.tolist() == [False, True, True, False]
