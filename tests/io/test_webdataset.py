"""WebDataset shards: export from a real run directory, read them back, train from them."""

from __future__ import annotations

import json
import math
import re
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VideoItem
from howtocap.io.pairs import build_clips, frame_times, read_pairs
from howtocap.io.video import decode_jpeg, sample_frames
from howtocap.io.webdataset import (
    clip_key,
    decode_npy,
    export_webdataset,
    frame_names,
    open_shards,
)
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.schemas import conform
from howtocap.train.api import train
from howtocap.train.data import DualItem, ShardStream, shard_source, stream_batches
from tests.support.stages import write_rows
from tests.support.tiny_models import TinyEncoder, weights

SIZE = 32  # exported frame size (the tiny encoders' input size)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run directory with kept aligned captions (two per clip, one clip dropped per video)
    for six generated videos, plus a broken and a missing video."""
    root = tmp_path_factory.mktemp("wds")
    vids = []
    for v in range(6):
        steps = [DEFAULT_STEPS[(v * 3 + k) % len(DEFAULT_STEPS)] for k in range(4)]
        vids.append(make_narrated_video(root / "videos", f"vid.{v}", steps, seconds_per_step=2.0,
                                        fps=4, size=48, audio=False, subtitles=None))
    broken = root / "videos" / "broken.mp4"
    broken.write_bytes(b"this is not a video file\n" * 100)
    rd = RunDir(root / "run")
    rd.record_videos([VideoItem(v.video_id, v.video_path) for v in vids]
                     + [VideoItem("broken", broken),
                        VideoItem("missing", root / "videos" / "nowhere.mp4")])

    def row(vid: str, start: float, end: float, text: str, kept: bool) -> dict:
        return {"video_id": vid, "start": start, "end": end, "text": text,
                "orig_start": start, "orig_end": end, "offset": 0.0, "score": 0.5,
                "kept": kept, "encoders": "x", "source": "llm", "block": 0, "model": "m"}

    rows = []
    for v in vids:
        for k, s in enumerate(v.steps):
            rows += [row(v.video_id, s.start, s.end, s.caption, k != 3),
                     row(v.video_id, s.start, s.end, s.narration, k != 3)]
    rows += [row(vid, 0.0, 2.0, "anything at all", True) for vid in ("broken", "missing")]
    write_rows(rd, "aligned", conform(pd.DataFrame(rows), "aligned"))
    return {"root": root, "rundir": rd, "videos": vids}


@pytest.fixture(scope="module")
def shards(run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("shards") / "frames"
    from howtocap.progress import console

    with console.capture() as cap:
        res = export_webdataset(run["rundir"].root, out, frames_per_clip=4, image_size=SIZE,
                                shard_size=4, progress=False)
    return {"out": out, "res": res, "log": cap.get()}


def _members(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        return tf.getnames()


def _samples(out: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of every shard: key -> {field: bytes}, read with tarfile alone."""
    got: dict[str, dict[str, bytes]] = {}
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers():
                key, field = m.name.split(".", 1)
                got.setdefault(key, {})[field] = tf.extractfile(m).read()
    return got


# -- export ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_export_writes_shards_index_and_meta(shards: dict[str, Any]) -> None:
    out, res = shards["out"], shards["res"]
    # 6 videos x 3 kept clips, 4 per shard; broken and missing videos skipped
    assert res.n_samples == 18 and res.n_captions == 36 and res.kind == "aligned"
    assert res.shards == [f"{i:06d}.tar" for i in range(5)]
    assert sorted(p.name for p in out.iterdir()) == res.shards + ["index.parquet", "meta.json"]
    names = _members(out / "000000.tar")
    key = names[0].split(".", 1)[0]
    assert names[:5] == [f"{key}.{f}" for f in [*frame_names(4), "json"]]
    assert [f.split(".", 1)[1] for f in names[:5]] == ["frames.00.jpg", "frames.01.jpg",
                                                       "frames.02.jpg", "frames.03.jpg", "json"]
    assert key == clip_key("vid.0", 0.0, 2.0) and "." not in key and key.startswith("vid_0-")
    index = pd.read_parquet(out / "index.parquet")
    assert list(index.columns) == ["shard", "key", "video_id", "start", "end", "n_captions"]
    assert len(index) == 18 and index["key"].is_unique and (index["n_captions"] == 2).all()
    assert index.groupby("shard").size().tolist() == [4, 4, 4, 4, 2]
    assert set(index["video_id"]) == {f"vid.{v}" for v in range(6)}
    for shard, grp in index.groupby("shard"):
        keys = [n.split(".", 1)[0] for n in _members(out / shard)]
        assert sorted(set(keys)) == sorted(grp["key"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["content"] == "frames" and meta["frames_per_clip"] == 4
    assert meta["image_size"] == SIZE and meta["samples"] == 18 and meta["captions"] == 36
    assert meta["videos"] == 6 and set(meta["skipped_videos"]) == {"broken", "missing"}
    assert not list(out.glob(".*"))  # no temp files left


@pytest.mark.slow
def test_broken_and_missing_videos_get_one_line_each(shards: dict[str, Any]) -> None:
    lines = shards["log"].splitlines()
    broken = [ln for ln in lines if "broken" in ln]
    missing = [ln for ln in lines if "missing" in ln and "skipped" not in ln]
    assert len(broken) == 1 and "broken.mp4" in broken[0] and broken[0].startswith("skip")
    assert len(missing) == 1 and "nowhere.mp4" in missing[0]
    assert "Traceback" not in shards["log"]


@pytest.mark.slow
def test_shards_hold_exactly_the_pairs_training_reads(run: dict[str, Any],
                                                       shards: dict[str, Any]) -> None:
    clips = build_clips(read_pairs(run["rundir"].root), log=None).clips
    got = _samples(shards["out"])
    assert len(got) == len(clips) == 18
    by_key = {clip_key(c.video_id, c.start, c.end): c for c in clips}
    assert set(got) == set(by_key)
    for key, s in got.items():
        c, j = by_key[key], json.loads(s["json"])
        assert (j["video_id"], j["start"], j["end"]) == (c.video_id, c.start, c.end)
        assert j["captions"] == c.captions and Path(j["video_path"]) == c.video_path
        # the frames are the video's frames at the clip's segment centres (JPEG-compressed)
        want = sample_frames(c.video_path, frame_times(c, 4, None), size=SIZE)
        have = np.stack([decode_jpeg(s[f]) for f in frame_names(4)])
        assert have.shape == (4, SIZE, SIZE, 3)
        assert np.abs(have.astype(int) - want.astype(int)).mean() < 8


@pytest.mark.slow
def test_other_tools_read_the_shards_with_plain_webdataset(shards: dict[str, Any]) -> None:
    import webdataset as wds

    urls = [str(p) for p in sorted(shards["out"].glob("*.tar"))]
    ds = wds.WebDataset(urls, shardshuffle=False).decode("rgb")
    samples = list(ds)
    assert len(samples) == 18
    s = samples[0]
    assert s["frames.00.jpg"].shape == (SIZE, SIZE, 3) and s["frames.00.jpg"].dtype == np.float32
    assert s["json"]["video_id"] == "vid.0" and len(s["json"]["captions"]) == 2


@pytest.mark.slow
def test_export_errors_and_overwrite(run: dict[str, Any], tmp_path: Path) -> None:
    root = run["rundir"].root
    with pytest.raises(HowtocapError, match="--content must be frames or embeddings"):
        export_webdataset(root, tmp_path / "x", content="pixels", progress=False)
    with pytest.raises(HowtocapError, match="--shard-size must be at least 1"):
        export_webdataset(root, tmp_path / "x", shard_size=0, progress=False)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds other files \\(notes.txt\\)"):
        export_webdataset(root, busy, progress=False)
    with pytest.raises(HowtocapError, match="not a run directory"):
        export_webdataset(tmp_path / "nothing", tmp_path / "y", progress=False)
    # exporting again into a finished export replaces it (fewer shards: none left over)
    out = tmp_path / "again"
    export_webdataset(root, out, image_size=SIZE, shard_size=4, progress=False)
    (out / ".000009.tar.tmp").write_bytes(b"half a shard")  # what a SIGKILL leaves
    res = export_webdataset(root, out, image_size=SIZE, shard_size=100, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["000000.tar", "index.parquet",
                                                     "meta.json"]
    assert res.shards == ["000000.tar"]


def _shard_keys(out: Path) -> list[str]:
    """The sample keys of every finished shard, read with plain webdataset (which raises on a
    shard that is not a whole tar), in shard order; duplicates kept."""
    import webdataset as wds

    keys = []
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tf:  # a whole tar: its end-of-archive blocks are there
            assert tf.getmembers(), shard
        keys += [s["__key__"] for s in wds.WebDataset(str(shard), shardshuffle=False)]
    return keys


@pytest.mark.slow
def test_sigkilled_export_then_rerun_equals_a_clean_export(run: dict[str, Any],
                                                           tmp_path: Path) -> None:
    """SIGKILL ``howtocap export --format webdataset`` mid-write (no Python clean-up runs): it
    leaves only whole shards and no meta.json; the same export run again leaves no temp file
    and the samples, index and meta of a clean export."""
    import os
    import signal
    import subprocess
    import time

    from tests.support.cli import HOWTOCAP

    root = run["rundir"].root
    clean = tmp_path / "clean"
    export_webdataset(root, clean, image_size=SIZE, shard_size=2, progress=False)
    out = tmp_path / "cut"
    args = [*HOWTOCAP, "export", str(root), "--format", "webdataset", "--out", str(out),
            "--image-size", str(SIZE), "--shard-size", "2", "--quiet"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "NO_COLOR": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and \
            (len(list(out.glob("*.tar"))) < 2 or not list(out.glob(".*.tar.tmp"))):
        time.sleep(0.002)  # two whole shards and a third being written
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the kill must land before the export ends"
    n_clean = len(list(clean.glob("*.tar")))
    finished = sorted(p.name for p in out.glob("*.tar"))
    assert 2 <= len(finished) < n_clean and not (out / "meta.json").exists()
    assert list(out.glob(".*.tar.tmp")), "the kill must land while a shard is being written"
    keys = _shard_keys(out)  # what a kill leaves: whole shards only, each of 2 samples
    assert len(keys) == 2 * len(finished) and len(set(keys)) == len(keys)
    with pytest.raises(InputError, match="the export did not finish"):
        train(out, out_dir=tmp_path / "t", encoder=TinyEncoder(), progress=False)

    res = subprocess.run(args, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "NO_COLOR": "1"})
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files remain
    keys, want = _shard_keys(out), _shard_keys(clean)
    assert len(keys) == len(set(keys)) == 18 and set(keys) == set(want)  # each sample once
    assert _samples(out) == _samples(clean)  # same frames and captions, byte for byte
    pd.testing.assert_frame_equal(pd.read_parquet(out / "index.parquet"),
                                  pd.read_parquet(clean / "index.parquet"))
    got, ref = (json.loads((d / "meta.json").read_text()) for d in (out, clean))
    assert got.pop("created") and ref.pop("created") and got == ref


# -- training --------------------------------------------------------------------------------
KW = dict(batch_size=4, lr=3e-3, frames_per_clip=2, eval_fraction=0.34, warmup=0.1,
          progress=False)


@pytest.mark.slow
def test_train_one_epoch_from_shards(shards: dict[str, Any], tmp_path: Path) -> None:
    res = train(shards["out"], out_dir=tmp_path / "run", encoder=TinyEncoder(), epochs=1,
                **KW)
    assert res.n_train_clips == 12 and res.n_eval_clips == 6 and res.n_pairs == 36
    assert set(res.skipped_videos) == {"broken", "missing"}
    row = res.history[-1]
    assert row["epoch"] == 1 and math.isfinite(row["loss"]) and row["steps"] == 3
    assert "R@1" in row and "R@1" in res.history[0]  # held-out videos evaluated from shards
    assert res.checkpoint.exists() and res.checkpoint.name == "last.pt"
    cfg = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert cfg["webdataset"] == str(shards["out"]) and cfg["frames"] == "webdataset"
    assert cfg["train_clips"] == 12


@pytest.mark.slow
def test_stream_is_deterministic_and_sees_each_clip_once(shards: dict[str, Any]) -> None:
    src = shard_source(shards["out"], 0.34, seed=0)
    meta = src.shards.meta

    def keys(epoch: int, workers: int) -> list[tuple[str, str]]:
        urls, n = src.plan(epoch, 0, 0, 1, 4)
        got = []

        class Keyed(DualItem):
            def __call__(self, s: dict) -> Any:
                return s["__key__"], super().__call__(s)[1]

        ds = ShardStream(urls, src.held, Keyed(meta["frame_keys"], 2, 0, epoch),
                         seed=0, epoch=epoch, rank=0, buffer=8, chunk=4)
        for batch in stream_batches(ds, n, 4, workers):
            got += batch
        return got

    e0 = keys(0, 0)
    assert len(e0) == 12 and len({k for k, _ in e0}) == 12  # every training clip, once
    held_keys = set(src.shards.index.loc[src.shards.index["video_id"].isin(src.held), "key"])
    assert not held_keys & {k for k, _ in e0} and len(held_keys) == 6
    assert e0 == keys(0, 0)  # reproducible
    e1 = keys(1, 0)
    assert [k for k, _ in e1] != [k for k, _ in e0]  # reshuffled every epoch
    d0, d1 = dict(e0), dict(e1)
    assert any(d0[k] != d1[k] for k in d0)  # captions redrawn per epoch
    w2 = keys(0, 2)  # two loader processes: same clips and caption draws, another order
    assert sorted(w2) == sorted(e0) and w2 == keys(0, 2)


@pytest.mark.slow
def test_ranks_get_disjoint_shards_and_equal_batches(shards: dict[str, Any]) -> None:
    src = shard_source(shards["out"], 0.0, seed=0, world=2)
    for epoch in range(3):
        (u0, n0), (u1, n1) = (src.plan(epoch, 0, r, 2, 3) for r in range(2))
        assert n0 == n1 > 0 and not set(u0) & set(u1)
        assert sorted(u0 + u1) == sorted(src.shards.url(s) for s in src.shards.shards)
    with pytest.raises(HowtocapError, match="5 shard\\(s\\) for 8 processes"):
        shard_source(shards["out"], 0.0, seed=0, world=8)


@pytest.mark.slow
def test_resume_from_shards_continues_exactly(shards: dict[str, Any], tmp_path: Path) -> None:
    kw = {**KW, "epochs": 2}
    full = train(shards["out"], out_dir=tmp_path / "full", encoder=TinyEncoder(), **kw)

    class Killed(Exception):
        pass

    def kill(row: dict) -> None:
        raise Killed

    with pytest.raises(Killed):
        train(shards["out"], out_dir=tmp_path / "cut", encoder=TinyEncoder(), on_epoch_end=kill,
              **kw)
    res = train(shards["out"], out_dir=tmp_path / "cut", encoder=TinyEncoder(), resume=True,
                **kw)
    assert res.resumed_from == 1 and res.epochs_run == 1
    a, b = weights(full.checkpoint), weights(res.checkpoint)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    assert res.history[-1]["loss"] == pytest.approx(full.history[-1]["loss"], abs=1e-6)


@pytest.mark.slow
def test_shard_training_errors_are_one_line(shards: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(HowtocapError, match="hold 4 frames per clip; pass --frames-per-clip 4"):
        train(shards["out"], out_dir=tmp_path / "a", encoder=TinyEncoder(), epochs=1,
              frames_per_clip=6, progress=False)
    with pytest.raises(HowtocapError, match="--frames pixels does not apply"):
        train(shards["out"], out_dir=tmp_path / "b", encoder=TinyEncoder(), frames="pixels",
              progress=False)
    with pytest.raises(HowtocapError, match="holds frames; mee trains on frozen frame emb"):
        train(shards["out"], out_dir=tmp_path / "c", model="mee", encoder=TinyEncoder(),
              progress=False)


@pytest.mark.slow
def test_mee_trains_from_embedding_shards(run: dict[str, Any], tiny_clip: str,  # noqa: F811
                                          tmp_path: Path) -> None:
    from howtocap.encoders import create
    from howtocap.encoders.cache import frame_embeddings
    from howtocap.encoders.clip_rows import ClipRows
    from howtocap.encoders.windows import rows_covering

    out = tmp_path / "emb"
    with pytest.raises(HowtocapError, match="--content embeddings needs the frame embeddings' "
                                            "encoder"):
        export_webdataset(run["rundir"].root, out, content="embeddings", progress=False)
    res = export_webdataset(run["rundir"].root, out, content="embeddings",
                            embed=ClipRows(tiny_clip), shard_size=5, progress=False)
    assert res.n_samples == 18 and len(res.shards) == 4
    enc = create(tiny_clip)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["content"] == "embeddings" and meta["encoder_name"] == enc.name
    assert meta["dim"] == enc.dim and "frames_per_clip" not in meta
    # the stored rows are the run's cached per-second embeddings of the clip
    v = run["videos"][1]
    fe = frame_embeddings(v.video_path, enc, cache_dir=run["rundir"].cache_dir)
    s = _samples(out)[clip_key(v.video_id, v.steps[1].start, v.steps[1].end)]
    lo, hi = rows_covering(np.array([v.steps[1].start]), np.array([v.steps[1].end]),
                           len(fe.emb), fe.fps)
    np.testing.assert_array_equal(decode_npy(s["emb.npy"]), fe.emb[lo[0]:hi[0]])
    assert _members(out / "000000.tar")[0].endswith(".emb.npy")

    trained = train(out, out_dir=tmp_path / "mee", model="mee", encoder=tiny_clip, epochs=3,
                    batch_size=4, lr=1e-2, eval_fraction=0.34, mee_dim=16, progress=False)
    losses = [r["loss"] for r in trained.history if r["epoch"] > 0]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert "R@1" in trained.history[-1]
    assert create(str(trained.checkpoint)).dim == 16
    with pytest.raises(HowtocapError, match="holds frame embeddings; the dual encoder"):
        train(out, out_dir=tmp_path / "d", encoder=tiny_clip, progress=False)
    with pytest.raises(HowtocapError, match=re.escape(f"holds embeddings of encoder "
                                                      f"'{enc.name}'")):
        train(out, out_dir=tmp_path / "m2", model="mee", encoder=TinyEncoder(),
              progress=False)


@pytest.mark.slow
def test_open_shards_rejects_a_truncated_shard(shards: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards["out"], copy)
    data = (copy / "000001.tar").read_bytes()
    (copy / "000001.tar").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="000001.tar: .* bytes, the export wrote"):
        open_shards(copy)


@pytest.mark.slow
def test_cli_export_then_train(run: dict[str, Any], tiny_clip: str,  # noqa: F811
                               tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from howtocap.cli import app

    runner = CliRunner()
    out = tmp_path / "shards"
    r = runner.invoke(app, ["export", str(run["rundir"].root), "--format", "webdataset",
                            "--out", str(out), "--image-size", str(SIZE), "--frames-per-clip",
                            "2", "--shard-size", "6", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "wrote 18 clips (36 aligned captions) in 3 shard(s)" in r.output
    r = runner.invoke(app, ["export", str(run["rundir"].root), "--format", "webdataset",
                            "--out", str(out), "--content", "pixels"])
    assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["train", str(out), "--out", str(tmp_path / "t"), "--encoder",
                            tiny_clip, "--epochs", "1", "--batch-size", "4",
                            "--frames-per-clip", "2", "--eval-fraction", "0"])
    assert r.exit_code == 0, r.output
    assert "trained 18 clips (36 pairs, 2 video(s) skipped)" in r.output
    assert (tmp_path / "t" / "ckpt" / "last.pt").exists()


def _ddp_recording_worker(rank: int, world: int, port: int, shards: str, out: str,
                          spec: str) -> None:
    """``ddp_worker`` that also writes what this rank read from the shards (shard, sample key)
    and what it trained on (clip keys of its batches), to check the ranks' disjointness."""
    import howtocap.train.tasks as tasks
    from tests.support.tiny_models import ddp_worker

    given: list[str] = []  # the shards this rank's stream was given
    read: list[list[str]] = []  # (shard, key) of each training sample it streamed
    trained: list[int] = []  # clip keys of the batches it trained on
    real_batches = tasks.data.stream_batches

    class Recording(ShardStream):
        def __init__(self, urls: list[str], held: frozenset[str], item: Any,
                     **kw: Any) -> None:
            given.extend(Path(u).name for u in urls)

            def recorded(s: dict[str, Any]) -> Any:
                read.append([Path(s["__url__"]).name, s["__key__"]])
                return item(s)

            super().__init__(urls, held, recorded, **kw)

    def stream_batches(*a: Any, **kw: Any) -> Any:
        for batch in real_batches(*a, **kw):
            trained.extend(int(b[3]) for b in batch)
            yield batch

    tasks.data.ShardStream, tasks.data.stream_batches = Recording, stream_batches
    ddp_worker(rank, world, port, shards, out, spec)
    (Path(out) / f"rank{rank}_seen.json").write_text(json.dumps(
        {"given": given, "read": read, "trained": trained}))


@pytest.mark.slow
def test_ddp_two_processes_stream_disjoint_shards(shards: dict[str, Any], tiny_clip: str,  # noqa: F811
                                                  tmp_path: Path) -> None:
    import socket

    import torch.multiprocessing as mp

    from howtocap.train.data import clip_key as train_clip_key

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_recording_worker, args=(2, port, str(shards["out"]), str(tmp_path / "ddp"),
                                          tiny_clip), nprocs=2)
    src = shard_source(shards["out"], 0.25, seed=0, world=2)
    n = src.plan(0, 0, 0, 2, 3)[1]
    ck = torch.load(tmp_path / "ddp" / "ckpt" / "last.pt", weights_only=True)
    assert n >= 1 and ck["step"] == n  # both ranks ran the same number of steps
    # what each rank really read and trained on: disjoint shards, disjoint samples
    seen = [json.loads((tmp_path / "ddp" / f"rank{r}_seen.json").read_text()) for r in (0, 1)]
    shards_of = [set(s["given"]) for s in seen]
    keys_of = [[k for _, k in s["read"]] for s in seen]
    assert all(shards_of) and not shards_of[0] & shards_of[1], shards_of
    assert all({sh for sh, _ in s["read"]} <= set(s["given"]) for s in seen)
    assert all(len(k) == len(set(k)) for k in keys_of)  # no sample twice within a rank
    assert not set(keys_of[0]) & set(keys_of[1])
    index = pd.read_parquet(shards["out"] / "index.parquet")
    for r in (0, 1):  # every sample read came from one of the rank's own shards
        assert set(keys_of[r]) <= set(index[index["shard"].isin(shards_of[r])]["key"])
    trained = [s["trained"] for s in seen]
    assert [len(t) for t in trained] == [3 * n, 3 * n]  # n batches of 3 each
    assert not set(trained[0]) & set(trained[1])  # no clip trained by both ranks
    held = src.held
    train_keys = {train_clip_key(v, s, e) for v, s, e in
                  zip(index["video_id"], index["start"], index["end"], strict=True)
                  if v not in held}
    assert set(trained[0]) | set(trained[1]) <= train_keys  # never a held-out clip
    r0 = torch.load(tmp_path / "ddp" / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "ddp" / "rank1.pt", weights_only=True)
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k


def test_a_clip_export_is_named_as_such_not_as_an_unfinished_one(tmp_path: Path) -> None:
    (tmp_path / "00000.tar").write_bytes(b"")
    (tmp_path / "clips.json").write_text("{}")
    with pytest.raises(InputError, match="is a clip export"):
        open_shards(tmp_path)
    (tmp_path / "clips.json").unlink()
    with pytest.raises(InputError, match="the export did not finish"):
        open_shards(tmp_path)
