"""Frame decoding on small videos generated with ffmpeg (real PyAV decoding, no mocks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from howtocap.errors import InputError
from howtocap.io.video import _to_rgb, iter_frames, probe, sample_frames


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


@pytest.fixture(scope="module")
def ramp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 s, 10 fps, 64x48: frame N has luma 16 + 3 N, so its brightness tells its index."""
    out = tmp_path_factory.mktemp("video") / "ramp.mp4"
    _ffmpeg("-f", "lavfi", "-i", "color=black:s=64x48:r=10:d=6,geq=lum='16+N*3':cb=128:cr=128",
            "-f", "lavfi", "-i", "sine=f=440:d=6", "-c:v", "libx264", "-preset", "ultrafast",
            "-qp", "0", "-pix_fmt", "yuv420p", "-g", "10", "-c:a", "aac", "-shortest",
            "-movflags", "+faststart", str(out))
    return out


def frame_index(img: np.ndarray) -> int:
    """Invert the ramp: limited-range luma 16 + 3 N -> full-range RGB grey 255 * 3 N / 219."""
    return round(float(img.mean()) * 219 / 255 / 3)


def test_probe(ramp: Path) -> None:
    info = probe(ramp)
    assert (info.width, info.height) == (64, 48)
    assert info.duration == pytest.approx(6.0, abs=0.05)
    assert info.fps == pytest.approx(10.0)
    assert info.has_video and info.has_audio
    assert info.path == ramp


def test_one_fps_picks_the_frame_nearest_each_second_centre(ramp: Path) -> None:
    stream = iter_frames(ramp, fps=1.0, size=None)
    frames = list(stream)
    assert [t for t, _ in frames] == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    # frame nearest to (i + 0.5) s at 10 fps is frame 10 i + 5
    assert [frame_index(f) for _, f in frames] == [5, 15, 25, 35, 45, 55]
    assert all(f.shape == (48, 64, 3) and f.dtype == np.uint8 for _, f in frames)
    assert stream.partial is False and stream.error is None


@pytest.mark.parametrize(("fps", "n"), [(2.0, 12), (0.5, 3), (10.0, 60)])
def test_other_rates(ramp: Path, fps: float, n: int) -> None:
    frames = list(iter_frames(ramp, fps=fps, size=None))
    assert len(frames) == n
    assert frames[1][0] == pytest.approx(1.5 / fps)
    want = [min(59, round((i + 0.5) / fps * 10)) for i in range(n)]
    got = [frame_index(f) for _, f in frames]
    assert all(abs(g - w) <= 1 for g, w in zip(got, want, strict=True)), (got, want)


def test_resize_shorter_side_and_centre_crop(ramp: Path) -> None:
    t, img = next(iter(iter_frames(ramp, size=32)))
    assert img.shape == (32, 32, 3) and t == 0.5
    wide = np.zeros((40, 100, 3), np.uint8)
    wide[:, 30:70] = 255  # a white centre band survives the centre crop
    out = _to_rgb(av.VideoFrame.from_ndarray(wide, format="rgb24"), 20)
    assert out.shape == (20, 20, 3)
    assert out[:, 5:15].mean() > 200


def test_sample_frames_seeks_to_the_nearest_frame(ramp: Path) -> None:
    times = [3.0, 0.2, 5.91, 1.04, 99.0]
    frames = sample_frames(ramp, times, size=None)
    assert frames.shape == (5, 48, 64, 3)
    assert [frame_index(f) for f in frames] == [30, 2, 59, 10, 59]
    assert sample_frames(ramp, [1.0], size=16).shape == (1, 16, 16, 3)


def test_truncated_file_keeps_good_frames_and_flags_partial(ramp: Path, tmp_path: Path) -> None:
    data = ramp.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    stream = iter_frames(cut, size=None)
    frames = list(stream)
    assert 1 <= len(frames) < 6
    assert stream.partial is True and stream.error
    # the frames that did decode are the right ones
    assert [frame_index(f) for _, f in frames] == [5, 15, 25, 35, 45][: len(frames)]


def test_non_video_and_missing_files_raise_input_error(tmp_path: Path) -> None:
    junk = tmp_path / "notes.mp4"
    junk.write_text("this is not a video\n")
    for call in (lambda: probe(junk), lambda: list(iter_frames(junk)),
                 lambda: sample_frames(junk, [0.0])):
        with pytest.raises(InputError, match="notes.mp4: not a readable video"):
            call()
    with pytest.raises(InputError, match="missing.mp4: file does not exist"):
        probe(tmp_path / "missing.mp4")
    wav = tmp_path / "speech.wav"
    _ffmpeg("-f", "lavfi", "-i", "sine=f=300:d=1", str(wav))
    with pytest.raises(InputError, match="speech.wav: has no video stream"):
        probe(wav)
    with pytest.raises(InputError, match="has no video stream"):
        list(iter_frames(wav))
