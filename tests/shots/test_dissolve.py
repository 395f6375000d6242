"""Cuts through dissolves: videos made by real ffmpeg from packaged photographs, each filmed as
a pan (a moving crop), joined by ffmpeg's own cross-fade (``xfade``) or by a hard cut; the
shots step's default detectors (``ShotsConfig()``: a frame-to-frame PySceneDetect detector
plus ``shots.gradual``) find both and do not cut a steady pan."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from howtocap.photos import packaged_photos
from howtocap.shots.config import ShotsConfig
from howtocap.shots.detect import combine_cuts, detect_shots

FPS, SIZE = 25, 128


def _panned(photo: str, seconds: float, label: str, speed: float = 12.0) -> str:
    """A filter graph of ``photo`` (input index in the command) panned right and down at
    ``speed`` px/s for ``seconds``, as stream ``[label]``."""
    return (f"[{photo}]scale={SIZE * 2}:{SIZE * 2}:force_original_aspect_ratio=increase,"
            f"crop={SIZE}:{SIZE}:'t*{speed}':'t*{speed / 2}',setsar=1,fps={FPS},"
            f"trim=duration={seconds},setpts=PTS-STARTPTS,format=yuv420p[{label}]")


def _render(out: Path, photos: list[str], graph: str) -> Path:
    cmd = ["ffmpeg", "-y", "-loglevel", "error"]
    for p in photos:
        cmd += ["-loop", "1", "-framerate", str(FPS), "-i", str(packaged_photos()[p])]
    cmd += ["-filter_complex", graph, "-map", "[out]", "-c:v", "libx264", "-preset",
            "veryfast", "-crf", "26", "-g", str(2 * FPS), "-pix_fmt", "yuv420p", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dissolve")


A, B = "skimage:coffee", "skimage:astronaut"


def _cuts(path: Path, cfg: ShotsConfig | None = None) -> list[float]:
    return [start for start, _ in detect_shots(path, cfg or ShotsConfig()).shots[1:]]


def test_a_one_second_dissolve_is_found_within_a_second(folder: Path) -> None:
    """A 1-s cross-fade from 3 s: its middle (3.5 s) is the cut, found within 1 s."""
    video = _render(folder / "dissolve.mp4", [A, B],
                    _panned("0", 4, "a") + ";" + _panned("1", 4, "b") +
                    ";[a][b]xfade=transition=fade:duration=1:offset=3[out]")
    cuts = _cuts(video)
    assert len(cuts) == 1, cuts
    assert abs(cuts[0] - 3.5) <= 1.0


def test_a_hard_cut_is_found_within_two_frames(folder: Path) -> None:
    """The default (the gradual detector) places it at its peak's middle; with PySceneDetect's
    content detector added, at the content detector's frame."""
    video = _render(folder / "hard.mp4", [A, B],
                    _panned("0", 3, "a") + ";" + _panned("1", 3, "b") +
                    ";[a][b]concat=n=2:v=1[out]")
    cuts = _cuts(video)
    assert len(cuts) == 1, cuts
    assert abs(cuts[0] - 3.0) <= 2 / FPS + 1e-9
    assert _cuts(video, ShotsConfig(detector="content")) == [3.0]


def test_a_steady_pan_is_one_shot(folder: Path) -> None:
    """8 s of a fast pan over one photograph: the frame changes all the time, the scene
    does not."""
    video = _render(folder / "pan.mp4", [B], _panned("0", 8, "out", speed=16.0))
    assert _cuts(video) == []


def test_combining_keeps_one_cut_per_transition() -> None:
    """A frame-to-frame cut next to a gradual one is the same transition: near (a hard cut)
    it gives its exact time, farther (a dissolve's first frames) it is dropped; alone it
    stays."""
    assert combine_cuts([1.0, 5.0, 9.3], [1.04, 5.5, 12.0], 0.2, 0.8) == [1.0, 5.5, 9.3, 12.0]
    assert combine_cuts([1.0, 1.1], [1.05], 0.2, 0.8) == [1.0]
    assert combine_cuts([], [2.0], 0.2, 0.8) == [2.0]
    assert combine_cuts([3.0], [], 0.2, 0.8) == [3.0]


def test_no_detector_at_all_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="--gradual"):
        ShotsConfig(detector="none", gradual=False)


def test_the_defaults_are_the_benchmarks_choice() -> None:
    """``ShotsConfig()`` is the setting benchmarks/quality/bench_shots.py's rule chose on its
    tuning set (benchmarks/results/shots.json), not one picked by hand."""
    import json

    root = next(p for p in Path(__file__).resolve().parents if (p / "benchmarks").is_dir())
    results = root / "benchmarks" / "results" / "shots.json"
    assert ShotsConfig().model_dump() == json.loads(results.read_text())["chosen_config"]
