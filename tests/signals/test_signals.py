"""The signals step end to end: planted videos (``tests/support/signal_videos.py``: slides, a
portrait, moving footage, a black screen, a photograph held still; real photographs, H.264 through
PyAV), the real embedded detectors (PP-OCR's text detector, BlazeFace), a real run directory.
Each signal must single out its planted case."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.engine.core import SettingsChanged
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.signals.config import SignalsConfig
from howtocap.signals.measure import fixed_windows
from howtocap.signals.run import signals_run
from tests.support.signal_videos import make
from tests.support.stages import write_rows

KINDS = ("slides", "talking_head", "moving", "black", "still")
CFG = SignalsConfig(fps=4, detect_fps=1, window_seconds=2)


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("signal_videos")
    out = {k: make(d, k, seconds=4, w=384, h=216, fps=12) for k in KINDS}
    bad = d / "bad.mp4"
    bad.write_bytes(b"this is not a video file\n" * 100)
    return {**out, "bad": bad}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, videos: dict[str, Path]) -> dict[str, Any]:
    rundir = RunDir(tmp_path_factory.mktemp("signals_run"))
    rundir.record_videos([VideoItem(k, p) for k, p in videos.items()])
    summary = signals_run(rundir, CFG, progress=False)
    table = rundir.table("signals")
    return {"rundir": rundir, "summary": summary, "table": table,
            "by": table.groupby("video_id")[["motion", "text_area", "face_area", "brightness",
                                             "sharpness"]].mean()}


def _singles_out(by: pd.DataFrame, column: str, kind: str) -> None:
    """``kind``'s mean of ``column`` is above every other kind's (with a margin)."""
    others = by.drop(index=kind)[column]
    assert by.loc[kind, column] > 2 * others.max() + 1e-3, by[column].to_dict()


def test_one_row_per_fixed_window_covering_each_video(run: dict[str, Any]) -> None:
    t = run["table"]
    assert set(t["video_id"]) == set(KINDS)
    for _, g in t.groupby("video_id"):
        g = g.sort_values("start")
        assert g["start"].iloc[0] == 0 and np.allclose(g["start"].iloc[1:], g["end"].iloc[:-1])
        assert len(g) == 2 and abs(g["end"].iloc[-1] - 4.0) < 0.2
    assert t["config_id"].nunique() == 1 and t["config_id"].iloc[0] != ""


def test_text_is_found_on_slides(run: dict[str, Any]) -> None:
    _singles_out(run["by"], "text_area", "slides")
    assert run["by"].loc["slides", "text_area"] > 0.05


def test_a_face_is_found_on_the_portrait(run: dict[str, Any]) -> None:
    _singles_out(run["by"], "face_area", "talking_head")
    assert run["by"].loc["talking_head", "face_area"] > 0.03


def test_moving_footage_has_the_most_motion_and_stills_are_static(run: dict[str, Any]) -> None:
    _singles_out(run["by"], "motion", "moving")
    static = run["table"].groupby("video_id")["static"].all()
    assert static[["slides", "black", "still"]].all(), static.to_dict()
    assert not static[["moving", "talking_head"]].any(), static.to_dict()


def test_the_black_video_is_dark_and_flat(run: dict[str, Any]) -> None:
    by = run["by"]
    assert by.loc["black", "brightness"] < 0.02 < by.drop(index="black")["brightness"].min() / 5
    assert by["sharpness"].idxmin() == "black"


def test_an_unreadable_video_is_one_skip_line(run: dict[str, Any]) -> None:
    summary = run["summary"]
    failed = dict(summary.failed)
    assert set(failed) == {"bad"} and summary.done == len(KINDS)
    assert "bad.mp4" in failed["bad"] and "not a readable video" in failed["bad"]
    assert "\n" not in failed["bad"]


def test_resume_after_a_finished_run_redoes_nothing(tmp_path: Path,
                                                    run: dict[str, Any]) -> None:
    rundir = RunDir(tmp_path / "copy")
    shutil.copytree(run["rundir"].root, rundir.root, dirs_exist_ok=True)
    before = rundir.table("signals")
    again = signals_run(rundir, CFG, progress=False)
    assert again.done == 0 and again.skipped == len(KINDS) and again.failed_before == 1
    pd.testing.assert_frame_equal(rundir.table("signals"), before)
    with pytest.raises(SettingsChanged, match="signals"):
        signals_run(rundir, CFG.model_copy(update={"static_motion": 0.01}), progress=False)


def test_shots_give_the_windows(tmp_path: Path, videos: dict[str, Path]) -> None:
    """With a shots table the rows are its shots; a cut inside a shot-free window is not
    motion (slides change at 2 s)."""
    rundir = RunDir(tmp_path / "run")
    rundir.record_videos([VideoItem("slides", videos["slides"])])
    write_rows(rundir, "shots", pd.DataFrame({"video_id": "slides", "start": [0.0, 2.0],
                                              "end": [2.0, 4.0]}), stage="shots")
    summary = signals_run(rundir, SignalsConfig(window_seconds=4), progress=False)
    assert summary.done == 1
    t = rundir.table("signals").sort_values("start")
    assert t[["start", "end"]].values.tolist() == [[0.0, 2.0], [2.0, 4.0]]
    assert t["static"].all() and (t["text_area"] > 0.05).all()
    rundir.configs.write("shots", {"detector": "adaptive"})  # shots made again, otherwise
    with pytest.raises(SettingsChanged, match="signals"):
        signals_run(rundir, SignalsConfig(window_seconds=4), progress=False)


def test_fixed_windows_cover_the_video() -> None:
    assert fixed_windows(12.0, 5.0) == [(0.0, 5.0), (5.0, 10.0), (10.0, 12.0)]
    assert fixed_windows(10.2, 5.0) == [(0.0, 5.0), (5.0, 10.2)]  # no 0.2-s tail window
    assert fixed_windows(0.0, 5.0) == []


def test_cli_signals_one_line_per_failure(tmp_path: Path, videos: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from howtocap.cli import app

    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(videos["black"], d / "black.mp4")
    shutil.copy(videos["bad"], d / "bad.mp4")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["signals", str(out), "--videos", str(d), "--quiet",
                                   "--window-seconds", "2"])
    assert res.exit_code == 1, res.output  # one video failed, the other is done
    assert "bad.mp4: not a readable video file" in res.output
    assert "Traceback" not in res.output
    assert set(RunDir(out).table("signals")["video_id"]) == {"black"}
    res = CliRunner().invoke(app, ["signals", str(out), "--detect-fps", "8"])
    assert res.exit_code == 2 and "--detect-fps" in res.output
    (tmp_path / "head.pth").write_bytes(b"not a state dict")
    res = CliRunner().invoke(app, ["signals", str(out), "--redo", "--aesthetic",
                                   str(tmp_path / "head.pth")])
    assert res.exit_code == 2 and "head.pth: not a torch state dict" in res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_signals_scores_the_shots_run_found(tmp_path: Path) -> None:
    """`run --within-shot --signals`: the signals stage runs after shots, one row per shot."""
    import sys

    from howtocap.align.config import AlignConfig
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.pipeline.run import run_pipeline
    from howtocap.samples import DEFAULT_STEPS, make_narrated_video

    bench = str(Path(__file__).resolve().parents[2] / "benchmarks" / "scale")
    sys.path.insert(0, bench)
    try:
        from bench_textonly import InstantLLM
    finally:
        sys.path.remove(bench)
    vids = tmp_path / "videos"
    make_narrated_video(vids, "steps", DEFAULT_STEPS[:3], seconds_per_step=3.0, fps=25,
                        size=96, audio=False, subtitles="vtt")
    out = tmp_path / "run"
    cap = CaptionRunConfig(caption=CaptionConfig(reject_fillers=False))
    summaries = run_pipeline([vids], out, caption=cap, llm=InstantLLM(), progress=False,
                             align=AlignConfig(within_shot=True, keep_all=True), signals=True)
    names = [s.stage for s in summaries]
    assert names.index("shots") < names.index("signals") < names.index("align")
    rundir = RunDir(out)
    shots = rundir.table("shots").sort_values("start")[["start", "end"]].values.tolist()
    got = rundir.table("signals").sort_values("start")[["start", "end"]].values.tolist()
    assert len(shots) > 1 and got == shots


def test_aesthetic_is_a_linear_head_over_the_frame_cache(tmp_path: Path,
                                                          videos: dict[str, Path]) -> None:
    """`--aesthetic HEAD`: tiny random weights (a seeded encoder, a random nn.Linear head)
    give each window the head's mean over its 1-fps cached embeddings; without it the column
    is NaN; another head is another fingerprint."""
    import torch

    from howtocap.encoders.cache import frame_embeddings
    from howtocap.signals.stage import SignalsStage
    from tests.support.tiny_models import TinyEncoder

    enc = TinyEncoder(dim=16, seed=3)
    torch.manual_seed(0)
    head = tmp_path / "head.pth"
    torch.save(torch.nn.Linear(16, 1).state_dict(), head)
    rundir = RunDir(tmp_path / "run")
    rundir.record_videos([VideoItem(k, videos[k]) for k in ("moving", "black")])
    cfg = SignalsConfig(window_seconds=2, aesthetic=str(head), aesthetic_encoder="tiny")
    stage = SignalsStage(cfg, encoder=enc)
    assert signals_run(rundir, cfg, stage=stage, progress=False).done == 2
    t = rundir.table("signals")
    assert t["aesthetic"].notna().all()
    state = torch.load(head)
    w, b = state["weight"].numpy().ravel(), float(state["bias"])
    for vid in ("moving", "black"):
        fe = frame_embeddings(videos[vid], enc, fps=1.0, cache_dir=rundir.cache_dir)
        e = fe.emb.astype(np.float32)
        s = (e / np.linalg.norm(e, axis=1, keepdims=True)) @ w + b
        rows = t[t["video_id"] == vid].sort_values("start")
        want = [s[(fe.times >= a) & (fe.times < z)].mean()
                for a, z in zip(rows["start"], rows["end"], strict=True)]
        np.testing.assert_allclose(rows["aesthetic"], want, rtol=1e-4)
    assert t.groupby("video_id")["aesthetic"].mean().nunique() == 2  # it sees the frames
    torch.save(torch.nn.Linear(16, 1).state_dict(), tmp_path / "other.pth")
    other = SignalsStage(cfg.model_copy(update={"aesthetic": str(tmp_path / "other.pth")}))
    assert other.fingerprint() != stage.fingerprint()
    assert SignalsStage(SignalsConfig()).fingerprint() != stage.fingerprint()


def test_without_aesthetic_the_column_is_empty(run: dict[str, Any]) -> None:
    assert run["table"]["aesthetic"].isna().all()
