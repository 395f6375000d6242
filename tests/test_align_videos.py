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
from tests.test_align_stream import Stub, _make_run

import howtocap.align.run as align_module
import howtocap.align.stream as stream
import howtocap.align.videos as videos_module
from howtocap.align.config import AlignConfig
from howtocap.align.run import (
    _captioned,
    _Captions,
    _clip_files,
    _fingerprint_stream,
    _fingerprints,
    _unknown_ids,
    _video_items,
    align_run,
    read_aligned,
    recorded_fingerprints,
)
from howtocap.align.videos import RunVideos
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.schemas import kept_captions

PATHS = ["/data/videos/a.mp4", "rel/b.mp4", "", None, "c.mp4", "./d.mp4", "/x//y/e.mp4",
         "/data/videos/ü f.mp4", "/data/videos/", "/"]


def _old_items(ids: Sequence[str], paths: Sequence[str | None]) -> list[VideoItem]:
    """What align's list held: a ``VideoItem`` per row, ``Path`` of a non-empty path."""
    return [VideoItem(v, Path(p) if p else None) for v, p in zip(ids, paths, strict=True)]


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
    assert list(vs.kept_items()) == want[::3]
    assert [it for w in vs.windows(2) for it in w] == want[::3]
    assert vs.paths_of(["v00", "v06", "nope"]) == {"v00": Path("/"), "v06": None}
    assert vs.span("v02", "v04").to_pylist() == ["v02", "v03", "v04"]
    assert vs.span("v045", "v05").to_pylist() == ["v05"]
    assert vs.span("w", "z").to_pylist() == []


def test_unknown_videos_join_in_id_order_kept(tmp_path: Path) -> None:
    vs = RunVideos(["b", "d"], ["/v/b.mp4", "/v/d.mp4"])
    vs.add_unknown(["a", "c", "e"])
    assert [it.video_id for it in vs.kept_items()] == ["a", "b", "c", "d", "e"]
    assert [it.video_path for it in vs.kept_items()] == [
        None, Path("/v/b.mp4"), None, Path("/v/d.mp4"), None]
    empty = RunVideos.read(tmp_path / "missing.parquet")
    assert len(empty) == 0 and list(empty.windows(3)) == []


@pytest.mark.parametrize("rows", [1, 4, 100_000])
def test_lookups_equal_the_whole_list_ones(tmp_path: Path, rows: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown ids, the captioned selection, clip files and fingerprints over the compact
    videos, in windows of ``rows``, against the whole-list code they replace."""
    monkeypatch.setattr(stream, "ROWS", rows)
    monkeypatch.setattr(videos_module, "CHUNK", max(rows, 2))
    rd = _make_run(tmp_path / "run", n=14)
    # videos.parquet without v003 and v010 (named by captions only), v005's file gone,
    # v007's captioning failed, v008's subtitles failed (no caption record)
    table = pq.read_table(rd.table_path("videos"))
    keep = [v not in ("v003", "v010") for v in table.column("video_id").to_pylist()]
    pq.write_table(table.filter(pa.array(keep)), rd.table_path("videos"))
    (rd.root / "videos" / "v005.mp4").unlink()
    rd.commit_batch("caption", ("captions",), [StatusRecord("v007", "caption", "error")], {})
    rd.forget("caption", ["v008"])
    rd.commit_batch("subtitles", (), [StatusRecord("v008", "subtitles", "error")], {})
    caps = _Captions(rd)
    vs = _video_items(rd)
    old = _old_items(table.column("video_id").to_pylist(), table.column("video_path")
                     .to_pylist())
    old = [it for it, k in zip(old, keep, strict=True) if k]
    assert list(vs.kept_items()) == old
    assert list(_clip_files(vs)) == sorted(it.video_id for it in old
                                           if it.video_path and it.video_path.is_file())
    unknown = _unknown_ids(caps.kept(["video_id"]), vs)
    assert unknown == ["v003", "v010"]
    vs.add_unknown(unknown)
    old_all = old + [VideoItem(v, None) for v in unknown]
    _captioned(rd, vs, chunk=3)
    got = list(vs.kept_items())
    assert [it.video_id for it in got] == sorted(
        it.video_id for it in old_all if it.video_id not in ("v007", "v008"))
    whole = kept_captions(pd.read_parquet(caps.path))
    assert dict(_fingerprint_stream(caps.kept(), vs)) == _fingerprints(whole, got)


def test_windows_of_the_compact_videos_give_one_pass_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """align_run with every window tiny (items, scoring, captions) writes what one pass
    writes, records the same fingerprints, and resumes with nothing redone."""
    template = _make_run(tmp_path / "template", n=13).root
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
