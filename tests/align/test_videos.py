"""align's compact list of the run's videos (``align.videos.RunVideos``, issue #22): the
items it makes a window at a time are the ones the whole list of ``VideoItem`` s held, and
the lookups made over it (unknown ids, captioned videos, clip files, fingerprints) give what
they gave over that list, at any window size."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import howtocap.align.run as align_module
import howtocap.align.stream as stream
import howtocap.align.videos as videos_module
from howtocap.align.config import AlignConfig
from howtocap.align.run import (
    _captioned,
    _Captions,
    _clip_files,
    _fingerprint_stream,
    _unknown_ids,
    _video_items,
    align_run,
    read_aligned,
)
from howtocap.align.videos import RunVideos
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.schemas import kept_captions
from tests.support.align import Stub, make_run, recorded_fingerprints, whole_fingerprints

PATHS = ["/data/videos/a.mp4", "rel/b.mp4", "", None, "c.mp4", "./d.mp4", "/x//y/e.mp4",
         "/data/videos/ü f.mp4", "/data/videos/", "/"]


def _old_items(ids: Sequence[str], paths: Sequence[str | None]) -> list[VideoItem]:
    """What align's list held: a ``VideoItem`` per row, ``Path`` of a non-empty path."""
    return [VideoItem(v, Path(p) if p else None) for v, p in zip(ids, paths, strict=True)]


def _kept_items(vs: RunVideos) -> list[VideoItem]:
    """The kept videos' items, in id order."""
    return vs.items(np.flatnonzero(vs.keep))


def _table(path: Path, ids: Sequence[str], paths: Sequence[str | None]) -> Path:
    pq.write_table(pa.table({"video_id": pa.array(list(ids), pa.string()),
                             "video_path": pa.array(list(paths), pa.string())}), path)
    return path


@pytest.mark.parametrize("chunk", [1, 3, 65_536])
def test_items_are_the_rows_items_in_id_order(tmp_path: Path, chunk: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(videos_module, "CHUNK", chunk)
    ids = [f"v{i:02d}" for i in range(len(PATHS))][::-1]  # not in id order: sorted here
    vs = RunVideos.read(_table(tmp_path / "videos.parquet", ids, PATHS))
    want = sorted(_old_items(ids, PATHS), key=lambda it: it.video_id)
    assert len(vs) == len(PATHS)
    assert vs.items(np.arange(len(vs))) == want
    for size in (1, 2, 4, 100):
        wins = list(vs.windows(size))
        assert max(len(w) for w in wins) == min(size, len(want))
        assert [it for w in wins for it in w] == want
    vs.select(np.arange(len(vs)) % 3 == 0)
    assert _kept_items(vs) == want[::3]
    assert [it for w in vs.windows(2) for it in w] == want[::3]
    assert vs.paths_of(["v00", "v06", "nope"]) == {"v00": Path("/"), "v06": None}
    assert vs.span("v02", "v04").to_pylist() == ["v02", "v03", "v04"]
    assert vs.span("v045", "v05").to_pylist() == ["v05"]
    assert vs.span("w", "z").to_pylist() == []


def test_videos_given_out_of_order_are_kept_in_id_order(tmp_path: Path) -> None:
    vs = RunVideos.read(_table(tmp_path / "videos.parquet", ["b", "d", "a", "c", "e"],
                               ["/v/b.mp4", "/v/d.mp4", None, "", None]))
    assert [it.video_id for it in _kept_items(vs)] == ["a", "b", "c", "d", "e"]
    assert [it.video_path for it in _kept_items(vs)] == [
        None, Path("/v/b.mp4"), None, Path("/v/d.mp4"), None]
    empty = RunVideos.read(tmp_path / "missing.parquet")
    assert len(empty) == 0 and list(empty.windows(3)) == []


def test_shards_group_the_videos_in_run_order(tmp_path: Path) -> None:
    """Read from a run directory, the videos know their shard (their row of videos.parquet
    // shard size): ``shards`` and ``windows`` take them shard by shard, id order within,
    also when later videos (appended) sort first."""
    rd = RunDir(tmp_path / "run", shard_size=3)
    first = [VideoItem(f"v{i}", Path(f"/v/v{i}.mp4")) for i in range(5)]
    late = [VideoItem(v, None) for v in ("c", "a", "b")]
    rd.record_videos(first)
    rd.record_videos(late)  # rows 5..7: shard 1 (v3, v4, one of them), shard 2 (two)
    rows = pq.read_table(rd.table_path("videos")).column("video_id").to_pylist()
    want = [(k, sorted(rows[3 * k:3 * k + 3])) for k in range(3)]
    assert want[1][1][0] in ("a", "b", "c")  # an appended video sorts first in its shard
    vs = RunVideos.read(rd.table_path("videos"), rd.shard_size)
    assert vs.id_list() == ["a", "b", "c", "v0", "v1", "v2", "v3", "v4"]
    assert [(k, vs.id_list(pos)) for k, pos in vs.shards()] == want
    run_order = [v for _, ids in want for v in ids]
    assert [[it.video_id for it in w] for w in vs.windows(4)] == [run_order[:4],
                                                                  run_order[4:]]
    assert [it.video_id for it in _kept_items(vs)] == vs.id_list()  # still id order
    vs.select(np.array([v != "v1" for v in vs.id_list()]))
    got = [(k, vs.id_list(pos)) for k, pos in vs.shards()]
    assert got == [(0, ["v0", "v2"]), *want[1:]]
    assert [k for k, _ in vs.shards(kept=False)] == [0, 1, 2]
    unknown = RunVideos.read(_table(tmp_path / "v.parquet", ["b", "a"], ["", ""]))
    assert [k for k, _ in unknown.shards()] == [-1]  # shards unknown


@pytest.mark.parametrize("rows", [1, 4, 100_000])
def test_lookups_equal_the_whole_list_ones(tmp_path: Path, rows: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown ids, the captioned selection, clip files and fingerprints over the compact
    videos, in windows of ``rows``, against the whole-list code they replace."""
    monkeypatch.setattr(stream, "ROWS", rows)
    monkeypatch.setattr(videos_module, "CHUNK", max(rows, 2))
    rd = make_run(tmp_path / "run", n=14, shard_size=4)
    # v005's file gone, v007's captioning failed, v008's subtitles failed (no caption
    # record), v014's captioning done in a chunk of a shard not finished since
    (rd.root / "videos" / "v005.mp4").unlink()
    w = rd.writer("caption", 1, ("captions",))
    w.commit([StatusRecord("v007", "caption", "error")], {})
    w.finish()
    rd.forget("caption", ["v008"])
    w = rd.writer("subtitles", 2, ("subtitles",))
    w.commit([StatusRecord("v008", "subtitles", "error")], {})
    w.finish()
    rd.record_videos([VideoItem("v014", None)])
    rd.writer("caption", 3, ("captions",)).commit(
        [StatusRecord("v014", "caption", "ok")], {})
    table = pq.read_table(rd.table_path("videos"))
    caps = _Captions(rd)
    vs = _video_items(rd)
    old = _old_items(table.column("video_id").to_pylist(), table.column("video_path")
                     .to_pylist())
    assert _kept_items(vs) == old
    assert list(_clip_files(vs)) == sorted(it.video_id for it in old
                                           if it.video_path and it.video_path.is_file())
    # captions of videos videos.parquet lacks (a table brought in by hand): named as such
    assert _unknown_ids(caps.kept(["video_id"]), vs) == []
    few = RunVideos.read(_table(tmp_path / "few.parquet", ["v000", "v004", "v011"],
                                ["", "", ""]))
    whole = kept_captions(pd.read_parquet(rd.root / "captions"))
    named = set(whole["video_id"])
    assert len(named) == 12 and not named & {"v007", "v008", "v014"}
    assert _unknown_ids(caps.kept(["video_id"]), few) == sorted(
        named - {"v000", "v004", "v011"})
    _captioned(rd, vs)
    got = _kept_items(vs)
    assert [it.video_id for it in got] == sorted(
        it.video_id for it in old if it.video_id not in ("v007", "v008", "v014"))
    for k, pos in vs.shards():
        assert dict(_fingerprint_stream(caps.kept(shard=k), vs.items(pos))) == \
            whole_fingerprints(whole, vs.items(pos))


@pytest.mark.slow
def test_windows_of_the_compact_videos_give_one_pass_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """align_run with every window tiny (items, scoring, captions) writes what one pass
    writes, records the same fingerprints, and resumes with nothing redone."""
    template = make_run(tmp_path / "template", n=13).root
    enc = Stub()
    one = RunDir(shutil.copytree(template, tmp_path / "one"))
    whole = align_run(one, [], AlignConfig(), encoders=[enc], progress=False)
    monkeypatch.setattr(videos_module, "CHUNK", 2)
    monkeypatch.setattr(align_module, "WINDOW", 3)
    monkeypatch.setattr(stream, "ROWS", 2)
    many = RunDir(shutil.copytree(template, tmp_path / "many"))
    got = align_run(many, [], AlignConfig(), encoders=[enc], progress=False)
    assert (got.done, got.failed) == (whole.done, whole.failed) and got.done == 13
    pd.testing.assert_frame_equal(read_aligned(many), read_aligned(one))
    assert recorded_fingerprints(many) == recorded_fingerprints(one)
    again = align_run(many, [], AlignConfig(), encoders=[enc], progress=False)
    assert again.done == 0 and again.skipped == 13
