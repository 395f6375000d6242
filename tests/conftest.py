"""Shared fixtures: small narrated videos with known ground truth, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from howtocap.samples import DEFAULT_STEPS, SampleVideo, make_narrated_video


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide folder for generated media (read-only for tests: copy before mutating)."""
    return tmp_path_factory.mktemp("samples")


@pytest.fixture(scope="session")
def narrated_video(sample_dir: Path) -> SampleVideo:
    """18 s, three 6-s steps (coffee, cat, rocket), espeak-ng narration, WebVTT sidecar."""
    return make_narrated_video(sample_dir, "narrated3", DEFAULT_STEPS[:3])


@pytest.fixture(scope="session")
def silent_video(sample_dir: Path) -> SampleVideo:
    """The same kind of video without any audio stream (and no subtitles)."""
    return make_narrated_video(sample_dir, "silent2", DEFAULT_STEPS[3:5], audio=False,
                               subtitles=None)


@pytest.fixture(scope="session")
def whisper_tiny():  # -> howtocap.asr.WhisperASR
    """The bundled Whisper tiny.en on CPU, loaded once for the whole session."""
    from howtocap import asr

    return asr.create("default", device="cpu")


@pytest.fixture(scope="module")
def base_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small silent video; tests copy it under many names (sidecar subtitles differ)."""
    d = tmp_path_factory.mktemp("base")
    return make_narrated_video(d, "base", DEFAULT_STEPS[:2], seconds_per_step=2.0, fps=5,
                               size=64, audio=False, subtitles=None).video_path
