"""``--where`` over a run's rows and their windows' signals: the overlap-weighted means against
a brute-force average, the rows export and train keep, the signals in the clips' JSON, and
one line for a bad expression."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io.export import export_run
from howtocap.io.inputs import VideoItem
from howtocap.io.where import PRESETS, where_rows, window_signals
from tests.support.stages import write_rows


def test_window_means_equal_a_fine_grid_average() -> None:
    """Random shots and windows: each window's mean is the average over 1-ms steps."""
    rng = np.random.default_rng(3)
    sig, rows = [], []
    for v in ("a", "b", "c"):
        cuts = np.sort(rng.choice(np.arange(1, 60), 6, replace=False)).astype(float)
        edges = np.r_[0.0, cuts, 60.0]
        for s, e in zip(edges[:-1], edges[1:], strict=True):
            if rng.random() < 0.8:  # a gap now and then: no signal there
                sig.append({"video_id": v, "start": s, "end": e,
                            "motion": float(rng.random()), "static": bool(rng.random() < 0.5)})
        for _ in range(8):
            s = float(rng.integers(0, 55))
            rows.append({"video_id": v, "start": s, "end": s + float(rng.integers(1, 20))})
    rows.append({"video_id": "none", "start": 0.0, "end": 5.0})
    sdf, rdf = pd.DataFrame(sig), pd.DataFrame(rows)
    got = window_signals(rdf, sdf)
    for i, r in rdf.iterrows():
        t = np.arange(r["start"], r["end"], 0.001) + 0.0005
        own = sdf[sdf["video_id"] == r["video_id"]]
        j = np.searchsorted(own["start"].to_numpy(), t, side="right") - 1
        inside = (j >= 0) & (t < own["end"].to_numpy()[np.clip(j, 0, None)]) if len(own) \
            else np.zeros(len(t), bool)
        if not inside.any():
            assert np.isnan(got.loc[i, "motion"]) and pd.isna(got.loc[i, "static"])
            continue
        vals = own["motion"].to_numpy()[j[inside]]
        flags = own["static"].to_numpy()[j[inside]]
        assert got.loc[i, "motion"] == pytest.approx(vals.mean(), abs=1e-3)
        if abs(flags.mean() - 0.5) > 0.01:
            assert bool(got.loc[i, "static"]) == (flags.mean() >= 0.5)


def test_signal_rows_that_span_no_time_leave_every_window_unknown() -> None:
    """A user's signals table whose every row ends where it starts (or before): no window
    has a signal, and a condition on one keeps nothing (it used to index an empty array)."""
    sdf = pd.DataFrame({"video_id": ["a", "a"], "start": [3.0, 5.0], "end": [3.0, 4.0],
                        "motion": [0.5, 0.7], "static": [True, False]})
    rdf = pd.DataFrame({"video_id": ["a", "b"], "start": [0.0, 1.0], "end": [8.0, 2.0]})
    got = window_signals(rdf, sdf)
    assert got["motion"].isna().all() and got["static"].isna().all()


NO_AESTHETIC = {"aesthetic": float("nan"), "config_id": "c"}


def _ffmpeg_video(path: Path, seconds: int) -> Path:
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"testsrc=size=64x64:rate=10:duration={seconds}", "-pix_fmt", "yuv420p",
                    str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """Two 6-s videos, an aligned caption per 2 s, and signals: "a" is a still slide for
    its first 2.5 s, then moves; "b" moves throughout with a little text."""
    root = tmp_path_factory.mktemp("where")
    rd = RunDir(root / "run")
    rd.record_videos([VideoItem(v, _ffmpeg_video(root / f"{v}.mp4", 6)) for v in ("a", "b")])
    write_rows(rd, "aligned", pd.DataFrame([
        {"video_id": v, "start": float(t), "end": float(t + 2), "text": f"{v} at {t}",
         "orig_start": float(t), "orig_end": float(t + 2), "offset": 0.0, "score": 0.5,
         "kept": True, "encoders": "default", "source": "llm", "block": 0, "model": "m"}
        for v in ("a", "b") for t in (0, 2, 4)]))
    write_rows(rd, "signals", pd.DataFrame([
        {"video_id": "a", "start": 0.0, "end": 2.5, "motion": 0.0, "static": True,
         "text_area": 0.6, "face_area": 0.0, "brightness": 0.8, "sharpness": 0.01, **NO_AESTHETIC},
        {"video_id": "a", "start": 2.5, "end": 6.0, "motion": 0.08, "static": False,
         "text_area": 0.0, "face_area": 0.0, "brightness": 0.5, "sharpness": 0.01, **NO_AESTHETIC},
        {"video_id": "b", "start": 0.0, "end": 6.0, "motion": 0.05, "static": False,
         "text_area": 0.05, "face_area": 0.0, "brightness": 0.5, "sharpness": 0.01,
         **NO_AESTHETIC}]),
        stage="signals")
    return rd


def _starts(df: pd.DataFrame) -> set[tuple[str, float]]:
    return set(zip(df["video_id"], df["start"].astype(float), strict=True))


def test_export_keeps_the_rows_that_pass_and_carries_their_signals(run: RunDir,
                                                                    tmp_path: Path) -> None:
    path, n = export_run(run.root, fmt="csv", out=tmp_path / "kept.csv",
                         where="motion > 0.02 and text_area < 0.1")
    kept = pd.read_csv(path)
    # a's [2, 4) window is a quarter slide: motion 0.06, text 0.15 -> out; a's [0, 2) -> out
    assert _starts(kept) == {("a", 4.0), ("b", 0.0), ("b", 2.0), ("b", 4.0)} and n == 4
    assert kept.loc[kept["video_id"] == "a", "motion"].tolist() == pytest.approx([0.08])
    assert {"motion", "static", "text_area"} <= set(kept.columns)
    _, n_all = export_run(run.root, fmt="csv", out=tmp_path / "all.csv")
    slides = pd.read_csv(export_run(run.root, fmt="csv", out=tmp_path / "s.csv",
                                    where="static")[0])
    assert n_all == 6 and _starts(slides) == {("a", 0.0)}  # [2, 4): static 0.5 of 2 s
    every = pd.read_csv(tmp_path / "all.csv")
    kept = {p: len(where_rows(every, p, "x")) for p in PRESETS}  # each a valid condition
    assert kept == {"visible": 6, "no-slides": 5, "no-talking-head": 6, "footage": 5}


@pytest.mark.slow
def test_clips_json_carries_the_window_signals(run: RunDir, tmp_path: Path) -> None:
    from howtocap.clips.export import export_clips

    res = export_clips(run.root, tmp_path / "clips", where="video_id == 'a'", progress=False)
    with tarfile.open(res.out / res.shards[0]) as tar:
        metas = [json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                 if m.name.endswith(".json")]
    got = {m["window_start"]: m["signals"] for m in metas}
    assert sorted(got) == [0.0, 2.0, 4.0]
    assert got[0.0]["static"] is True and got[4.0]["motion"] == pytest.approx(0.08)
    assert got[2.0]["text_area"] == pytest.approx(0.15) and got[2.0]["static"] is False


@pytest.mark.slow
def test_train_takes_only_the_rows_that_pass(run: RunDir, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    import howtocap.train.api as api

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def loop(cfg: Any, enc: Any, train_clips: list[Any], eval_clips: list[Any],
             **_: Any) -> Any:
        seen["clips"] = {(c.video_id, c.start) for c in train_clips + eval_clips}
        raise Stop

    monkeypatch.setattr(api, "run", loop)
    with pytest.raises(Stop):
        api.train(run.root, out_dir=tmp_path / "t", where="not static", progress=False)
    assert seen["clips"] == {("a", 2.0), ("a", 4.0), ("b", 0.0), ("b", 2.0), ("b", 4.0)}


@pytest.mark.parametrize(("expr", "says"), [("motoin > 0.1", "no column 'motoin'"),
                                            ("motion >", "syntax error"),
                                            ("text", "is not a condition")])
def test_a_bad_where_is_one_line(run: RunDir, expr: str, says: str) -> None:
    with pytest.raises(HowtocapError, match=says):
        export_run(run.root, fmt="csv", where=expr)
    res = subprocess.run([sys.executable, "-m", "howtocap.cli", "export", str(run.root),
                          "--format", "csv", "--where", expr], capture_output=True, text=True)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and says in lines[0], res.stderr
    assert str(run.root) in lines[0]
