"""The sample-video generator: real decoding with PyAV, real espeak-ng speech."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from howtocap.errors import HowtocapError
from howtocap.io.subtitles import read_srt, read_vtt
from howtocap.samples import DEFAULT_STEPS, SampleVideo, make_fixture_set, make_narrated_video


def _decode(path: Path) -> tuple[list[np.ndarray], np.ndarray, float, float]:
    """All video frames (as RGB arrays), the mono audio, and each stream's duration."""
    with av.open(str(path)) as c:
        vs, aus = c.streams.video[0], c.streams.audio[0]
        v_dur = float(vs.duration * vs.time_base)
        a_dur = float(aus.duration * aus.time_base)
        frames, audio = [], []
        for packet in c.demux(vs, aus):
            for frame in packet.decode():
                if isinstance(frame, av.VideoFrame):
                    frames.append(frame.to_ndarray(format="rgb24"))
                else:
                    audio.append(frame.to_ndarray().mean(axis=0))
    return frames, np.concatenate(audio), v_dur, a_dur


@pytest.mark.slow
def test_video_decodes_with_audio_and_expected_duration(narrated_video: SampleVideo) -> None:
    frames, audio, v_dur, a_dur = _decode(narrated_video.video_path)
    assert narrated_video.duration == pytest.approx(18.0)
    assert len(frames) == 180  # 18 s at 10 fps
    assert frames[0].shape == (224, 224, 3)
    assert v_dur == pytest.approx(18.0, abs=0.15)
    assert a_dur == pytest.approx(18.0, abs=0.15)
    # consecutive frames differ (zoom/pan) and steps show different photographs
    assert np.abs(frames[1].astype(int) - frames[0].astype(int)).mean() > 0.5
    assert np.abs(frames[70].astype(int) - frames[10].astype(int)).mean() > 20
    # speech is loud inside each narration and silent in the gaps between them
    sr = len(audio) / a_dur
    for step in narrated_video.steps:
        a, b = int(step.narration_start * sr), int(step.narration_end * sr)
        assert np.sqrt((audio[a:b] ** 2).mean()) > 0.01
        gap_a, gap_b = int((step.narration_end + 0.3) * sr), int((step.end - 0.1) * sr)
        assert gap_b > gap_a
        assert np.sqrt((audio[gap_a:gap_b] ** 2).mean()) < 0.005


@pytest.mark.slow
def test_steps_and_vtt_match_ground_truth(narrated_video: SampleVideo) -> None:
    steps = narrated_video.steps
    assert [s.image for s in steps] == [s[0] for s in DEFAULT_STEPS[:3]]
    assert [(s.start, s.end) for s in steps] == [(0.0, 6.0), (6.0, 12.0), (12.0, 18.0)]
    for s in steps:
        assert s.start <= s.narration_start < s.narration_end <= s.end
        assert s.narration_end - s.narration_start > 2.0  # a sentence takes seconds to say
    assert narrated_video.subtitle_path == narrated_video.video_path.with_suffix(".vtt")
    subs = read_vtt(narrated_video.subtitle_path)
    assert list(subs["text"]) == [s.narration for s in steps]
    assert np.allclose(subs["start"], [s.narration_start for s in steps], atol=0.001)
    assert np.allclose(subs["end"], [s.narration_end for s in steps], atol=0.001)


@pytest.mark.slow
def test_negative_lead_srt_and_fixture_set(tmp_path: Path) -> None:
    v = make_narrated_video(tmp_path, "lead", DEFAULT_STEPS[5:10], narration_lead=-1.5,
                            subtitles="srt", fps=5, size=96)
    assert v.duration == pytest.approx(30.0)
    # speech starts before its step (except the first, which cannot start before 0)
    assert v.steps[0].narration_start == 0.0
    for s in v.steps[1:]:
        assert s.narration_start == pytest.approx(s.start - 1.5, abs=0.01)
    subs = read_srt(v.subtitle_path)
    assert subs["start"].tolist() == pytest.approx([s.narration_start for s in v.steps], abs=1e-3)

    vids = make_fixture_set(tmp_path / "set", n_videos=3, seed=1, audio=False, subtitles=None,
                            fps=2, size=64, seconds_per_step=2.0)
    orders = [tuple(s.image for s in x.steps) for x in vids]
    assert len(set(orders)) == 3 and all(len(o) in (4, 5) for o in orders)
    assert [x.video_id for x in vids] == ["sample_000", "sample_001", "sample_002"]
    with av.open(str(vids[0].video_path)) as c:
        assert not c.streams.audio and c.streams.video[0].codec_context.name == "h264"


@pytest.mark.slow
def test_bad_requests_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(HowtocapError, match="no photograph named 'nope'"):
        make_narrated_video(tmp_path, "x", [("nope", "say", "cap")], audio=False)
    with pytest.raises(HowtocapError, match="subtitles must be"):
        make_narrated_video(tmp_path, "y", DEFAULT_STEPS[:1], audio=False, subtitles="ass")


def test_samples_command_writes_videos_and_ground_truth(tmp_path: Path) -> None:
    import pandas as pd
    import typer
    from typer.testing import CliRunner

    from howtocap.cli import add_commands

    app = typer.Typer()
    add_commands(app, "samples")
    app.command("noop")(lambda: None)  # a second command keeps typer in sub-command mode
    res = CliRunner().invoke(app, ["samples", str(tmp_path), "-n", "2", "--no-audio",
                                   "--seconds-per-step", "2", "--subtitles", "srt"])
    assert res.exit_code == 0, res.output
    gt = pd.read_csv(tmp_path / "ground_truth.csv")
    assert set(gt["video_id"]) == {"sample_000", "sample_001"}
    assert (gt["end"] - gt["start"]).round(3).eq(2.0).all()
    assert (tmp_path / "sample_001.srt").exists() and (tmp_path / "sample_001.mp4").exists()
