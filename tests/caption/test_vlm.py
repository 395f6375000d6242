"""Visually grounded captions (``--vlm-url``): each block goes to a multimodal server with
frames of its time span.

The videos here encode their time in their brightness (``GREY_PER_SECOND``), so the real HTTP
server on 127.0.0.1 (``tests.support.chat_server.VisionServer``) can tell from the JPEGs alone which
moment each frame shows: it checks the frames are there, decodable and in time order, and
captions what it sees; the test checks those captions reach ``captions.parquet``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest

from howtocap.caption.blocks import make_blocks
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.caption.vlm import VLM_INSTRUCTION, VLMOptions
from howtocap.engine.core import SettingsChanged
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io.video import segment_times
from tests.support.chat_server import GREY_PER_SECOND, VisionServer, vision_server
from tests.support.cli import run_cli
from tests.support.fault_server import fault_server
from tests.support.llm import closed_port, statuses

SECONDS, FPS = 30, 2  # grey 0..232: one level per 1/8 s, frames 0.5 s apart
CUES = [(3.0 * i, 3.0 * i + 2.5, f"now step {i} of the recipe") for i in range(SECONDS // 3)]
BLOCK_WORDS = 10  # two cues a block: five blocks of 5.5 s
TOL = 0.3  # seconds: H.264 (full range) + JPEG move the grey level by ~1.3 (0.17 s)


def clock_video(path: Path, width: int = 640, height: int = 480) -> Path:
    """A video whose frame at ``t`` is uniform grey ``GREY_PER_SECOND * t``, with a WebVTT
    sidecar of ``CUES`` (so no ASR runs)."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=FPS)
        s.width, s.height, s.pix_fmt = width, height, "yuvj420p"
        s.options = {"preset": "ultrafast", "qp": "0"}
        for k in range(SECONDS * FPS):
            grey = round(GREY_PER_SECOND * k / FPS)
            img = np.full((height, width, 3), grey, np.uint8)
            for packet in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)

    def ts(t: float) -> str:
        return f"00:00:{int(t):02d}.{round(t % 1 * 1000):03d}"

    cues = "".join(f"{ts(a)} --> {ts(b)}\n{text}\n\n" for a, b, text in CUES)
    path.with_suffix(".vtt").write_text("WEBVTT\n\n" + cues)
    return path


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clock_video(tmp_path_factory.mktemp("vlm") / "clock.mp4")


def blocks() -> list:
    subs = pd.DataFrame(CUES, columns=["start", "end", "text"])
    return make_blocks(subs, BLOCK_WORDS)


def nearest_frame(t: float) -> float:
    """The time of the frame ``sample_frames`` returns for ``t`` (frames at k / FPS)."""
    return min(round(t * FPS), SECONDS * FPS - 1) / FPS


def config(url: str, frames: int = 4, **vlm: object) -> CaptionRunConfig:
    return CaptionRunConfig(caption=CaptionConfig(block_words=BLOCK_WORDS),
                            vlm=VLMOptions(url=url, frames=frames, **vlm))


def check_requests(srv: VisionServer, frames: int, size: tuple[int, int]) -> None:
    """One request per block, each with its block's text and ``frames`` frames of its span,
    in time order, decodable JPEGs of ``size`` (shorter side <= 336)."""
    assert srv.problems == []
    assert len(srv.seen) == len(blocks())
    by_text = {b.index: next(r for r in srv.seen if b.text in r["text"]) for b in blocks()}
    for b in blocks():
        req = by_text[b.index]
        assert VLM_INSTRUCTION.format(n=frames) in req["text"]
        want = [nearest_frame(t) for t in segment_times(b.start, b.end, frames)]
        assert len(req["times"]) == frames
        assert np.allclose(req["times"], want, atol=TOL), (req["times"], want)
        assert all(a < b_ for a, b_ in zip(req["times"], req["times"][1:], strict=False))
        assert np.allclose(req["labels"], segment_times(b.start, b.end, frames), atol=0.051)
        assert set(req["sizes"]) == {size}


@pytest.mark.slow
@pytest.mark.parametrize("frames", [1, 4])
def test_each_block_is_sent_with_its_frames_and_the_reply_is_parsed(
        video: Path, tmp_path: Path, frames: int) -> None:
    with vision_server() as srv:
        caps, _ = caption_run([video], tmp_path / "run", config(srv.url, frames),
                              progress=False)
    assert caps.done == 1 and not caps.failed
    check_requests(srv, frames, (448, 336))
    got = RunDir(tmp_path / "run").table("captions")
    # the server's captions name the second each frame showed: they are what the frames say
    shown = [float(m.group(1)) for m in
             (re.fullmatch(r"The frame shows second ([0-9.]+)\.", t) for t in got["text"])
             if m]
    assert len(shown) == len(got) == frames * len(blocks())
    want = sorted(nearest_frame(t) for b in blocks()
                  for t in segment_times(b.start, b.end, frames))
    assert np.allclose(sorted(shown), want, atol=TOL)
    assert (got["start"] == np.floor(got["start"])).all()


@pytest.mark.slow
def test_frames_are_never_upscaled_and_keep_the_whole_frame(tmp_path: Path) -> None:
    small = clock_video(tmp_path / "small.mp4", width=200, height=360)  # portrait, small
    with vision_server() as srv:
        caption_run([small], tmp_path / "run", config(srv.url, 2), progress=False)
    check_requests(srv, 2, (200, 360))


@pytest.mark.slow
def test_changing_the_frame_count_changes_the_fingerprint(video: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with vision_server() as srv:
        caption_run([video], out, config(srv.url, 4), progress=False)
        with pytest.raises(SettingsChanged, match=r"llm\.frames 4 -> 2"):
            caption_run([video], out, config(srv.url, 2), progress=False)
        with pytest.raises(SettingsChanged, match=r"llm\.frame_side 336 -> 224"):
            caption_run([video], out, config(srv.url, 4, frame_side=224), progress=False)
        n = len(srv.seen)
        caption_run([video], out, config(srv.url, 4), progress=False)  # same: nothing to do
        assert len(srv.seen) == n
        caption_run([video], out, config(srv.url, 2), progress=False, redo=True)
    assert [len(r["times"]) for r in srv.seen[n:]] == [2] * len(blocks())
    assert len(RunDir(out).table("captions")) == 2 * len(blocks())


@pytest.mark.slow
def test_a_text_only_collection_is_refused_up_front(tmp_path: Path) -> None:
    src = tmp_path / "caption.json"
    src.write_text('{"v1": {"start": [0.0], "end": [2.0], "text": ["crack the eggs"]}}')
    with pytest.raises(HowtocapError, match="--vlm-url sends video frames, and a --subtitles "
                                            "run without INPUTS has no video files"):
        caption_run(None, tmp_path / "run",
                    config("http://127.0.0.1:9").model_copy(update={"subtitles": str(src)}),
                    progress=False)
    assert not (tmp_path / "run").exists()


def test_yaml_config_keys(video: Path, tmp_path: Path) -> None:
    """``vlm-url``, ``vlm-model`` and ``vlm-frames`` in a YAML config, as the flags."""
    from typer.testing import CliRunner

    from howtocap.cli import app

    with vision_server() as srv:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(f"vlm-url: {srv.url}\nvlm-model: qwen2-vl\nvlm-frames: 2\n"
                       f"block-words: {BLOCK_WORDS}\nquiet: true\n")
        res = CliRunner().invoke(app, ["caption", str(video), "--out", str(tmp_path / "run"),
                                       "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    check_requests(srv, 2, (448, 336))
    assert set(RunDir(tmp_path / "run").table("captions")["model"]) == {"openai:qwen2-vl"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=180)


@pytest.mark.slow
def test_cli_end_to_end_a_subtitles_only_row_fails_with_one_line(video: Path,
                                                                 tmp_path: Path) -> None:
    """``howtocap caption MANIFEST --vlm-url``: the video is captioned from its frames; a row
    with subtitles and no video file fails alone, with one line."""
    sub = tmp_path / "talk.vtt"
    sub.write_text(video.with_suffix(".vtt").read_text())
    manifest = tmp_path / "videos.csv"
    manifest.write_text(f"video_id,video_path,subtitle_path\nclock,{video},\ntalk,,{sub}\n")
    with vision_server() as srv:
        res = cli("caption", str(manifest), "--out", str(tmp_path / "run"), "--vlm-url",
                  srv.url, "--vlm-model", "qwen2-vl", "--block-words", str(BLOCK_WORDS))
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert re.search(r"talk: --vlm-url needs the video file to take frames from, and this "
                     r"video has none \(subtitles only\)", res.stderr), res.stderr
    check_requests(srv, 4, (448, 336))
    got = RunDir(tmp_path / "run").table("captions")
    assert set(got["video_id"]) == {"clock"} and set(got["model"]) == {"openai:qwen2-vl"}
    both = cli("caption", str(manifest), "--out", str(tmp_path / "r2"), "--vlm-url", srv.url,
               "--llm-url", srv.url)
    assert both.returncode == 2 and both.stderr.strip().splitlines()[-1] == (
        "error: give --llm-url or --vlm-url, not both: the VLM writes the captions")


# -- faults: the same client as --llm-url, so the same guarantees ---------------------------

@pytest.mark.slow
def test_server_errors_are_retried_and_a_dead_server_stops_the_run_then_it_resumes(
        video: Path, tmp_path: Path) -> None:
    """500s are retried; a server that is gone stops the run (exit 75, nothing failed) and a
    re-run resumes with the frames sent again."""
    others = []
    for i in range(3):  # four videos: the breaker trips before all are done
        p = tmp_path / f"clock{i}.mp4"
        shutil.copyfile(video, p)
        shutil.copyfile(video.with_suffix(".vtt"), p.with_suffix(".vtt"))
        others.append(p)
    inputs = [str(video), *map(str, others)]
    out = tmp_path / "run"
    url = f"http://127.0.0.1:{closed_port()}/v1"
    res = cli("caption", *inputs, "--out", str(out), "--vlm-url", url,
              "--block-words", str(BLOCK_WORDS))
    assert res.returncode == 75, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "nothing lost; re-run to resume" in errors[0], res.stderr
    status = statuses(RunDir(out))
    assert (status["status"] == "error").sum() == 0
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with fault_server(faults=["500", "ok", "503"], retry_after="0", port=port) as srv:
        res = cli("caption", *inputs, "--out", str(out), "--vlm-url", url,
                  "--block-words", str(BLOCK_WORDS))
    assert res.returncode == 0, res.stderr
    assert "caption: 4 done" in res.stderr
    assert srv.injected["500"] >= 1 and srv.injected["503"] >= 1
    # every request carried its 4 frames; retried prompts were asked again with them
    assert srv.images == 4 * srv.requests
    got = RunDir(out).table("captions")  # the fault server echoes each speech line
    assert got.groupby("video_id").size().tolist() == [len(CUES)] * 4
