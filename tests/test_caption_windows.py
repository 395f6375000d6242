"""A text-only caption run taken a window of videos at a time (issue #22: memory flat in the
number of videos) gives the tables of a run taken whole, resumes mid-way without duplicates,
and the stage index's incremental fold and hash lookups agree with pandas' whole-frame ones."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import howtocap.engine.records as records
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.run import CaptionRunConfig, caption_run
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.errors import ServiceUnavailable

REPLY_TIME = re.compile(r"^(\d+)s: ", re.M)
WORDS = ["crack", "the", "eggs", "into", "a", "bowl", "whisk", "until", "smooth", "heat",
         "pan", "pour", "flip", "serve", "salt"]


class QuickLLM:
    """Answers at once with one caption per block; ``down_after`` calls, it is 'down'."""

    name = "quick"

    def __init__(self, down_after: int | None = None) -> None:
        self.calls = 0
        self.down_after = down_after

    def chat(self, messages: list[dict[str, str]], gen: Any) -> str:
        self.calls += 1
        if self.down_after is not None and self.calls > self.down_after:
            raise ServiceUnavailable("the LLM server went away")
        m = REPLY_TIME.search(messages[-1]["content"])
        t = m.group(1) if m else "0"
        return f"{t}s: Do step {t} of the recipe."

    def chat_many(self, batch: list[list[dict[str, str]]], gen: Any) -> list[Any]:
        out: list[Any] = []
        for messages in batch:
            try:
                out.append(self.chat(messages, gen))
            except ServiceUnavailable as exc:
                out.append(exc)
        return out


def write_source(path: Path, n: int, seed: int = 3) -> list[str]:
    """``{video_id: {start, end, text}}`` with ids in no sorted order; one video has no
    lines at all (reported, not fatal)."""
    rng = random.Random(seed)
    ids = [f"{rng.getrandbits(32):08x}-{i}" for i in range(n)]
    data: dict[str, Any] = {}
    for k, vid in enumerate(ids):
        t, start, end, text = 0.0, [], [], []
        for _ in range(0 if k == 5 else rng.randint(4, 9)):
            d = rng.uniform(1.5, 4.0)
            start.append(round(t, 2))
            end.append(round(t + d, 2))
            text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10))))
            t += d + 0.5
        data[vid] = {"start": start, "end": end, "text": text}
    path.write_text(json.dumps(data))
    return ids


def tables(out: Path) -> dict[str, pd.DataFrame]:
    """The merged tables, timings left out of ``status`` (they differ run to run)."""
    got = {t: pd.read_parquet(out / f"{t}.parquet")
           for t in ("subtitles", "captions", "status", "videos")}
    got["status"] = got["status"].drop(columns=[c for c in ("seconds", "finished_at", "metrics")
                                                if c in got["status"].columns])
    return got


def config(src: Path) -> CaptionRunConfig:
    return CaptionRunConfig(subtitles=str(src), caption=CaptionConfig(reject_fillers=False))


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


@pytest.fixture(params=["memory", "spilled"])
def spill(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test twice: stage indexes kept in memory, and moved to files a few rows at a
    time (the newest of a video's rows then found across them, blocks of two read per
    lookup), with a store that finds a window's videos without its id hashes."""
    import howtocap.io.subtitle_dump as dump_mod

    if request.param == "spilled":
        monkeypatch.setattr(records, "SPILL_ROWS", 3)
        monkeypatch.setattr(records, "FENCE", 2)
        monkeypatch.setattr(dump_mod, "HASH_LOOKUP_VIDEOS", 10)
    return request.param == "spilled"


def test_windows_give_the_tables_and_counts_of_one_window(source: Path, whole: dict[str, Any],
                                                          tmp_path: Path, spill: bool) -> None:
    out = tmp_path / "run"
    subs, caps = caption_run(None, out, config(source), llm=QuickLLM(), progress=False,
                             window=7)
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
    assert not (out / "cache" / "spill").exists()  # spilled rows and their folders: gone


def test_a_run_stopped_mid_way_resumes_to_the_clean_tables(source: Path, whole: dict[str, Any],
                                                           tmp_path: Path, spill: bool) -> None:
    out = tmp_path / "run"
    with pytest.raises(ServiceUnavailable):  # down in the third window
        caption_run(None, out, config(source), llm=QuickLLM(down_after=30), progress=False,
                    window=7)
    rd = RunDir(out, create=False)
    done_before = sum(r.status == "ok" for r in rd.status_records("caption"))
    assert 0 < done_before < 39
    subs, caps = caption_run(None, out, config(source), llm=QuickLLM(), progress=False,
                             window=7)
    assert caps.done == 39 - done_before and caps.skipped == done_before
    got = tables(out)
    for name, want in whole["tables"].items():
        pd.testing.assert_frame_equal(got[name], want, obj=name)
    assert not got["captions"].duplicated(["video_id", "start", "end", "text"]).any()


def commit(rd: RunDir, stage: str, ids: list[str], status: str = "ok") -> None:
    rd.commit_batch(stage, ["t"], [StatusRecord(v, stage, status, config_id="c1")
                                   for v in ids], {})


def test_index_folded_batch_by_batch_equals_one_fold(tmp_path: Path, spill: bool) -> None:
    rd = RunDir(tmp_path / "run")
    rng = random.Random(0)
    ids = [f"v{i}" for i in range(300)]
    views = []
    truth: dict[str, str] = {}
    for k in range(12):  # own commits, each folded in as it comes, retries and forgets
        batch = rng.sample(ids, 40)
        status = "error" if k % 3 == 1 else "ok"
        commit(rd, "s", batch, status)
        truth.update(dict.fromkeys(batch, status))
        if k == 7:
            rd.forget("s", batch[:5])
            for vid in batch[:5]:
                del truth[vid]
        views.append(rd.records("s"))
    fresh = RunDir(tmp_path / "run", create=False).records("s")  # every manifest at once
    pd.testing.assert_frame_equal(views[-1], fresh)
    assert fresh["status"].astype(str).to_dict() == truth


def test_index_late_older_batch_takes_the_full_fold(tmp_path: Path, spill: bool) -> None:
    """A manifest with an older batch id read after newer ones (another host's clock) must
    not win over them."""
    rd = RunDir(tmp_path / "run")
    commit(rd, "s", ["a", "b"], "error")
    idx = rd._index("s")
    idx.view()
    newest = sorted(idx.batches)[-1]
    older = "batch-00000000000000000001-other~1"
    df = records._records_frame([StatusRecord("a", "s", "ok"), StatusRecord("c", "s", "ok")])
    idx.add(older, df, ["t"])
    view = idx.view()
    assert view.loc["a", "batch"] == newest and view.loc["a", "status"] == "error"
    assert view.loc["c", "status"] == "ok" and len(view) == 3


def test_find_matches_pandas_and_survives_hash_collisions(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         spill: bool) -> None:
    """Ids of equal hash are told apart by reading them back: a video the index lacks is
    not found through another id's hash, whether that id's ids are decoded or read again."""
    monkeypatch.setattr(records, "hash", lambda s: len(s), raising=False)  # many collide
    monkeypatch.setattr(records, "ID_CACHE_ROWS", 8)  # most hits read back from their file
    rd = RunDir(tmp_path / "run")
    for lo in range(0, 50, 10):
        commit(rd, "s", [f"v{i}" for i in range(lo, lo + 10)])
    idx = rd._index("s")
    ask = ["v3", "nope", "v49", "v0", "v3", "missing", "v5", "v99"]
    at, _ = idx.find(ask)
    view = idx.view()
    assert [v if a >= 0 else None for v, a in zip(idx.ids_at(at), at, strict=True)] == \
        ["v3", None, "v49", "v0", "v3", None, "v5", None]
    assert bool(idx._runs) == spill
    assert len(view) == 50 and set(view.index) == {f"v{i}" for i in range(50)}
    assert idx.lookup("v49") is not None and idx.lookup("v99") is None
    got = rd.newest_of("s", ask, ("status", "batch"))
    assert list(got["found"]) == [True, False, True, True, True, False, True, False]
    assert list(got["status"]) == ["ok", None, "ok", "ok", "ok", None, "ok", None]
    assert got["batch"][0] != got["batch"][2] and got["batch"][0] == got["batch"][6]


def test_index_keeps_the_newest_of_each_id_among_equal_hashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spill: bool) -> None:
    """Retries and forgets of ids sharing one hash: each id's newest row wins, the others'
    rows stay (a fold that took equal hashes for one video would drop them)."""
    monkeypatch.setattr(records, "hash", lambda s: 7, raising=False)  # every id collides
    monkeypatch.setattr(records, "ID_CACHE_ROWS", 2)
    rd = RunDir(tmp_path / "run")
    commit(rd, "s", ["a", "b", "c"], "error")
    commit(rd, "s", ["b"], "ok")
    rd.records("s")  # folded here, then again with what follows
    commit(rd, "s", ["c", "d"], "ok")
    rd.forget("s", ["a"])
    for fresh in (False, True):
        r = RunDir(tmp_path / "run", create=False) if fresh else rd
        view = r.records("s")
        assert view["status"].astype(str).to_dict() == {"b": "ok", "c": "ok", "d": "ok"}
        assert r.status("s", "a") is None and r.status("s", "b").status == "ok"
        assert [r.is_done("s", v) for v in "abcde"] == [False, True, True, True, False]
        assert r._index("s").count() == 3


def test_index_reads_older_per_video_records_under_the_manifests(tmp_path: Path,
                                                                spill: bool) -> None:
    """An older run's per-video records are the index's oldest rows: a manifest's row of the
    same video wins, a record written later in that layout is read again."""
    rd = RunDir(tmp_path / "run")
    rd.write_status(StatusRecord("old", "s", "ok", config_id="c0"))
    rd.write_status(StatusRecord("both", "s", "error", config_id="c0"))
    commit(rd, "s", ["both", "new"])
    view = rd.records("s")
    assert view["status"].astype(str).to_dict() == {"old": "ok", "both": "ok", "new": "ok"}
    assert view.loc["old", "batch"] == "" and view.loc["both", "batch"] != ""
    rd.write_status(StatusRecord("later", "s", "error", config_id="c0"))
    assert rd.status("s", "later").status == "error"
    assert rd.status("s", "old").config_id == "c0"
    assert rd._index("s").count() == 4


def test_ids_and_store_let_go_before_the_merge_come_back(source: Path, tmp_path: Path) -> None:
    """A second pass (corrupt parts found by the merge) lists the videos again from the
    source, whose store was closed: same ids, same rows, nothing converted again."""
    from howtocap.caption.run import _items_and_source

    rd = RunDir(tmp_path / "run")
    videos, src = _items_and_source(None, rd, config(source), progress=False)
    assert src is not None
    first = [it.video_id for w in videos.windows(9) for it in w]
    rows = src.get(first[3], frame=True)
    cached = sorted((rd.cache_dir / "subtitles").iterdir())
    src.close()
    assert src._store is None  # and _Videos holds no ids: it reads them a window at a time
    assert [it.video_id for w in videos.windows(9) for it in w] == first
    pd.testing.assert_frame_equal(src.get(first[3], frame=True), rows)
    assert sorted((rd.cache_dir / "subtitles").iterdir()) == cached
