"""The frame-embedding cache: decode once, reuse, detect corruption, key by content."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import howtocap.io.video as video
from howtocap.encoders import create
from howtocap.encoders.base import Encoder
from howtocap.encoders.cache import (
    cache_path,
    content_key,
    frame_embeddings,
    frame_embeddings_multi,
    save,
)
from howtocap.errors import InputError
from tests.support.tiny_models import tiny_checkpoint


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("enc")
    return {k: tiny_checkpoint(k, root / k) for k in ("clip", "siglip")}


@pytest.fixture(scope="module")
def clip_siglip(tiny_folders: dict[str, Path]) -> tuple[Encoder, Encoder]:
    return create(f"hf:{tiny_folders['clip']}"), create(f"hf:{tiny_folders['siglip']}")


@pytest.fixture(scope="module")
def clip_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vid") / "clip.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc=size=96x64:rate=10:duration=5", "-c:v", "libx264", "-preset",
                    "ultrafast", "-pix_fmt", "yuv420p", "-g", "10", "-movflags", "+faststart",
                    str(out)], check=True)
    return out


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every call to ``iter_frames`` (the only way the cache decodes a video)."""
    calls: list[Path] = []
    real = video.iter_frames

    def counting(path: Path, *args: object, **kw: object) -> Iterator[tuple[float, np.ndarray]]:
        calls.append(Path(path))
        return real(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(video, "iter_frames", counting)
    return calls


def test_second_call_reads_the_cache(clip_siglip: tuple[Encoder, Encoder], clip_video: Path,
                                     tmp_path: Path, decodes: list[Path]) -> None:
    enc = clip_siglip[0]
    first = frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    assert len(decodes) == 1
    assert first.emb.shape == (5, enc.dim) and first.emb.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(first.emb.astype(np.float32), axis=1), 1, atol=2e-3)
    assert first.fps == 1.0 and first.duration == pytest.approx(5.0, abs=0.05)
    assert not first.partial and first.encoder == enc.name == first.encoder
    np.testing.assert_allclose(first.times, [0.5, 1.5, 2.5, 3.5, 4.5])
    # matches encoding the decoded frames directly
    frames = np.stack([f for _, f in video.FrameStream(clip_video, 1.0, enc.image_size)])
    np.testing.assert_allclose(first.emb, enc.encode_images(frames), atol=2e-3)
    again = frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    assert len(decodes) == 2 - 1  # no second decode
    np.testing.assert_array_equal(again.emb, first.emb)
    assert cache_path(tmp_path, enc.name, first.key, 1.0).is_file()
    # another rate is another cache entry
    two = frame_embeddings(clip_video, enc, fps=2.0, cache_dir=tmp_path)
    assert len(decodes) == 2 and two.emb.shape == (10, enc.dim)


def test_two_encoders_decode_once(clip_siglip: tuple[Encoder, Encoder], clip_video: Path,
                                  tmp_path: Path, decodes: list[Path]) -> None:
    clip, siglip = clip_siglip
    both = frame_embeddings_multi(clip_video, [clip, siglip], cache_dir=tmp_path)
    assert len(decodes) == 1
    assert [b.emb.shape for b in both] == [(5, clip.dim), (5, siglip.dim)]
    assert [b.encoder for b in both] == [clip.name, siglip.name]
    # each is now cached on its own
    alone = frame_embeddings(clip_video, siglip, cache_dir=tmp_path)
    assert len(decodes) == 1
    np.testing.assert_array_equal(alone.emb, both[1].emb)


def test_corrupt_cache_files_are_rebuilt(clip_siglip: tuple[Encoder, Encoder],
                                         clip_video: Path, tmp_path: Path,
                                         decodes: list[Path]) -> None:
    enc = clip_siglip[0]
    good = frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    path = cache_path(tmp_path, enc.name, good.key, 1.0)
    data = path.read_bytes()
    # 1) truncated file
    path.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="corrupt frame-embedding cache"):
        rebuilt = frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    np.testing.assert_array_equal(rebuilt.emb, good.emb)
    assert len(decodes) == 2
    # 2) a well-formed file whose numbers were changed behind the header's checksum
    tampered = good.emb.copy()
    tampered[0, 0] += 1
    save(path, good)
    with np.load(path) as z:
        header = z["header"]
    buf = io.BytesIO()
    np.savez(buf, emb=tampered, header=header)
    path.write_bytes(buf.getvalue())
    with pytest.warns(UserWarning, match="checksum mismatch"):
        rebuilt = frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    np.testing.assert_array_equal(rebuilt.emb, good.emb)
    assert len(decodes) == 3
    # 3) garbage bytes
    path.write_bytes(b"\x00" * 100)
    with pytest.warns(UserWarning, match="unreadable"):
        frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    assert len(decodes) == 4
    # and the rebuilt file is trusted again
    frame_embeddings(clip_video, enc, cache_dir=tmp_path)
    assert len(decodes) == 4
    assert json.loads(np.load(path)["header"].tobytes())["checksum"]


def test_content_key_follows_content_not_name(clip_video: Path, tmp_path: Path) -> None:
    key = content_key(clip_video)
    copy = tmp_path / "renamed.mp4"
    shutil.copy(clip_video, copy)
    assert content_key(copy) == key
    with copy.open("ab") as fh:
        fh.write(b"\x00")
    assert content_key(copy) != key
    # big files: head, middle and tail chunks are hashed (and the size)
    big = tmp_path / "big.bin"
    data = bytearray(np.random.default_rng(0).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes())
    big.write_bytes(bytes(data))
    k0 = content_key(big)
    for off in (10, len(data) // 2, len(data) - 10):
        changed = bytearray(data)
        changed[off] ^= 0xFF
        big.write_bytes(bytes(changed))
        assert content_key(big) != k0, off
    with pytest.raises(InputError, match="nope.mp4: cannot read file"):
        content_key(tmp_path / "nope.mp4")


def test_changed_video_gets_new_embeddings(clip_siglip: tuple[Encoder, Encoder],
                                           clip_video: Path, tmp_path: Path,
                                           decodes: list[Path]) -> None:
    enc = clip_siglip[0]
    vid = tmp_path / "v.mp4"
    shutil.copy(clip_video, vid)
    a = frame_embeddings(vid, enc, cache_dir=tmp_path / "c")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=96x64:rate=10:duration=3", "-c:v", "libx264", "-preset",
                    "ultrafast", "-pix_fmt", "yuv420p", str(vid)], check=True)
    b = frame_embeddings(vid, enc, cache_dir=tmp_path / "c")
    assert len(decodes) == 2 and a.key != b.key and b.emb.shape[0] == 3


def test_partial_video_is_flagged_and_bad_input_named(clip_siglip: tuple[Encoder, Encoder],
                                                      clip_video: Path, tmp_path: Path) -> None:
    enc = clip_siglip[0]
    cut = tmp_path / "cut.mp4"
    data = clip_video.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    fe = frame_embeddings(cut, enc, cache_dir=tmp_path)
    assert fe.partial and 1 <= len(fe.emb) < 5 and fe.duration < 5
    assert frame_embeddings(cut, enc, cache_dir=tmp_path).partial  # the flag is cached too
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video")
    with pytest.raises(InputError, match="junk.mp4"):
        frame_embeddings(junk, enc, cache_dir=tmp_path)


def test_parallel_calls_decode_once(clip_siglip: tuple[Encoder, Encoder], clip_video: Path,
                                    tmp_path: Path, decodes: list[Path]) -> None:
    enc = clip_siglip[0]
    out: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: out.append(
        frame_embeddings(clip_video, enc, cache_dir=tmp_path).emb)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4 and len(decodes) == 1
    for o in out[1:]:
        np.testing.assert_array_equal(o, out[0])
    from howtocap.encoders import cache

    assert cache._locks == {}  # no lock stays per file once its callers are done (a lock
    # per video ever read grew align's memory by ~300 bytes a video)


def test_frames_command_fills_the_cache_and_reports_bad_files(
        tiny_folders: dict[str, Path], clip_video: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from howtocap.cli import add_commands

    app = typer.Typer()
    add_commands(app, "encoders", "frames")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video")
    res = CliRunner().invoke(app, ["frames", str(clip_video), str(junk), "--out",
                                   str(tmp_path / "run"), "--encoder",
                                   f"hf:{tiny_folders['clip']}", "--quiet"])
    output = " ".join(res.output.split())  # rich wraps long lines
    assert res.exit_code == 1, output  # one video failed, the other finished
    assert "junk.mp4: not a readable video file" in output
    assert "1 done, 0 already done, 1 failed" in output
    files = list((tmp_path / "run" / "cache" / "frames").rglob("*.npz"))
    assert len(files) == 1 and files[0].parent.name.startswith("hf_clip")
    assert files[0].name == f"{content_key(clip_video)}_1fps.npz"
    res = CliRunner().invoke(app, ["encoders"])
    assert res.exit_code == 0 and "openclip:<arch>/<pretrained>" in res.output
    res = CliRunner().invoke(app, ["encoders", "--check", "nope"])
    assert res.exit_code == 2 and "unknown encoder 'nope'" in res.output
