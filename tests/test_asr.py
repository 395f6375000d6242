"""ASR with the real bundled Whisper tiny.en on espeak-ng narrated videos."""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest

from howtocap import asr
from howtocap.errors import HowtocapError, InputError
from howtocap.samples import SampleVideo


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _found(word: str, heard: list[str]) -> bool:
    return bool(difflib.get_close_matches(word, heard, n=1, cutoff=0.75))


@pytest.mark.slow
def test_transcript_has_the_narration_at_the_step_times(whisper_tiny: asr.WhisperASR,
                                                        narrated_video: SampleVideo) -> None:
    df = whisper_tiny.transcribe(narrated_video.video_path)
    assert list(df.columns) == ["start", "end", "text"]
    assert len(df) >= 3
    assert (df["start"] >= 0).all() and (df["end"] <= narrated_video.duration + 1e-6).all()
    assert (df["end"] >= df["start"]).all() and df["start"].is_monotonic_increasing
    heard = _words(" ".join(df["text"]))
    total = found = 0
    for step in narrated_video.steps:
        keys = [w for w in _words(step.narration) if len(w) > 3]
        hits = sum(_found(w, heard) for w in keys)
        assert hits >= 0.6 * len(keys), (step.narration, heard)
        total, found = total + len(keys), found + hits
        # the segment that best matches this sentence starts near when it was spoken
        best = max(range(len(df)), key=lambda i: sum(
            _found(w, _words(df["text"][i])) for w in keys))
        assert abs(df["start"][best] - step.narration_start) <= 1.5
        assert df["end"][best] >= step.narration_end - 1.5
    assert found >= 0.8 * total


@pytest.mark.slow
def test_model_is_loaded_once_and_thread_safe(whisper_tiny: asr.WhisperASR,
                                              narrated_video: SampleVideo) -> None:
    again = asr.create("tiny.en", device="cpu")
    assert again._loaded is whisper_tiny._loaded
    results: list[pd.DataFrame] = []

    def run() -> None:
        results.append(again.transcribe(narrated_video.video_path))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2
    pd.testing.assert_frame_equal(results[0], results[1])


@pytest.mark.slow
def test_silence_gives_an_empty_frame(whisper_tiny: asr.WhisperASR, tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.m4a"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono",
                    "-t", "4", "-c:a", "aac", str(quiet)], check=True)
    model = asr.create("default", device="cpu", vad_filter=True)
    df = model.transcribe(quiet)
    assert df.empty and list(df.columns) == ["start", "end", "text"]
    assert df.attrs["audio_seconds"] == pytest.approx(4.0, abs=0.1)


@pytest.mark.slow
def test_unusable_media_raise_input_errors(whisper_tiny: asr.WhisperASR,
                                           silent_video: SampleVideo,
                                           narrated_video: SampleVideo, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no audio stream") as info:
        whisper_tiny.transcribe(silent_video.video_path)
    assert str(info.value).startswith(str(silent_video.video_path))

    cut = tmp_path / "cut.mp4"
    shutil.copyfile(narrated_video.video_path, cut)
    with cut.open("r+b") as fh:
        fh.truncate(cut.stat().st_size * 2 // 5)
    with pytest.raises(InputError, match="truncated") as info:
        whisper_tiny.transcribe(cut)
    assert str(info.value).startswith(str(cut))

    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"this is not a video at all\n" * 10)
    with pytest.raises(InputError, match=r"junk\.mp4: cannot read media file"):
        whisper_tiny.transcribe(junk)
    with pytest.raises(InputError, match="no such file"):
        whisper_tiny.transcribe(tmp_path / "missing.mp4")


def test_model_names(tmp_path: Path) -> None:
    assert Path(asr.resolve_model("default")[0], "model.bin").is_file()
    assert asr.resolve_model("large-v3") == ("large-v3", None)  # a hub name, used when online
    with pytest.raises(InputError, match="no model.bin"):
        asr.create(str(tmp_path))
    with pytest.raises(InputError, match="no such Whisper model folder"):
        asr.create(str(tmp_path / "nope"))


def test_assemble_model_from_parts(tmp_path: Path) -> None:
    import hashlib

    parts = []
    for i, data in enumerate([b"a" * 1000, b"b" * 500]):
        parts.append(tmp_path / f"model.bin.part{i + 1}")
        parts[-1].write_bytes(data)
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    sha = hashlib.sha256(b"a" * 1000 + b"b" * 500).hexdigest()
    dest = tmp_path / "cache" / "m"
    out = asr.assemble_model(parts, [cfg], dest, size=1500, sha256=sha)
    assert (out / "model.bin").read_bytes() == b"a" * 1000 + b"b" * 500
    assert (out / "config.json").read_text() == "{}"
    mtime = (out / "model.bin").stat().st_mtime_ns
    assert asr.assemble_model(parts, [cfg], dest, size=1500, sha256=sha) == dest  # reused
    assert (out / "model.bin").stat().st_mtime_ns == mtime
    with pytest.raises(HowtocapError, match="expected 1501"):
        asr.assemble_model(parts, [cfg], tmp_path / "cache" / "bad", size=1501, sha256=sha)
    with pytest.raises(HowtocapError, match="wrong SHA-256"):
        asr.assemble_model(parts, [cfg], tmp_path / "cache" / "bad", size=1500, sha256="0" * 64)
    assert not (tmp_path / "cache" / "bad").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["m"]  # no temp leftovers


@pytest.mark.slow
def test_subtitles_fall_back_to_asr(whisper_tiny: asr.WhisperASR, narrated_video: SampleVideo,
                                    tmp_path: Path) -> None:
    from howtocap.io.inputs import VideoItem
    from howtocap.io.subtitles import subtitles_for_video

    bare = tmp_path / "bare.mp4"  # the same video without its sidecar subtitles
    shutil.copyfile(narrated_video.video_path, bare)
    df = subtitles_for_video(VideoItem("bare", bare), asr=whisper_tiny)
    assert set(df["source"]) == {"asr"} and set(df["video_id"]) == {"bare"}
    assert "coffee" in " ".join(df["text"]).lower()
