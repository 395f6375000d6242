"""Batched commits: a run directory written before batches (a part and a status JSON per
video) is read and resumed; the newest manifest wins across batches (--retry-failed, forget,
--redo); the streamed merge equals the in-memory one over batches and old parts together.
SIGKILL tests: tests/test_runners.py (between a batch's tables and its manifest; two
processes), tests/test_storage.py and tests/test_caption_pipeline.py (the real CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.engine.core import (
    Batching,
    SettingsChanged,
    prepare_stages,
    run_stage,
    stage_fingerprint,
)
from howtocap.engine.fingerprint import config_id
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import BaseStage, StageOutput, VideoInput
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import safe_name
from howtocap.io.inputs import VideoItem


class Lines(BaseStage):
    """Three subtitle-like rows per video (so ``merge_streaming`` applies); fails for the
    ids in ``fail`` (not a setting: a retry may succeed); ``offset`` is a setting."""

    name = "lines"
    writes = ("subtitles",)

    def __init__(self, fail: set[str] | None = None, offset: float = 0.0) -> None:
        self.fail = fail or set()
        self.offset = offset

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "offset": self.offset}

    def process(self, video: VideoInput) -> StageOutput:
        if video.video_id in self.fail:
            raise InputError(video.video_id, "scripted failure")
        return StageOutput({"subtitles": rows(video.video_id, self.offset)})


def rows(vid: str, offset: float = 0.0) -> pd.DataFrame:
    n = int(vid.split("_")[1])
    return pd.DataFrame({"video_id": [vid] * 3, "start": [2.0, 0.0, 1.0],  # not sorted
                         "end": [3.0, 1.0, 2.0],
                         "text": [f"{vid} c {n + offset}", f"{vid} a", f"{vid} b"],
                         "source": ["vtt"] * 3})


ITEMS = [VideoItem(f"v_{i:02d}", None) for i in range(10)]


def write_old_layout(root: Path, ok: list[str], failed: list[str]) -> None:
    """What the code before batches left: parts/<table>/<video>.parquet,
    parts/status/<stage>/<video>.json (the record's fields then) and the stage's
    fingerprint."""
    fp = stage_fingerprint(Lines())
    cid = config_id(fp)
    (root / "parts" / "fingerprints").mkdir(parents=True)
    (root / "parts" / "fingerprints" / "lines.json").write_text(
        json.dumps({"config_id": cid, "fingerprint": fp}))
    for vid in ok:
        part = root / "parts" / "subtitles" / f"{safe_name(vid)}.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        rows(vid).assign(config_id=cid).to_parquet(part, index=False)
    for vid, status in [(v, "ok") for v in ok] + [(v, "error") for v in failed]:
        rec = {"video_id": vid, "stage": "lines", "status": status,
               "message": "" if status == "ok" else f"{vid}: scripted failure",
               "seconds": 0.5, "finished_at": 1.0, "warnings": 0,
               "cause": "" if status == "ok" else "bad input", "attempts": 1,
               "config_id": cid, "metrics": {}}
        path = root / "parts" / "status" / "lines" / f"{safe_name(vid)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))


def test_an_old_per_video_run_directory_is_read_and_resumed(tmp_path: Path) -> None:
    old_ok, old_failed = [f"v_{i:02d}" for i in range(5)], ["v_05"]
    write_old_layout(tmp_path / "run", old_ok, old_failed)
    rd = RunDir(tmp_path / "run")
    assert rd.has_results("lines") and rd.is_done("lines", "v_03", "subtitles")
    assert len(rd.read_part("subtitles", "v_03")) == 3
    calls: list[str] = []

    class Counting(Lines):
        def process(self, video: VideoInput) -> StageOutput:
            calls.append(video.video_id)
            return super().process(video)

    s = run_stage(rd, ITEMS, Counting(), progress=False, batching=Batching(3))
    # the old results count as done, its failure stays failed; the rest is done in batches
    assert (s.skipped, s.failed_before, s.done) == (5, 1, 4)
    assert sorted(calls) == [f"v_{i:02d}" for i in range(6, 10)]
    assert len(list(rd.batch_dir("lines").glob("*.parquet"))) == 2  # 4 videos, batches of 3
    merged = rd.merge("subtitles")
    assert sorted(merged["video_id"].unique()) == [v.video_id for v in ITEMS if
                                                   v.video_id != "v_05"]
    status = rd.status_table()
    assert len(status) == 10 and list(status["status"]).count("error") == 1
    # --retry-failed: the batch's row supersedes the old per-video failure
    s = run_stage(rd, ITEMS, Counting(), progress=False, retry_failed=True)
    assert (s.done, s.skipped, calls[-1]) == (1, 9, "v_05")
    rec = rd.status("lines", "v_05")
    assert rec is not None and rec.status == "ok" and rec.attempts == 2 and rec.batch
    clean = RunDir(tmp_path / "clean")
    run_stage(clean, ITEMS, Lines(), progress=False)
    pd.testing.assert_frame_equal(rd.merge("subtitles"), clean.merge("subtitles"))
    want = pd.read_parquet(clean.table_path("subtitles"))
    assert rd.merge_streaming("subtitles") == len(want)  # old parts and batches, k-way
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), want)


def test_newest_manifest_wins_across_batches(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import howtocap.engine.merge as merge_mod

    monkeypatch.setattr(merge_mod, "STREAM_ROWS", 2)  # a video's rows span record batches
    rd = RunDir(tmp_path / "run")
    s = run_stage(rd, ITEMS, Lines(fail={"v_01", "v_07"}), progress=False, batching=Batching(3))
    assert s.done == 8 and len(s.failed) == 2
    assert len(list(rd.batch_dir("lines").glob("*.parquet"))) == 4  # 3 + 3 + 3 + 1
    # a plain re-run leaves the failures alone; --retry-failed tries them in a new batch
    s = run_stage(rd, ITEMS, Lines(), progress=False, batching=Batching(3))
    assert (s.done, s.failed_before) == (0, 2)
    s = run_stage(rd, ITEMS, Lines(fail={"v_07"}), progress=False, batching=Batching(3),
                  retry_failed=True, max_attempts=3)
    assert s.done == 1 and [v for v, _ in s.failed] == ["v_07"]
    assert [rd.status("lines", v).attempts for v in ("v_01", "v_07")] == [2, 2]
    assert "v_07" not in set(rd.merge("subtitles")["video_id"])
    s = run_stage(rd, ITEMS, Lines(fail={"v_07"}), progress=False, retry_failed=True,
                  max_attempts=2)
    assert (s.done, s.gave_up) == (0, 1)  # failed twice: left alone
    # forget: one manifest takes a result back; its rows leave the merge, it is redone
    rd.forget("lines", ["v_04"])
    assert "v_04" not in set(rd.merge("subtitles")["video_id"])
    s = run_stage(rd, ITEMS, Lines(), progress=False)
    assert s.done == 1 and rd.status("lines", "v_04").status == "ok"
    want = pd.concat([rows(v.video_id) for v in ITEMS if v.video_id != "v_07"])
    got = rd.merge("subtitles")
    assert len(got) == len(want) and not got.duplicated(["video_id", "start"]).any()
    got = pd.read_parquet(rd.table_path("subtitles"))
    assert rd.merge_streaming("subtitles", batch_rows=5) == len(got)  # k-way, small writes
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), got)
    # other settings: refused, then --redo clears every batch and recomputes
    with pytest.raises(SettingsChanged):
        run_stage(rd, ITEMS, Lines(offset=10.0), progress=False)
    prepare_stages(rd, [Lines(offset=10.0)], redo=True)
    assert not list(rd.batch_dir("lines").glob("*.parquet"))
    s = run_stage(rd, ITEMS, Lines(offset=10.0), progress=False, batching=Batching(4))
    assert s.done == 10
    texts = set(rd.merge("subtitles")["text"])
    assert "v_03 c 13.0" in texts and "v_03 c 3" not in texts


def test_orphan_table_files_are_ignored_and_swept_only_when_their_writer_is_dead(
        tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    run_stage(rd, ITEMS[:4], Lines(), progress=False)
    live = rd.batch_part_path("subtitles", rd.new_batch_id("lines"))  # this process: alive
    dead = rd.batch_part_path("subtitles", "batch-00000000000000000001-"
                                           f"{live.stem.split('-', 2)[2].split('~')[0]}~"
                                           f"{2**22 + 7}")
    for p in (live, dead):
        rows("v_09").to_parquet(p, index=False)
    assert "v_09" not in set(rd.merge("subtitles")["video_id"])  # no manifest: not merged
    assert rd.sweep_orphans() == 1 and live.exists() and not dead.exists()


def test_batching_takes_the_defaults_for_what_is_not_given_and_refuses_nonsense() -> None:
    assert Batching.of() == Batching(1000, 60.0)
    assert Batching.of(7) == Batching(7, 60.0) and Batching.of(None, 0) == Batching(1000, 0.0)
    with pytest.raises(HowtocapError, match="--batch-size must be >= 1"):
        Batching.of(0)
    with pytest.raises(HowtocapError, match="--batch-seconds >= 0"):
        Batching(5, -1.0)


def test_batch_seconds_commits_a_batch_that_is_not_full(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    run_stage(rd, ITEMS[:4], Lines(), progress=False, batching=Batching(1000, 0))
    assert len(list(rd.batch_dir("lines").glob("*.parquet"))) == 4  # every result at once


def test_the_streamed_merge_opens_a_bounded_number_of_files_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More batch files than ``MERGE_FAN_IN``: merged in levels, never more than that many
    read at once (the old merge opened every batch file of the table together), and the
    same rows in the same order as the in-memory merge, old per-video parts included."""
    import howtocap.engine.merge as merge_mod

    monkeypatch.setattr(merge_mod, "MERGE_FAN_IN", 3)
    monkeypatch.setattr(merge_mod, "STREAM_ROWS", 2)
    write_old_layout(tmp_path / "run", ["v_00", "v_01", "v_02", "v_03"], [])
    rd = RunDir(tmp_path / "run")
    many = [VideoItem(f"v_{i:02d}", None) for i in range(23)]
    run_stage(rd, many, Lines(fail={"v_09"}), progress=False, batching=Batching(2))
    rd.forget("lines", ["v_01", "v_12"])  # a per-video part and a batch's video
    assert len(list(rd.batch_dir("lines").glob("*.parquet"))) == 11
    open_now, most = [0], [0]
    groups = merge_mod._chunks

    def counted(rd: RunDir, *args: Any, **kwargs: Any) -> Any:
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])
        try:
            yield from groups(rd, *args, **kwargs)
        finally:
            open_now[0] -= 1

    monkeypatch.setattr(merge_mod, "_chunks", counted)
    rd.merge("subtitles")
    want = pd.read_parquet(rd.table_path("subtitles"))
    assert rd.merge_streaming("subtitles", batch_rows=4) == len(want)
    assert 1 < most[0] <= 3 and open_now[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), want)
    ids = set(want["video_id"])
    assert "v_00" in ids and not ids & {"v_01", "v_09", "v_12"} and len(ids) == 20
    assert not list((rd.cache_dir).glob(".merge-*"))  # the levels' files are gone


def test_level_files_are_streams_of_small_record_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last level of a merge has every row of the table open at once: its files are
    IPC streams (no footer of every row group) of record batches of at most ``STREAM_ROWS``
    rows (a stream decodes one), compressed; the merged table is ``merge``'s."""
    import pyarrow as pa

    import howtocap.engine.merge as merge_mod

    monkeypatch.setattr(merge_mod, "MERGE_FAN_IN", 3)
    monkeypatch.setattr(merge_mod, "STREAM_ROWS", 2)
    monkeypatch.setattr(merge_mod, "PART_ROW_GROUP", 2)
    rd = RunDir(tmp_path / "run")
    run_stage(rd, [VideoItem(f"v_{i:02d}", None) for i in range(23)], Lines(), progress=False,
              batching=Batching(2))
    rd.merge("subtitles")
    want = pd.read_parquet(rd.table_path("subtitles"))
    levels: list[list[int]] = []  # per level file: its record batches' sizes
    real = merge_mod._merge_into

    def seen(rd: RunDir, sink: Any, *args: Any, **kwargs: Any) -> int:
        n = real(rd, sink, *args, **kwargs)
        if ".merge-" in str(sink):
            with pa.ipc.open_stream(pa.OSFile(str(sink))) as reader:
                levels.append([b.num_rows for b in reader])
            assert Path(sink).read_bytes()[:4] == b"\xff\xff\xff\xff"  # an IPC stream
        return n

    monkeypatch.setattr(merge_mod, "_merge_into", seen)
    assert rd.merge_streaming("subtitles", batch_rows=8) == len(want)
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), want)
    assert len(levels) > 3 and max(max(sizes) for sizes in levels) == 2, levels
    assert sum(map(sum, levels)) > len(want)  # two levels: every row is in each


class Scores(BaseStage):
    """align_scores-like rows: the schema's columns and extras it does not name (a float,
    NaN in one video: its chunk goes through pandas, the others through Arrow, and a bool),
    unsorted within each video."""

    name = "scores"
    writes = ("align_scores",)

    def process(self, video: VideoInput) -> StageOutput:
        n = int(video.video_id.split("_")[1])
        df = pd.DataFrame({"video_id": [video.video_id] * 3, "start": [2.0, 0.0, 2.0],
                           "end": [3.0, 1.0, 3.0], "text": ["c", "a", "b"],
                           "orig_start": [2.0, 0.0, 2.0], "orig_end": [3.0, 1.0, 3.0],
                           "offset": [0.0] * 3, "score": [0.1 * n, 0.2, 0.3],
                           "kept": [True] * 3, "encoders": ["e"] * 3, "source": ["llm"] * 3,
                           "block": [0, 0, 1], "model": ["m"] * 3,
                           "null_z": [float("nan") if n == 7 else 0.5, n, 1.5],
                           "outside": [False, n % 3 == 0, False]})
        return StageOutput({"align_scores": df})


def test_batch_files_hold_small_row_groups_and_a_merge_with_extra_columns_equals_merge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge stream decodes a whole row group, so batch files and merge levels are
    written in row groups of ``PART_ROW_GROUP`` rows; a table with columns its schema does
    not name is merged in Arrow after its first chunk: both give ``merge``'s rows, in its
    order, with its dtypes."""
    import pyarrow.parquet as pq

    import howtocap.engine.merge as merge_mod

    monkeypatch.setattr(merge_mod, "PART_ROW_GROUP", 4)
    monkeypatch.setattr(merge_mod, "MERGE_FAN_IN", 3)
    monkeypatch.setattr(merge_mod, "STREAM_ROWS", 2)
    rd = RunDir(tmp_path / "run")
    many = [VideoItem(f"v_{i:02d}", None) for i in range(20)]
    run_stage(rd, many, Scores(), progress=False, batching=Batching(5))
    files = sorted(rd.part_dir("align_scores").glob("*.parquet"))
    assert len(files) == 4
    assert all(pq.ParquetFile(f).metadata.num_row_groups == 4 for f in files)  # 15 rows
    rd.merge("align_scores")  # written as one frame: what the streamed merge must equal
    want = pd.read_parquet(rd.table_path("align_scores"))
    assert rd.merge_streaming("align_scores", batch_rows=4) == len(want) == 60
    got = pd.read_parquet(rd.table_path("align_scores"))
    pd.testing.assert_frame_equal(got, want)
    assert got["null_z"].isna().sum() == 1 and got["outside"].dtype == bool


def test_status_equals_the_per_video_truth_with_retries_failures_and_forgets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` (column-wise over manifests) against a per-video replay of every record
    committed: retries supersede failures, forgotten videos are pending, old per-video
    records count until a manifest names their video, a corrupt manifest is dropped (with
    a warning) and its videos fall back to their older records."""
    import random

    from howtocap.atomic import CorruptPartWarning
    from howtocap.engine.graph import StageGraph
    from howtocap.engine.records import FORGOTTEN, StatusRecord
    from howtocap.engine.stage import CAUSES
    from howtocap.engine.status import status_of

    rng = random.Random(7)
    ids = [f"v{rng.getrandbits(32):08x}_{i}" for i in range(400)]
    rd = RunDir(tmp_path / "run")
    rd.record_videos(VideoItem(v, None) for v in ids)
    legacy = [StatusRecord(v, "lines", rng.choice(["ok", "error"]), cause=rng.choice(CAUSES))
              for v in ids[:60]]  # an older run's per-video records
    for rec in legacy:
        rd.write_status(rec)
    commits: list[list[StatusRecord]] = []  # in manifest order
    attempts: dict[str, int] = {r.video_id: 1 for r in legacy}
    for _ in range(12):  # rounds of batches over random subsets: retries, new failures
        recs = []
        for vid in rng.sample(ids, rng.randint(20, 90)):
            ok = rng.random() < 0.7
            attempts[vid] = attempts.get(vid, 0) + 1
            recs.append(StatusRecord(vid, "lines", "ok" if ok else "error",
                                     cause="" if ok else rng.choice([*CAUSES, ""]),
                                     attempts=attempts[vid], seconds=0.25,
                                     warnings=int(rng.random() < 0.2)))
        rd.commit_batch("lines", ["subtitles"], recs, {})
        commits.append(recs)
    gone = rng.sample(sorted(attempts), 15)
    rd.forget("lines", gone)
    commits.append([StatusRecord(v, "lines", FORGOTTEN) for v in sorted(set(gone))])

    def replay(skip: int | None = None) -> dict[str, StatusRecord]:
        newest = {r.video_id: r for r in legacy}
        for i, recs in enumerate(commits):
            if i != skip:
                newest.update({r.video_id: r for r in recs})
        return {v: r for v, r in newest.items() if r.status != FORGOTTEN}

    def expected(live: dict[str, StatusRecord]) -> dict[str, Any]:
        bad = sorted((r for r in live.values() if r.status != "ok"), key=lambda r: r.video_id)
        causes: dict[str, list[str]] = {}
        tries: dict[str, int] = {}
        for r in bad:
            causes.setdefault(r.cause or "internal", []).append(r.video_id)
            tries[str(r.attempts)] = tries.get(str(r.attempts), 0) + 1
        done = sum(r.status == "ok" for r in live.values())
        return {"done": done, "failed": len(bad), "pending": len(ids) - len(live),
                "warned": sum(r.status == "ok" and r.warnings > 0 for r in live.values()),
                "failures": {c: {"count": len(causes[c]), "examples": causes[c][:3]}
                             for c in CAUSES if c in causes},
                "failed_attempts": dict(sorted(tries.items())),
                "video_seconds": round(sum(r.seconds for r in live.values()), 3)}

    def answer() -> dict[str, Any]:
        (stage,) = status_of(rd.root, StageGraph([Lines]))["stages"]
        return {k: stage[k] for k in ("done", "failed", "pending", "warned", "failures",
                                      "failed_attempts", "video_seconds")}

    truth = replay()
    assert answer() == expected(truth)
    import howtocap.engine.merge as merge_mod

    monkeypatch.setattr(merge_mod, "MERGE_FAN_IN", 3)  # 13 manifests and the old records
    monkeypatch.setattr(merge_mod, "STREAM_ROWS", 7)
    monkeypatch.setattr("howtocap.engine.rundir.STATUS_ROWS", 50)
    table = rd.status_table()  # streamed: a k-way merge of the manifests, in levels
    assert list(table["video_id"]) == sorted(truth)
    assert [(r.status, r.attempts, r.cause, r.warnings) for r in
            table.itertuples()] == [(truth[v].status, truth[v].attempts, truth[v].cause,
                                     truth[v].warnings) for v in sorted(truth)]
    assert not list(rd.cache_dir.glob(".newest-*"))  # the levels' files are gone
    per_video = {r.video_id: r.status for r in RunDir(rd.root).status_records("lines")}
    assert per_video == {v: r.status for v, r in truth.items()}  # the per-video reader agrees
    # a corrupt manifest (the 6th batch): dropped, its videos back to their older records
    manifests = sorted(rd.batch_dir("lines").glob("*.parquet"))
    manifests[5].write_bytes(manifests[5].read_bytes()[:-40])
    with pytest.warns(CorruptPartWarning):
        got = answer()
    assert not manifests[5].exists()
    assert got == expected(replay(skip=5)) != expected(truth)


class SomeEmpty(Lines):
    """``Lines`` whose videos in ``empty`` have no rows at all (every caption rejected, say)."""

    name = "lines"

    def __init__(self, empty: set[str]) -> None:
        super().__init__()
        self.empty = empty

    def process(self, video: VideoInput) -> StageOutput:
        if video.video_id in self.empty:
            return StageOutput({"subtitles": rows(video.video_id).iloc[:0]})
        return super().process(video)


def test_a_batch_whose_videos_have_no_rows_merges(tmp_path: Path) -> None:
    """A batch file of 0 rows (its text columns have no Arrow type of their own) beside batches
    with rows: both merges keep every row and do not fail on the empty file."""
    rd = RunDir(tmp_path / "run")
    s = run_stage(rd, ITEMS, SomeEmpty({"v_00", "v_05"}), progress=False, batching=Batching(1))
    assert s.done == 10
    rd.merge("subtitles")
    got = pd.read_parquet(rd.table_path("subtitles"))
    assert len(got) == 8 * 3 and {"v_00", "v_05"}.isdisjoint(got["video_id"])
    assert rd.merge_streaming("subtitles", batch_rows=4) == len(got)
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), got)


@pytest.mark.parametrize(("collide", "spill"), [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_the_merge_keeps_each_videos_newest_ok_rows_whatever_their_hashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collide: bool, spill: bool) -> None:
    """The merge leaves out a batch's videos whose record there is not live (a failure, a
    later record elsewhere or later in the same manifest, forgotten), telling records of one
    video apart by their ids read back: with every id of one hash (``collide``), a merge
    that took equal hashes for one video would drop other videos' rows. With ``spill``, the
    records' hashes go to the spill folder a few at a time (a million-video merge), and
    the folder is gone after."""
    import howtocap.engine.merge as merge_mod
    import howtocap.engine.records as records_mod
    import howtocap.hashing as hashing_mod
    from howtocap.engine.records import StatusRecord

    if spill:
        monkeypatch.setattr(hashing_mod, "SAME_HASH_ROWS", 3)
        written: list[Path] = []
        write = hashing_mod.SameHashes._write

        def spy(self: Any) -> None:
            write(self)
            written.extend(self.spill.iterdir())

        monkeypatch.setattr(hashing_mod.SameHashes, "_write", spy)
    if collide:  # records.id_hashes: the merge's and the stage index's hashes alike
        monkeypatch.setattr(records_mod, "hash", lambda s: 5, raising=False)
    monkeypatch.setattr(merge_mod, "MANIFESTS_AT_ONCE", 2)
    rd = RunDir(tmp_path / "run")
    truth: dict[str, pd.DataFrame] = {}

    def batch(recs: list[tuple[str, str]], offset: float) -> None:
        ok = [v for v, s in recs if s == "ok"]
        tables = {"subtitles": pd.concat([rows(v, offset) for v in dict.fromkeys(ok)])} \
            if ok else {}
        rd.commit_batch("lines", ["subtitles"], [StatusRecord(v, "lines", s)
                                                 for v, s in recs], tables)
        for v, s in recs:  # the last record of a video in the manifest is its newest
            if s == "ok":
                truth[v] = rows(v, offset)
            else:
                truth.pop(v, None)

    batch([("v_00", "ok"), ("v_01", "ok"), ("v_02", "error"), ("v_03", "ok")], 0.0)
    batch([("v_01", "ok"), ("v_02", "ok"), ("v_04", "ok"), ("v_05", "error")], 1.0)
    batch([("v_03", "error"), ("v_06", "ok"), ("v_06", "error"), ("v_07", "error"),
           ("v_07", "ok")], 2.0)  # v_06 fails after its ok, v_07 is ok after its failure
    batch([("v_08", "ok"), ("v_09", "ok")], 3.0)
    rd.forget("lines", ["v_08"])
    truth.pop("v_08")
    want = pd.concat([truth[v] for v in sorted(truth)]).sort_values(
        ["video_id", "start"]).reset_index(drop=True)
    assert rd.merge_streaming("subtitles") == len(want)
    got = pd.read_parquet(rd.table_path("subtitles"))
    assert sorted(set(got["video_id"])) == ["v_00", "v_01", "v_02", "v_04", "v_07", "v_09"]
    pd.testing.assert_frame_equal(got[want.columns.tolist()], want, check_dtype=False)
    rd.merge("subtitles")  # the in-memory merge: the same table
    pd.testing.assert_frame_equal(pd.read_parquet(rd.table_path("subtitles")), got)
    if spill:
        assert written and not (rd.cache_dir / "spill").exists()


def test_a_claimed_batchs_inputs_are_located_as_one_video_at_a_time_locates_them(
        tmp_path: Path) -> None:
    """``live_batches`` (a claimed batch's inputs at once, from the stage indexes this process
    holds) gives each video the batch ``_live_batch`` gives it alone, with failures, retries,
    forgotten videos and an older run's per-video records in the index."""
    import random

    from howtocap.engine.records import StatusRecord

    rng = random.Random(3)
    ids = [f"v{rng.getrandbits(32):08x}_{i}" for i in range(300)]
    rd = RunDir(tmp_path / "run")
    rd.record_videos(VideoItem(v, None) for v in ids)
    for v in ids[:40]:
        rd.write_status(StatusRecord(v, "lines", rng.choice(["ok", "error"])))
    for _ in range(8):
        recs = [StatusRecord(v, "lines", "ok" if rng.random() < 0.7 else "error")
                for v in rng.sample(ids, 60)]
        frames = [rows(f"v_{i}") for i, r in enumerate(recs) if r.status == "ok"]
        rd.commit_batch("lines", ["subtitles"], recs,
                        {"subtitles": pd.concat(frames) if frames else rows("v_0").iloc[:0]})
    rd.forget("lines", rng.sample(ids, 30))
    one_by_one = [rd._live_batch("subtitles", v) for v in ids]  # noqa: SLF001
    assert rd._indexes  # noqa: SLF001 - the vectorised path has an index to read
    assert {b is None for b in one_by_one} == {True, False}
    assert rd.live_batches("subtitles", ids) == one_by_one
    shuffled = rng.sample(ids, len(ids))
    assert rd.live_batches("subtitles", shuffled) == [rd._live_batch("subtitles", v)  # noqa: SLF001
                                                      for v in shuffled]


@pytest.mark.parametrize("chunks", [1, 7])
def test_last_per_key_is_each_ids_last_row_in_row_order(chunks: int) -> None:
    """The newest record of each video (what status, the merge and status.parquet keep):
    against a dict of last positions, on ids repeated at random, plain and chunked."""
    import numpy as np
    import pyarrow as pa

    from howtocap.engine.records import last_per_key

    rng = np.random.default_rng(3)
    ids = [f"v{int(i):05d}" for i in rng.integers(0, 4000, 20_000)]
    want = sorted({v: i for i, v in enumerate(ids)}.values())
    parts = np.array_split(np.arange(len(ids)), chunks)
    keys = pa.chunked_array([pa.array([ids[i] for i in p], pa.string()) for p in parts])
    got = last_per_key(keys if chunks > 1 else keys.combine_chunks())
    assert got.tolist() == want
    assert last_per_key(pa.array([], pa.string())).tolist() == []


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_arrow_batch_file_is_grouped_by_video_in_id_order(tmp_path: Path,
                                                              shuffle: bool) -> None:
    """A batch's Arrow table is written with its videos in id order, each video's rows in
    their own order: as given when its ids are sorted already (the engine sorts its videos
    before it builds the table), sorted (stably) when they are not."""
    import random

    import pyarrow.parquet as pq

    from howtocap.engine.records import StatusRecord
    from howtocap.schemas import rows as make_rows
    from howtocap.schemas import rows_to_arrow

    vids = [f"v{i:03d}" for i in range(40)]
    if shuffle:
        random.Random(1).shuffle(vids)
    parts = [make_rows("subtitles", 3, video_id=v, start=[2.0, 1.0, 3.0], end=[3.0, 2.0, 4.0],
                       text=[f"{v} b", f"{v} a", f"{v} c"], source="asr", config_id="")
             for v in vids]
    rd = RunDir(tmp_path / "run")
    bid = rd.commit_batch("subtitles", ("subtitles",),
                          [StatusRecord(v, "subtitles", "ok") for v in vids],
                          {"subtitles": rows_to_arrow("subtitles", parts)})
    got = pq.read_table(rd.batch_part_path("subtitles", bid)).to_pandas()
    assert got["video_id"].tolist() == [v for v in sorted(vids) for _ in range(3)]
    assert got["text"].tolist() == [f"{v} {k}" for v in sorted(vids) for k in "bac"]


def test_plain_rows_of_a_batch_equal_its_frame_and_share_repeated_strings(
        tmp_path: Path) -> None:
    """``read_rows`` decodes a batch file once: every column equals ``read_part``'s frame,
    and a repeated id or source is one Python object (a decoded file is four columns of
    ~40 rows a video), while free text and columns with nulls are decoded row by row."""
    from howtocap.engine.records import StatusRecord

    rd = RunDir(tmp_path / "run")
    ids = ["v_01", "v_02", "v_03"]
    frames = {v: rows(v) for v in ids}
    frames["v_02"]["source"] = [None, "vtt", "asr"]  # a null: decoded as it is
    rd.commit_batch("lines", ["subtitles"], [StatusRecord(v, "lines", "ok") for v in ids],
                    {"subtitles": pd.concat(frames.values())})
    got = {v: rd.read_rows("subtitles", v) for v in ids}
    for v in ids:
        want = rd.read_part("subtitles", v)
        for c in ("video_id", "start", "end", "text", "source"):
            assert list(got[v][c]) == [None if x != x else x for x in want[c]], (v, c)
    assert got["v_01"]["video_id"][0] is got["v_01"]["video_id"][2]
    assert got["v_01"]["text"][0] is not got["v_03"]["text"][0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_videos_recorded_in_spilled_sorted_runs_equal_one_fold_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Past one chunk of items, ``record_videos`` sorts each chunk into a file and merges the
    files with the table so far as streams: the table equals the one fold of everything in
    memory (the last row of an id wins, a new empty path keeps the recorded one), in id
    order, and the sorted runs are gone afterwards."""
    import random

    import pyarrow.parquet as pq

    import howtocap.engine.rundir as rundir_mod

    rng = random.Random(seed)
    ids = [f"v{rng.randrange(60):02d}" for _ in range(130)]  # repeats, within and across

    def item(v: str) -> VideoItem:
        return VideoItem(v, rng.choice(["", f"/a/{v}.mp4", f"/b/{v}.mp4"]) or None,
                         rng.choice(["", f"/s/{v}.vtt"]) or None)

    first = [item(v) for v in ids[:50]]
    then = [item(v) for v in ids[50:]]
    tables = []
    # one fold in memory; spilled runs merged at once; merged three at a time, in levels
    for k, (chunk, step, fan_in) in enumerate(((10**6, 10**6, 16), (7, 3, 16), (7, 3, 3))):
        monkeypatch.setattr(rundir_mod, "VIDEO_CHUNK", chunk)
        monkeypatch.setattr(rundir_mod, "VIDEO_STEP", step)
        monkeypatch.setattr(rundir_mod.merging, "MERGE_FAN_IN", fan_in)
        rd = RunDir(tmp_path / f"run-{k}")
        rd.record_videos(iter(first))
        n = rd.record_videos(iter(then))
        got = pq.read_table(rd.table_path("videos")).to_pandas()
        assert n == len(got) == len(set(ids))
        assert got["video_id"].tolist() == sorted(set(ids))
        assert not (rd.spill_dir() / "videos").exists()
        tables.append(got)
    pd.testing.assert_frame_equal(tables[0], tables[1])
    pd.testing.assert_frame_equal(tables[0], tables[2])
    last = {it.video_id: it for it in first + then}
    for row in tables[1].itertuples():
        mine = str(last[row.video_id].video_path or "")
        assert row.video_path == mine or (not mine and row.video_path), row
