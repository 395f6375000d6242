"""`howtocap eval` as a real process on every benchmark format it reads, each file written in
the field's real shape (header order, nesting, id styles), over generated videos whose content
we know: every format must let captions find their own clips far above chance."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from howtocap.errors import HowtocapError
from howtocap.evaluate.benchmarks import read_benchmark
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from tests.support.cli import run_cli

STEP = {s[0]: s for s in DEFAULT_STEPS}
PHOTOS = ["coffee", "chelsea", "rocket", "astronaut"]  # one clip each, distinct content


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``videos/<photo>.mp4`` (2 s each), ``videos/pair.mp4`` (coffee 0-2 s, then rocket
    2-4 s), and ``cache/`` for clip embeddings."""
    d = tmp_path_factory.mktemp("eval_media")
    for p in PHOTOS:
        make_narrated_video(d / "videos", p, [STEP[p]], seconds_per_step=2.0, fps=5, size=96,
                            audio=False, subtitles=None)
    make_narrated_video(d / "videos", "pair", [STEP["coffee"], STEP["rocket"]],
                        seconds_per_step=2.0, fps=5, size=96, audio=False, subtitles=None)
    return d


def place(media: Path, name: str, dest: Path) -> None:
    """A generated video under the benchmark's own file name: a symlink, so that every
    format's clip of it shares one entry of the clip-embedding cache (``--cache-dir`` keys
    by the resolved path): the tests pay for reading formats, not for the same CNN passes."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.symlink_to(media / "videos" / f"{name}.mp4")


def evaluate(tmp_path: Path, media: Path, benchmark: str, annotations: Path,
             videos: Path | None) -> dict:
    out = tmp_path / f"{benchmark}.json"
    args = ["eval", "-b", benchmark, "--annotations", str(annotations), "--frames", "2",
            "--cache-dir", str(media / "cache"), "--out", str(out)]
    res = run_cli(*args, *(["--videos", str(videos)] if videos else []), timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    return json.loads(out.read_text())


def assert_found_above_chance(r: dict, n_clips: int, n_captions: int) -> None:
    assert (r["n_clips"], r["n_captions"]) == (n_clips, n_captions)
    assert r["skipped"]["clips"] == 0
    t2v = r["t2v"]
    assert t2v["n"] == n_captions
    chance_r1, chance_mean = 100 / n_clips, (n_clips + 1) / 2
    # most captions rank their own clip first; a random ranking would not (R@1 = 1/n)
    assert t2v["R@1"] >= 2 * chance_r1 and t2v["MedR"] == 1, t2v
    assert t2v["MeanR"] < chance_mean - 0.5, t2v
    assert r["v2t"]["R@1"] >= 2 * chance_r1, r["v2t"]


@pytest.mark.slow
def test_msrvtt_jsfusion_csv(media: Path, tmp_path: Path) -> None:
    # MSRVTT_JSFUSION_test.csv: key,vid_key,video_id,sentence; videos all/video<N>.mp4
    lines = ["key,vid_key,video_id,sentence"]
    for i, p in enumerate(PHOTOS):
        n = 7000 + i
        lines.append(f"ret{i},msr{n},video{n},{STEP[p][2]}")
        place(media, p, tmp_path / "MSRVTT" / "videos" / "all" / f"video{n}.mp4")
    (tmp_path / "MSRVTT_JSFUSION_test.csv").write_text("\n".join(lines) + "\n")
    r = evaluate(tmp_path, media, "msrvtt", tmp_path / "MSRVTT_JSFUSION_test.csv",
                 tmp_path / "MSRVTT" / "videos")
    assert_found_above_chance(r, 4, 4)


@pytest.mark.slow
def test_youcook2_annotations_json_cuts_segments(media: Path, tmp_path: Path) -> None:
    # youcookii_annotations_trainval.json: one line, no trailing newline, recipe_type a
    # string, whole-second segments; only the validation subset is evaluated
    vids = tmp_path / "raw_videos" / "validation" / "113"
    vids.mkdir(parents=True)
    place(media, "pair", vids / "xHr8X2Wpmno.mp4")
    place(media, "chelsea", vids / "GLd3aX16zBg.mp4")
    place(media, "astronaut", vids / "-aqmc2pmt5M.mp4")
    place(media, "rocket", tmp_path / "raw_videos" / "training" / "113" / "trainvid001.mp4")

    def entry(subset: str, segments: list[tuple[list[int], str]]) -> dict:
        return {"duration": 4.0, "subset": subset, "recipe_type": "113",
                "annotations": [{"id": i, "segment": seg, "sentence": text}
                                for i, (seg, text) in enumerate(segments)],
                "video_url": "https://www.youtube.com/watch?v=xHr8X2Wpmno"}

    db = {"xHr8X2Wpmno": entry("validation", [([0, 2], STEP["coffee"][2]),
                                              ([2, 4], STEP["rocket"][2])]),
          "GLd3aX16zBg": entry("validation", [([0, 2], STEP["chelsea"][2])]),
          "-aqmc2pmt5M": entry("validation", [([0, 2], STEP["astronaut"][2])]),
          "trainvid001": entry("training", [([0, 2], "this clip is not in the test set")])}
    ann = tmp_path / "youcookii_annotations_trainval.json"
    ann.write_text(json.dumps({"database": db}, separators=(",", ":")))
    r = evaluate(tmp_path, media, "youcook2", ann, tmp_path / "raw_videos")
    # the two halves of one video are two clips: coffee and rocket must not be confused
    assert_found_above_chance(r, 4, 4)


@pytest.mark.slow
def test_youcook2_mil_nce_validation_csv(media: Path, tmp_path: Path) -> None:
    # MIL-NCE's validation_youcook.csv: header end,start,task,text,video_id (end BEFORE
    # start), whole seconds, task = the recipe type
    vids = tmp_path / "raw_videos" / "validation" / "113"
    vids.mkdir(parents=True)
    place(media, "pair", vids / "xHr8X2Wpmno.mp4")
    place(media, "chelsea", vids / "GLd3aX16zBg.mp4")
    place(media, "astronaut", vids / "-aqmc2pmt5M.mp4")
    ann = tmp_path / "validation_youcook.csv"
    ann.write_text("end,start,task,text,video_id\n"
                   f"2,0,113,{STEP['coffee'][2]},xHr8X2Wpmno\n"
                   f"4,2,113,{STEP['rocket'][2]},xHr8X2Wpmno\n"
                   f"2,0,113,{STEP['chelsea'][2]},GLd3aX16zBg\n"
                   f"2,0,113,{STEP['astronaut'][2]},-aqmc2pmt5M\n")
    samples = read_benchmark("youcook2", ann, tmp_path / "raw_videos")
    assert [(s.start, s.end) for s in samples] == [(0, 2), (2, 4), (0, 2), (0, 2)]
    with pytest.raises(HowtocapError, match="validation_youcook.csv: a YouCook2 CSV holds"):
        read_benchmark("youcook2", ann, None, subset="training")
    r = evaluate(tmp_path, media, "youcook2", ann, tmp_path / "raw_videos")
    assert_found_above_chance(r, 4, 4)


@pytest.mark.slow
def test_msvd_list_and_caption_pickle(media: Path, tmp_path: Path) -> None:
    # test_list.txt + raw-captions.pkl (id -> list of token lists, several per video)
    ids = {"coffee": "-4wsuPCjDBc_5_15", "chelsea": "0lh_UWF9ZP4_62_69",
           "rocket": "1dfR0A_BXjw_590_600", "astronaut": "5HAf_INrFy0_3_25"}
    caps = {}
    for p, vid in ids.items():
        place(media, p, tmp_path / "YouTubeClips" / f"{vid}.avi")
        caps[vid] = [STEP[p][2].split(), f"a video of the {p}".split()]
    folder = tmp_path / "msvd"
    folder.mkdir()
    (folder / "test_list.txt").write_text("\n".join(ids.values()) + "\n")
    with (folder / "raw-captions.pkl").open("wb") as fh:
        pickle.dump(caps, fh)
    r = evaluate(tmp_path, media, "msvd", folder, tmp_path / "YouTubeClips")
    assert_found_above_chance(r, 4, 8)


@pytest.mark.slow
def test_lsmdc_challenge_tsv(media: Path, tmp_path: Path) -> None:
    # LSMDC16_challenge_1000_publictect.csv: tab-separated, no header, 6 fields; clips are
    # already cut and live in per-movie folders
    lines = []
    for i, p in enumerate(PHOTOS):
        movie = f"00{i + 1}_Movie_Number_{i + 1}"
        clip = f"{movie}_00.0{i}.51.926-00.0{i}.54.129"
        place(media, p, tmp_path / "lsmdc" / movie / f"{clip}.avi")
        lines.append("\t".join([clip, "00.00.51.926", "00.00.54.129", "00.00.51.000",
                                "00.00.55.000", f"SOMEONE wants to {STEP[p][2]}."]))
    ann = tmp_path / "LSMDC16_challenge_1000_publictect.csv"
    ann.write_text("\n".join(lines) + "\n")
    r = evaluate(tmp_path, media, "lsmdc", ann, tmp_path / "lsmdc")
    assert_found_above_chance(r, 4, 4)


@pytest.mark.slow
def test_own_csv_with_clip_times_and_no_videos_flag(media: Path, tmp_path: Path) -> None:
    # video_path relative to the CSV's folder (no --videos); start/end cut one video in two
    place(media, "pair", tmp_path / "pair.mp4")
    for p in ("chelsea", "astronaut"):
        place(media, p, tmp_path / "clips" / f"{p}.mp4")
    ann = tmp_path / "own.csv"
    ann.write_text("video_id,video_path,caption,start,end\n"
                   f"pair,pair.mp4,{STEP['coffee'][2]},0,2\n"
                   f"pair,pair.mp4,{STEP['rocket'][2]},2,4\n"
                   f"chelsea,clips/chelsea.mp4,{STEP['chelsea'][2]},,\n"
                   f"astronaut,clips/astronaut.mp4,{STEP['astronaut'][2]},,\n")
    r = evaluate(tmp_path, media, "csv", ann, None)
    assert_found_above_chance(r, 4, 4)


@pytest.mark.slow
def test_crosstask_release_step_recall_above_chance(tmp_path: Path) -> None:
    from howtocap.evaluate.crosstask_samples import write_crosstask_release
    from howtocap.io.video import probe

    fx = write_crosstask_release(tmp_path, videos_per_task=1, n_tasks=2,
                                 seconds_per_segment=2.0, size=64, fps=2, p_swap=0.0,
                                 p_drop=0.0, seed=1)
    out = tmp_path / "ct.json"
    res = run_cli("eval", "-b", "crosstask", "--annotations", str(fx.release), "--videos",
                  str(fx.videos_dir), "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
                  timeout=300)
    assert res.returncode == 0, res.stderr
    r = json.loads(out.read_text())
    assert r["n_videos"] == 2 and r["skipped"]["videos"] == 0
    # chance: a step put at a random second lands in its segment with probability
    # (segment length) / (video length); the annotated steps must be found far more often
    segments = [(e - s) / probe(v.video_path).duration for v in fx.videos
                for _, s, e in v.segments]
    chance = 100 * sum(segments) / len(segments)
    assert r["n_steps"] == len(segments)
    assert r["recall"] >= 2 * chance, (r["recall"], chance)
    assert r["recall_by_inference"]["dp"] == r["recall"]
