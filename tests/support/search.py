"""Shared by the search / serve / web tests: a small run directory with known ground truth."""

from __future__ import annotations

import functools
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd

from howtocap.encoders.base import Encoder
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.samples import DEFAULT_STEPS, SampleVideo, make_narrated_video
from tests.support.stages import write_rows

# Two videos with disjoint steps, so every caption has exactly one right clip.
STEPS = {"kitchen": DEFAULT_STEPS[0:3], "garage": DEFAULT_STEPS[5:8]}
LLM_SHIFT = 1.0  # the "LLM" times are this much later than the aligned (true) times


@functools.cache
def encoder() -> Encoder:
    """The project's embedded default encoder, loaded once per test session."""
    from howtocap.encoders import create

    return create("default", device="cpu")


class Renamed(Encoder):
    """The same weights under another name: stands for "a different encoder" in tests."""

    def __init__(self, inner: Encoder, name: str) -> None:
        super().__init__()
        self.inner, self.name, self.dim = inner, name, inner.dim
        self.image_size = inner.image_size

    def preprocess_images(self, frames):  # type: ignore[no-untyped-def]
        return self.inner.preprocess_images(frames)

    def tokenize(self, texts):  # type: ignore[no-untyped-def]
        return self.inner.tokenize(texts)

    def image_features(self, pixels):  # type: ignore[no-untyped-def]
        return self.inner.image_features(pixels)

    def text_features(self, tokens):  # type: ignore[no-untyped-def]
        return self.inner.text_features(tokens)


_SHARED: dict[str, Any] = {}


def shared_run(tmp_root: Path) -> Path:
    """One indexed run with both videos, built once per session and shared by the test files.

    Tests that use it must not modify it.
    """
    if "run" not in _SHARED:
        from howtocap.search.index import build_index

        run = tmp_root / "run"
        samples = {vid: make_video(tmp_root / "media", vid) for vid in STEPS}
        for sample in samples.values():
            add_video(run, sample)
        build_index(run, encoder=encoder(), progress=False)
        _SHARED["run"], _SHARED["samples"] = run, samples
    return _SHARED["run"]


def fresh_run(tmp_root: Path, run_dir: Path, video_ids: list[str]) -> Path:
    """A new run over the shared run's video files, with its frame cache copied in (as if
    ``align`` had run), so the test pays for index logic, not for decoding and CNN passes."""
    shared = shared_run(tmp_root)
    frames = shared / "cache" / "frames"
    if frames.exists():
        shutil.copytree(frames, run_dir / "cache" / "frames")
    for vid in video_ids:
        add_video(run_dir, _SHARED["samples"][vid])
    return run_dir


def make_video(media: Path, video_id: str) -> SampleVideo:
    return make_narrated_video(media, video_id, STEPS[video_id], seconds_per_step=3.0, fps=5,
                               size=96, audio=False, subtitles="vtt")


def add_video(run: Path, sample: SampleVideo) -> None:
    """Write the video's subtitles, captions and aligned rows as the pipeline would."""
    rd = RunDir(run)
    vid = sample.video_id
    rd.record_videos([VideoItem(vid, sample.video_path, sample.subtitle_path)])
    subs = pd.DataFrame({"video_id": vid,
                         "start": [s.narration_start for s in sample.steps],
                         "end": [s.narration_end for s in sample.steps],
                         "text": [s.narration for s in sample.steps], "source": "vtt"})
    caps = pd.DataFrame({"video_id": vid,
                         "start": [s.start + LLM_SHIFT for s in sample.steps],
                         "end": [s.end + LLM_SHIFT for s in sample.steps],
                         "text": [s.caption for s in sample.steps], "source": "llm",
                         "block": 0, "model": "test"})
    aligned = caps.assign(orig_start=caps["start"], orig_end=caps["end"],
                          start=[s.start for s in sample.steps],
                          end=[s.end for s in sample.steps],
                          offset=-LLM_SHIFT, score=0.5, kept=True, encoders="default")
    # one caption the aligner dropped: it must never be indexed
    dropped = aligned.iloc[:1].assign(text="a dropped caption about nothing", kept=False)
    write_rows(rd, "subtitles", subs)
    write_rows(rd, "captions", caps)
    write_rows(rd, "aligned", pd.concat([aligned, dropped], ignore_index=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a background thread."""

    def __init__(self, app: object) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def shared_sample(video_id: str) -> SampleVideo:
    return _SHARED["samples"][video_id]
