"""A text-only caption run taken a window of shards at a time (issue #22: memory flat in the
number of videos) gives the tables of a run taken whole, whatever its shard size, and resumes
mid-way without duplicates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.caption.run import caption_run
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir
from howtocap.errors import ServiceUnavailable
from tests.support.stages import status_records
from tests.support.windows import QuickLLM, config, write_source


def tables(out: Path) -> dict[str, pd.DataFrame]:
    """The tables, timings left out of ``status`` (they differ run to run). Rows are in id
    order within a shard and shards in the source's order, so the rows of runs of other
    shard sizes are compared by video (a stable sort keeps each video's rows in order);
    ``videos`` is in the source's order whatever the shard size."""
    rd = RunDir(out, create=False)
    got = {t: rd.table(t) for t in ("subtitles", "captions", "status", "videos")}
    got["status"] = got["status"].drop(columns=[c for c in ("seconds", "finished_at", "metrics")
                                                if c in got["status"].columns])
    for t, keys in (("subtitles", ["video_id"]), ("captions", ["video_id"]),
                    ("status", ["stage", "video_id"])):
        got[t] = got[t].sort_values(keys, kind="stable").reset_index(drop=True)
    return got


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "caption.json"
    write_source(path, 40)
    return path


@pytest.fixture(scope="module")
def whole(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("whole") / "run"
    subs, caps = caption_run(None, out, config(source), llm=QuickLLM(), progress=False,
                             window=10_000)
    return {"tables": tables(out), "subs": subs, "caps": caps}


@pytest.fixture(params=[3, 5])
def shards(request: pytest.FixtureRequest) -> BatchConfig:
    """Each test twice: shards of 3 videos (windows of 7 take two shards), and of 5."""
    return BatchConfig(shard_size=request.param)


class Counting(QuickLLM):
    """QuickLLM that notes, at each request, how many videos have captions committed."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.seen: list[int] = []

    def chat(self, messages: list[dict[str, str]], gen: Any) -> str:
        from tests.support.stages import committed

        self.seen.append(committed(self.out, "subtitles"))
        return super().chat(messages, gen)


@pytest.mark.slow
def test_windows_give_the_tables_and_counts_of_one_window(source: Path, whole: dict[str, Any],
                                                          tmp_path: Path,
                                                          shards: BatchConfig) -> None:
    out = tmp_path / "run"
    llm = Counting(out)
    subs, caps = caption_run(None, out, config(source), llm=llm, progress=False,
                             window=7, batching=shards)
    rd = RunDir(out, create=False)
    assert rd.shard_size == shards.shard_size and rd.shard_count() > 2
    # a window at a time: captioning began before the last shards had subtitles
    assert llm.seen[0] < 40 and llm.seen[-1] == 40
    got = tables(out)
    for name, want in whole["tables"].items():
        pd.testing.assert_frame_equal(got[name], want, obj=name)
    for a, b in ((subs, whole["subs"]), (caps, whole["caps"])):
        assert (a.done, a.skipped, len(a.failed), a.failed_before) == \
            (b.done, b.skipped, len(b.failed), b.failed_before)
    assert subs.done == 39 and [vid for vid, _ in subs.failed] == [list(
        json.loads(source.read_text()))[5]]  # the broken video: reported, skipped
    again_subs, again_caps = caption_run(None, out, config(source), llm=QuickLLM(),
                                         progress=False, window=7)
    assert (again_subs.done, again_caps.done, again_caps.skipped) == (0, 0, 39)
    for name, want in whole["tables"].items():
        pd.testing.assert_frame_equal(tables(out)[name], want, obj=name)
    assert not (out / "work").exists() or not any((out / "work").rglob("*.parquet"))


@pytest.mark.slow
def test_a_run_stopped_mid_way_resumes_to_the_clean_tables(source: Path, whole: dict[str, Any],
                                                           tmp_path: Path,
                                                           shards: BatchConfig) -> None:
    out = tmp_path / "run"
    with pytest.raises(ServiceUnavailable):  # down in the third window
        caption_run(None, out, config(source), llm=QuickLLM(down_after=30), progress=False,
                    window=7, batching=shards)
    rd = RunDir(out, create=False)
    done_before = sum(r.status == "ok" for r in status_records(rd, "caption"))
    assert 0 < done_before < 39
    subs, caps = caption_run(None, out, config(source), llm=QuickLLM(), progress=False,
                             window=7)
    assert caps.done == 39 - done_before and caps.skipped == done_before
    got = tables(out)
    for name, want in whole["tables"].items():
        pd.testing.assert_frame_equal(got[name], want, obj=name)
    assert not got["captions"].duplicated(["video_id", "start", "end", "text"]).any()


def test_ids_and_store_let_go_before_the_merge_come_back(source: Path, tmp_path: Path) -> None:
    """A second pass (corrupt parts found by the merge) lists the videos again from the
    source, whose store was closed: same ids, same rows, nothing converted again."""
    from howtocap.caption.run import _items_and_source

    rd = RunDir(tmp_path / "run", shard_size=4)
    videos, src = _items_and_source(None, rd, config(source), progress=False)
    assert src is not None
    videos.record(rd)
    first = [it.video_id for w in videos.windows(rd, 9) for it in w]
    assert first == list(json.loads(source.read_text()))  # numbered in the source's order
    rows = src.get(first[3], frame=True)
    cached = sorted((rd.cache_dir / "subtitles").iterdir())
    src.close()
    assert src._store is None  # and _Videos holds no ids: it reads them a window at a time
    assert [it.video_id for w in videos.windows(rd, 9) for it in w] == first
    pd.testing.assert_frame_equal(src.get(first[3], frame=True), rows)
    assert sorted((rd.cache_dir / "subtitles").iterdir()) == cached
