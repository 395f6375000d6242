"""The shots step end to end: generated videos with planted hard cuts, real PySceneDetect (PyAV
decoding), a real run directory; ``align --within-shot`` keeps windows inside one shot."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run, align_stage, read_aligned
from howtocap.engine.core import SettingsChanged
from howtocap.engine.fingerprint import config_id
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.samples import DEFAULT_STEPS, SampleVideo, make_narrated_video
from howtocap.shots.bounds import shots_by_video
from howtocap.shots.config import ShotsConfig
from howtocap.shots.run import shots_run
from tests.support.cli import run_cli
from tests.support.stages import write_rows
from tests.support.tiny_models import TinyEncoder

STEP = 3.0  # seconds per planted shot: shorter than align's 8-s clip, as in real videos


def _video(d: Path, vid: str, steps: int) -> SampleVideo:
    return make_narrated_video(d, vid, DEFAULT_STEPS[:steps], seconds_per_step=STEP, fps=25,
                               size=96, audio=False, subtitles=None)


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("shots_videos")
    cuts = _video(d, "cuts", 4)  # 12 s, hard cuts at 3, 6, 9 s (a new photograph each)
    one = _video(d, "one", 1)  # 3 s, no cut (a slow zoom and pan of one photograph)
    bad = d / "bad.mp4"
    bad.write_bytes(b"this is not a video file\n" * 100)
    return {"dir": d, "cuts": cuts, "one": one, "bad": bad}


def _items(videos: dict[str, Any]) -> list[VideoItem]:
    return [VideoItem("cuts", videos["cuts"].video_path),
            VideoItem("one", videos["one"].video_path), VideoItem("bad", videos["bad"])]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, videos: dict[str, Any]) -> dict[str, Any]:
    rundir = RunDir(tmp_path_factory.mktemp("shots_run"))
    rundir.record_videos(_items(videos))
    summary = shots_run(rundir, ShotsConfig(), progress=False)
    return {"rundir": rundir, "summary": summary}


def _found_all(planted: list[float], found: list[float]) -> bool:
    """Every planted cut has its own detected cut within ±0.5 s."""
    left = list(found)
    for p in planted:
        near = [f for f in left if abs(f - p) <= 0.5]
        if not near:
            return False
        left.remove(min(near, key=lambda f: abs(f - p)))
    return True


def test_planted_hard_cuts_are_found_within_half_a_second(run: dict[str, Any],
                                                          videos: dict[str, Any]) -> None:
    shots = shots_by_video(run["rundir"].table("shots"))["cuts"]
    planted = [s.start for s in videos["cuts"].steps[1:]]
    assert _found_all(planted, [start for start, _ in shots[1:]])
    # consecutive shots covering the whole video
    assert shots[0][0] == 0.0
    assert shots[-1][1] == pytest.approx(videos["cuts"].duration, abs=0.15)
    assert all(a[1] == b[0] for a, b in zip(shots, shots[1:], strict=False))


def test_the_defaults_find_what_pyscenedetect_alone_finds(videos: dict[str, Any]) -> None:
    """PySceneDetect's content detector at its own threshold (27) finds exactly the planted
    hard cuts here; the defaults (the gradual detector, docs/shots.md) find the same cuts, no
    more, within two frames of its."""
    from howtocap.shots.detect import detect_shots

    planted = [s.start for s in videos["cuts"].steps[1:]]
    alone = [s for s, _ in detect_shots(videos["cuts"].video_path,
                                        ShotsConfig(detector="content", threshold=27.0,
                                                    gradual=False)).shots[1:]]
    assert len(alone) == len(planted) and _found_all(planted, alone)
    default = [s for s, _ in detect_shots(videos["cuts"].video_path, ShotsConfig()).shots[1:]]
    assert len(default) == len(alone)
    assert all(abs(a - b) <= 2 / 25 + 1e-9 for a, b in zip(default, alone, strict=True))


def test_a_video_without_a_cut_is_one_shot(run: dict[str, Any], videos: dict[str, Any]) -> None:
    shots = shots_by_video(run["rundir"].table("shots"))["one"]
    assert len(shots) == 1
    assert shots[0][0] == 0.0 and shots[0][1] == pytest.approx(videos["one"].duration, abs=0.15)


def test_a_non_video_file_fails_alone_with_its_cause(run: dict[str, Any]) -> None:
    summary, rundir = run["summary"], run["rundir"]
    failed = dict(summary.failed)
    assert set(failed) == {"bad"} and summary.done == 2
    assert "bad.mp4" in failed["bad"] and "not a readable video" in failed["bad"]
    assert "\n" not in failed["bad"]
    status = rundir.table("status")
    row = status[(status["stage"] == "shots") & (status["video_id"] == "bad")].iloc[0]
    assert row["status"] == "error" and row["cause"] == "bad input"
    table = pd.read_parquet(rundir.root / "shots")
    assert set(table["video_id"]) == {"cuts", "one"}
    assert table["config_id"].nunique() == 1 and table["config_id"].iloc[0] != ""


def test_resume_skips_done_videos_and_refuses_other_settings(
        tmp_path: Path, run: dict[str, Any]) -> None:
    src: RunDir = run["rundir"]
    rundir = RunDir(tmp_path / "copy")
    shutil.copytree(src.root, rundir.root, dirs_exist_ok=True)
    before = rundir.table("shots")
    again = shots_run(rundir, ShotsConfig(), progress=False)
    assert again.done == 0 and again.skipped == 2 and again.failed_before == 1
    pd.testing.assert_frame_equal(rundir.table("shots"), before)
    with pytest.raises(SettingsChanged, match="shots"):
        shots_run(rundir, ShotsConfig(threshold=50.0), progress=False)
    redone = shots_run(rundir, ShotsConfig(detector="adaptive"), progress=False, redo=True)
    assert redone.done == 2


def test_cli_shots_one_line_per_failure(tmp_path: Path, videos: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from howtocap.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["shots", str(out), "--videos", str(videos["dir"]), "--quiet"])
    assert res.exit_code == 1, res.output  # one video failed, the others are done
    assert "bad.mp4: not a readable video file" in res.output
    assert "Traceback" not in res.output
    assert set(shots_by_video(RunDir(out).table("shots"))) == {"cuts", "one"}
    res = CliRunner().invoke(app, ["shots", str(out), "--threshold", "-1"])
    assert res.exit_code == 2 and "--threshold" in res.output


def _caption_run(root: Path, video: SampleVideo) -> RunDir:
    """A run with one caption per second of the video: many windows, many near a cut."""
    rundir = RunDir(root)
    rundir.record_videos([VideoItem(video.video_id, video.video_path)])
    starts = [float(t) for t in range(int(video.duration))]
    step_of = [video.steps[min(int(t // STEP), len(video.steps) - 1)].caption for t in starts]
    write_rows(rundir, "captions", pd.DataFrame({
        "video_id": video.video_id, "start": starts, "end": [s + 8 for s in starts],
        "text": step_of, "source": "llm", "block": 0, "model": "test"}))
    return rundir


def _crosses(shots: list[tuple[float, float]], start: float, end: float) -> bool:
    mid = (start + end) / 2
    shot = next((s for s in shots if s[0] <= mid < s[1]), None)
    return shot is None or start < shot[0] - 1e-6 or end > shot[1] + 1e-6


ALIGN = {"keep_all": True, "reference_captions": 0, "reference_videos": 0}


@pytest.mark.slow
def test_within_shot_keeps_every_window_inside_one_shot(tmp_path: Path,
                                                        videos: dict[str, Any]) -> None:
    enc = TinyEncoder()
    inside = _caption_run(tmp_path / "inside", videos["cuts"])
    assert not inside.has_table("shots")  # align computes the shots it needs
    summary = align_run(inside, [], AlignConfig(within_shot=True, **ALIGN), encoders=[enc],
                        progress=False)
    assert summary.ok
    shots = shots_by_video(inside.table("shots"))["cuts"]
    assert _found_all([s.start for s in videos["cuts"].steps[1:]], [a for a, _ in shots[1:]])
    al = read_aligned(inside)
    assert len(al) == int(videos["cuts"].duration)
    assert not any(_crosses(shots, s, e) for s, e in zip(al["start"], al["end"], strict=True))
    assert (al["end"] - al["start"]).max() <= STEP + 1e-6
    # the baseline: the same captions without --within-shot cross cuts (8-s clips, 3-s shots)
    across = _caption_run(tmp_path / "across", videos["cuts"])
    align_run(across, [], AlignConfig(**ALIGN), encoders=[enc], progress=False)
    base = read_aligned(across)
    assert all(_crosses(shots, s, e) for s, e in zip(base["start"], base["end"], strict=True))


def test_within_shot_changes_the_align_config_id(tmp_path: Path) -> None:
    rundir = RunDir(tmp_path / "run")
    plain = align_stage(rundir, ["default"], AlignConfig())
    within = align_stage(rundir, ["default"], AlignConfig(within_shot=True))
    assert config_id(plain.fingerprint()) != config_id(within.fingerprint())
    assert AlignConfig().scoring_key(["e"]) != AlignConfig(within_shot=True).scoring_key(["e"])
    assert "shots" in within.reads and "shots" not in plain.reads
    # other shots settings recorded in the run: other align scores
    rundir.configs.write("shots", ShotsConfig(threshold=40.0).model_dump())
    other = align_stage(rundir, ["default"], AlignConfig(within_shot=True))
    assert config_id(other.fingerprint()) != config_id(within.fingerprint())
    assert config_id(align_stage(rundir, ["default"], AlignConfig()).fingerprint()) == \
        config_id(plain.fingerprint())


@pytest.mark.slow
def test_run_within_shot_runs_shots_before_align(tmp_path: Path) -> None:
    """`howtocap run --within-shot`: subtitles, caption (a real chat server on 127.0.0.1), the
    shots stage, then align, whose windows stay inside the shots it wrote."""

    from tests.support.chat_server import chat_server

    vids = tmp_path / "videos"
    make_narrated_video(vids, "steps", DEFAULT_STEPS[:4], seconds_per_step=STEP, fps=25,
                        size=96, audio=False, subtitles="vtt")
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("run", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0", "--within-shot", "--keep-all", "--quiet", timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stderr.index("shots: 1 done") < res.stderr.index("align: 1 done")
    shots = shots_by_video(RunDir(out).table("shots"))["steps"]
    al = pd.read_parquet(out / "aligned")
    assert len(al) > 0
    assert not any(_crosses(shots, s, e) for s, e in zip(al["start"], al["end"], strict=True))


@pytest.mark.slow
def test_run_within_shot_detects_shots_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --within-shot` runs the shots stage once, before
    align, and align does not run it again; `align --within-shot` alone still runs it."""
    from howtocap import shots
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.pipeline.run import run_pipeline

    bench = str(Path(__file__).resolve().parents[2] / "benchmarks" / "scale")
    sys.path.insert(0, bench)
    try:
        from bench_textonly import InstantLLM
    finally:
        sys.path.remove(bench)
    calls: list[str] = []
    real = shots.run.shots_run

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append("shots")
        return real(*args, **kw)

    monkeypatch.setattr(shots.run, "shots_run", counted)
    vids = tmp_path / "videos"
    make_narrated_video(vids, "steps", DEFAULT_STEPS[:3], seconds_per_step=STEP, fps=25,
                        size=96, audio=False, subtitles="vtt")
    out = tmp_path / "run"
    # the instant LLM's "Do step N of the recipe." names nothing: kept with --keep-fillers
    cap = CaptionRunConfig(caption=CaptionConfig(reject_fillers=False))
    run_pipeline([vids], out, caption=cap, llm=InstantLLM(), progress=False,
                 align=AlignConfig(within_shot=True, keep_all=True))
    assert calls == ["shots"]
    assert len(shots_by_video(RunDir(out).table("shots"))["steps"]) > 1
    assert len(pd.read_parquet(out / "aligned")) > 0
    calls.clear()
    RunDir(out).invalidate("shots", ["shots"])  # align alone, on a run without shots: it
    assert not (out / "shots").exists()  # makes them
    align_run(RunDir(out, create=False), [], AlignConfig(within_shot=True, keep_all=True),
              progress=False, redo=True)
    assert calls == ["shots"] and (out / "shots").exists()

