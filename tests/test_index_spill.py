"""A stage index whose older rows are moved to sorted files (issue #22: what a run holds does
not grow with its videos) answers every question as the index kept whole in memory does, and
leaves no file behind."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import howtocap.engine.records as records
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir


def _workload(rd: RunDir, seed: int) -> list[str]:
    """Batches of random videos, failures, retries, forgets, per-video records of an older
    run and a manifest with an older batch id read late: every way a video gets a newer row."""
    rng = random.Random(seed)
    ids = [f"v{i}" for i in range(120)]
    for vid in rng.sample(ids, 10):
        rd.write_status(StatusRecord(vid, "s", rng.choice(["ok", "error"]), config_id="c0"))
    for k in range(25):
        batch = sorted(rng.sample(ids, rng.randint(1, 15)))
        status = rng.choice(["ok", "ok", "error"])
        rd.commit_batch("s", ["t"], [StatusRecord(v, "s", status, config_id=f"c{k % 3}",
                                                  attempts=k % 4 + 1) for v in batch], {})
        if k % 7 == 3:
            rd.forget("s", rng.sample(batch, max(1, len(batch) // 3)))
        if k % 5 == 2:
            rd.records("s")  # folded part way, as a run's windows do
        if k == 20:
            rd.write_status(StatusRecord("late", "s", "ok", config_id="c0"))
    idx = rd._index("s")
    df = records._records_frame([StatusRecord(v, "s", "ok") for v in rng.sample(ids, 5)])
    idx.add("batch-00000000000000000001-other~1", df, ["t"])  # older id, read last
    return [*ids, "late", "nope"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spilled_index_answers_as_the_index_in_memory(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      seed: int) -> None:
    answers = []
    for spill_rows, fence in ((10**9, 1024), (7, 2), (1, 1)):
        monkeypatch.setattr(records, "SPILL_ROWS", spill_rows)
        monkeypatch.setattr(records, "FENCE", fence)
        rd = RunDir(tmp_path / f"run-{spill_rows}")
        ask = _workload(rd, seed)
        idx = rd._index("s")
        assert bool(idx._runs) == (spill_rows < 10**9)
        random.Random(seed).shuffle(ask)
        got = rd.newest_of("s", ask, ("status", "config_id", "attempts", "batch"))
        view = rd.records("s", refresh=False)
        nth = {b: k for k, b in enumerate(sorted(idx.batches))}  # batch ids hold the time
        got["batch"] = [nth.get(b, b) for b in got["batch"]]
        view["batch"] = [nth.get(b, b) for b in view["batch"]]
        answers.append((
            {k: list(v) for k, v in got.items()},
            view.sort_index(),
            [rd.status("s", v) for v in ask],  # one lookup at a time: the block path
            [rd.is_done("s", v) for v in ask],
            idx.count(),
        ))
        spilled = idx._spill_at
        assert (spilled is not None) == (spill_rows < 10**9)
        rd.drop_caches()
        assert spilled is None or not spilled.exists()
        again = RunDir(tmp_path / f"run-{spill_rows}", create=False)
        again.records("s")
        spilled = again._indexes["s"]._spill_at
        del again  # never closed: its files go with it
        gc.collect()
        assert spilled is None or not spilled.exists()
    first = answers[0]
    for other in answers[1:]:
        assert other[0] == first[0]
        pd.testing.assert_frame_equal(other[1], first[1])
        assert [r and (r.status, r.config_id, r.attempts) for r in other[2]] == \
            [r and (r.status, r.config_id, r.attempts) for r in first[2]]
        assert other[3:] == first[3:]


def test_spilled_rows_of_a_dead_process_go_and_a_live_ones_stay(tmp_path: Path) -> None:
    """A run killed mid-way leaves its spilled files; the next process on that host removes
    them, not those of a process still running."""
    from howtocap.atomic import HOST

    rd = RunDir(tmp_path / "run")
    root = rd.cache_dir / "spill"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    live = os.getppid()
    for name in (f"{HOST}~{dead}", f"{HOST}~{live}", f"otherhost~{dead}"):
        (root / name / "s-x").mkdir(parents=True)
        (root / name / "s-x" / "000000.rows").write_bytes(b"x")
    mine = rd.spill_dir()
    assert mine == root / f"{HOST}~{os.getpid()}"
    assert sorted(p.name for p in root.iterdir()) == sorted([f"{HOST}~{live}",
                                                            f"otherhost~{dead}"])
