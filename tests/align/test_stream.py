"""align at scale (issue #22): the driver reads the captions and the scores a shard file, and a
window of whole videos, at a time. Tiny windows (many of them) and many shards must give what
one window of the whole table gives, and what the whole-table code gave before: the reference
draw, the fingerprints, the threshold, ``aligned/``, ``config/align.json`` and the report's
numbers; also when videos appended later make the shards not in id order."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import howtocap.align.report as report
import howtocap.align.stream as stream
from howtocap.align.config import AlignConfig
from howtocap.align.filter import apply_filter
from howtocap.align.run import (
    ORDER,
    SCORES,
    _caption_pool,
    _Captions,
    _fingerprint_stream,
    _inputs_dir,
    _threshold,
    align_run,
    draw_reference,
    finish_align,
    read_aligned,
)
from howtocap.atomic import atomic_write_parquet
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform, kept_captions
from tests.support.align import Stub, make_run, recorded_fingerprints, whole_fingerprints


def _old_draw(captions: pd.DataFrame, files: list[str], cfg: AlignConfig
              ) -> tuple[list[list[str]], list[str]]:
    """The whole-table draw ``draw_reference`` made before it was streamed."""
    rng = np.random.default_rng(cfg.seed)
    pool = captions[["video_id", "text"]].astype(str).drop_duplicates()
    pool = pool.sort_values(["video_id", "text"]).reset_index(drop=True)
    pick = np.sort(rng.choice(len(pool), size=min(cfg.reference_captions, len(pool)),
                              replace=False))
    ref = pool.iloc[pick].reset_index(drop=True)
    chosen = [files[i] for i in np.sort(rng.choice(
        len(files), size=min(cfg.reference_videos, len(files)), replace=False))]
    return ref.to_numpy().tolist(), chosen


def _report_rows(path: Path) -> list[tuple[str, str]]:
    return re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", path.read_text())


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("stream") / "template").root


@pytest.fixture(scope="module")
def appended(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards not in id order: 7 videos appended (to shard 2 and a new shard 3) sort before
    the first 24."""
    return make_run(tmp_path_factory.mktemp("stream") / "appended", late=7).root


@pytest.fixture(params=["made", "appended"])
def template(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


def _unrendered(fig: Any) -> str:
    """Stands in for ``report._png``: the figure is drawn but not rasterised (most of a
    report's time); the tests using it check the report's numbers, and
    ``test_report_samples_its_plots_and_keeps_its_numbers`` its plots."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return ""


@pytest.fixture(scope="module", params=["made", "appended"])
def scored(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each template run scored once by ``align_run`` (its default config: scoring does not
    depend on the filter settings), shared by the filter cases that copy it."""
    rd = _copy(request.getfixturevalue(request.param),
               tmp_path_factory.mktemp("scored") / request.param)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "_png", _unrendered)
        align_run(rd, [], AlignConfig(), encoders=[Stub()], progress=False)
    return rd.root


def _whole(rd: RunDir, table: str, by: Sequence[str] = ("video_id",)) -> pd.DataFrame:
    """The table in id order (stable: each video's rows in their order; ``by``: sorted by
    more), as one sorted file held it."""
    df = pd.read_parquet(rd.root / table)
    return df.sort_values(list(by), kind="stable").reset_index(drop=True)


def _copy(made: Path, dest: Path) -> RunDir:
    import shutil

    shutil.copytree(made, dest)
    return RunDir(dest)


def test_windows_hold_whole_videos_and_cover_the_table(made: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rd = _copy(made, tmp_path / "run")
    caps = _Captions(rd)
    whole = pd.read_parquet(rd.root / "captions")
    assert sorted(caps.files) == [0, 1, 2]
    assert all(stream.sorted_by_video(path) for path in caps.files.values())
    for rows in (1, 3, 7, 10_000):
        monkeypatch.setattr(stream, "ROWS", rows)
        wins = list(caps.windows())
        if rows < 10:
            assert len(wins) > 5
        seen: set[str] = set()
        for w in wins:  # a video never spans two windows
            ids = set(w["video_id"])
            assert not ids & seen
            seen |= ids
        pd.testing.assert_frame_equal(pd.concat(wins, ignore_index=True), whole)
    # a table not sorted by video (copied in by hand) is read whole, as one window
    shuffled = tmp_path / "shuffled.parquet"
    whole.sample(frac=1.0, random_state=1).to_parquet(shuffled, index=False)
    assert not stream.sorted_by_video(shuffled)
    assert len(list(stream.video_windows(shuffled, rows=2))) == 1


@pytest.mark.parametrize("rows", [1, 4, 50, 100_000])
def test_reference_draw_equals_the_whole_table_draw(template: Path, tmp_path: Path, rows: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "ROWS", rows)
    rd = _copy(template, tmp_path / "run")
    caps = _Captions(rd)
    whole = _whole(rd, "captions")
    files = sorted(whole["video_id"].unique().tolist())[::2]
    for cfg in (AlignConfig(), AlignConfig(reference_captions=5, reference_videos=3, seed=4),
                AlignConfig(reference_captions=10_000, reference_videos=100)):
        ref, chosen = draw_reference(rd, lambda: caps.windows(["video_id", "text"]),
                                     lambda: files, cfg, redo=True)
        want = _old_draw(whole, files, cfg)
        assert (ref.to_numpy().tolist(), chosen) == want
        assert len(ref) == min(cfg.reference_captions, len(_caption_pool(whole)))
        rec = json.loads((rd.root / "config" / "align_reference.json").read_text())
        assert (rec["captions"], rec["clip_videos"]) == want


def test_fingerprints_in_windows_equal_the_whole_table(made: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rd = _copy(made, tmp_path / "run")
    caps = _Captions(rd)
    kept = kept_captions(pd.read_parquet(rd.root / "captions"))
    items = [VideoItem(f"v{i:03d}", Path(f"/x/v{i:03d}.mp4")) for i in range(30)][::-1]
    items += [VideoItem("a-first", None), VideoItem("zz-last", None)]
    want = whole_fingerprints(kept, items)
    for rows in (1, 5, 100_000):
        monkeypatch.setattr(stream, "ROWS", rows)
        got = list(_fingerprint_stream(caps.kept(), items))
        assert [v for v, _ in got] == sorted(want)  # id order, every item once
        assert dict(got) == want


@pytest.mark.slow
def test_recorded_fingerprints_are_the_whole_tables_per_shard(appended: Path,
                                                             tmp_path: Path) -> None:
    """align records each kept video's fingerprint, a file per shard (each in id order),
    equal to the whole-table ones also when the shards are not in id order."""
    import pyarrow.parquet as pq

    rd = _copy(appended, tmp_path / "run")
    align_run(rd, [], AlignConfig(), encoders=[Stub()], progress=False)
    items = list(pd.read_parquet(rd.table_path("videos")).itertuples(index=False))
    items = [VideoItem(it.video_id, Path(it.video_path)) for it in items]
    want = whole_fingerprints(kept_captions(_whole(rd, "captions")), items)
    assert recorded_fingerprints(rd) == want and len(want) == 31
    files = sorted(_inputs_dir(rd).glob("shard-*.parquet"))
    assert [f.name for f in files] == [f"shard-0000{k}.parquet" for k in range(4)]
    for f in files:
        ids = pq.read_table(f).column("video_id").to_pylist()
        assert ids == sorted(ids) and set(rd.shard_of(ids).tolist()) == {int(f.stem[-1])}


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    AlignConfig(quantile=0.3), AlignConfig(quantile=0.3, sample_videos=5),
    AlignConfig(keep_top=17), AlignConfig(keep_top=17, sample_videos=4, seed=3),
    AlignConfig(keep_top=17, sample_videos=0), AlignConfig(threshold=0.05),
    AlignConfig(keep_all=True), AlignConfig(), AlignConfig(null_z=0.2, drop_chatter=False)])
def test_streamed_filter_equals_the_whole_table_filter(scored: Path, tmp_path: Path,
                                                       cfg: AlignConfig,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """aligned/, align.json's counts and the report's numbers: tiny windows (many row
    groups) give exactly what one window gives, and what ``apply_filter`` gives on the
    whole table in id order (the code before streaming); a run whose shards are in id
    order row for row, one whose shards are not in each video's rows."""
    monkeypatch.setattr(report, "_png", _unrendered)
    rd = _copy(scored, tmp_path / "run")
    ordered = scored.name == "made"
    enc = Stub()
    # the whole table as the code before merged it: sorted by video, start, end, text
    merged = conform(_whole(rd, SCORES, ORDER), "aligned")
    out = merged.pop("outside").fillna(False).to_numpy(dtype=bool)
    want, want_thr = apply_filter(merged[~out].reset_index(drop=True), cfg)
    atomic_write_parquet(want, tmp_path / "before.parquet")  # as the code before wrote it
    want = pd.read_parquet(tmp_path / "before.parquet")
    assert out.any() and len(want) > 50  # the run has outside captions and many windows
    results = []
    for rows in (1, 3, 1_000_000):
        monkeypatch.setattr(stream, "ROWS", rows)
        al, thr = finish_align(rd, cfg, [enc.name])
        assert thr == want_thr
        assert sorted(p.name for p in (rd.root / "aligned").iterdir()) == sorted(
            p.name for p in (rd.root / SCORES).iterdir())  # a file per shard of scores
        if not ordered:
            assert not al["video_id"].is_monotonic_increasing
            al = al.sort_values("video_id", kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(al, want)
        config = json.loads((rd.root / "config" / "align.json").read_text())
        assert (config["pairs"], config["kept"], config["outside_video"]) == (
            len(want), int(want["kept"].sum()), int(out.sum()))
        results.append((config, _report_rows(rd.root / "align_report.html")))
    assert all(r == results[-1] for r in results)


@pytest.mark.slow
def test_scoring_in_windows_of_videos_equals_one_pass(made: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The scoring stage taken a few videos at a time (``run.WINDOW``: what the engine keeps
    per video is a window's) scores every video once and writes what one pass writes."""
    import howtocap.align.run as align_module

    enc = Stub()
    one = _copy(made, tmp_path / "one")
    whole = align_run(one, [], AlignConfig(), encoders=[enc], progress=False)
    calls: list[int] = []
    real = align_module.run_stage

    def counted(rd: RunDir, items: Sequence[VideoItem], *a: object, **kw: object) -> object:
        calls.append(len(items))
        return real(rd, items, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(align_module, "WINDOW", 5)
    monkeypatch.setattr(align_module, "run_stage", counted)
    many = _copy(made, tmp_path / "many")
    summary = align_run(many, [], AlignConfig(), encoders=[enc], progress=False)
    assert len(calls) > 2 and max(calls) == 5 and sum(calls) == whole.done
    assert (summary.done, len(summary.failed)) == (whole.done, len(whole.failed))
    pd.testing.assert_frame_equal(read_aligned(many), read_aligned(one))
    again = align_run(many, [], AlignConfig(), encoders=[enc], progress=False)
    assert again.done == 0 and again.skipped == whole.done  # resumed: nothing redone


@pytest.mark.slow
def test_threshold_needs_only_the_drawn_videos(template: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampled estimate draws among the videos counted in a first pass (the same rng
    call on the same count, the videos ranked by id as the whole table's ``groupby`` ranks
    them, whatever the order of the shards) and pools only those videos' scores."""
    rd = _copy(template, tmp_path / "run")
    align_run(rd, [], AlignConfig(), encoders=[Stub()], progress=False)
    files = rd.table_files(SCORES)
    merged = conform(rd.table(SCORES), "aligned")
    merged = merged[~merged["outside"].fillna(False).to_numpy(dtype=bool)]
    picked = set()
    for seed in range(6):
        cfg = AlignConfig(quantile=0.4, sample_videos=3, seed=seed)
        monkeypatch.setattr(stream, "ROWS", 2)
        thr = apply_filter(merged, cfg)[1]
        assert _threshold(rd, files, cfg) == thr
        picked.add(thr)
    assert len(picked) > 3  # the draws differ: a wrong rank would show


@pytest.mark.slow
def test_changed_fingerprint_rescores_that_video_alone(appended: Path,
                                                       tmp_path: Path) -> None:
    """The recorded fingerprints say which videos changed: a video whose recorded one no
    longer matches (as after a re-caption) is rescored alone, in its shard, and the rest
    resumes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rd = _copy(appended, tmp_path / "run")
    enc = Stub()
    align_run(rd, [], AlignConfig(), encoders=[enc], progress=False)
    fps = recorded_fingerprints(rd)
    before = read_aligned(rd)
    for vid in ("v005", "a006"):  # shard 0, and the appended shard 3
        path = _inputs_dir(rd) / f"shard-{int(rd.shard_of([vid])[0]):05d}.parquet"
        t = pq.read_table(path).to_pydict()
        t["fingerprint"] = ["0" * 16 if v == vid else f for v, f in
                            zip(t["video_id"], t["fingerprint"], strict=True)]
        pq.write_table(pa.table(t), path)
        s = align_run(rd, [], AlignConfig(), encoders=[enc], progress=False)
        assert s.done == 1 and s.skipped == 30  # that video alone is rescored
        assert recorded_fingerprints(rd) == fps
        pd.testing.assert_frame_equal(read_aligned(rd), before)


@pytest.mark.slow
def test_report_samples_its_plots_and_keeps_its_numbers(
        made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd = _copy(made, tmp_path / "run")
    align_run(rd, [], AlignConfig(), encoders=[Stub()], progress=False)
    page = rd.root / "align_report.html"
    full = _report_rows(page)
    assert "random sample" not in page.read_text()
    monkeypatch.setattr(report, "PLOT_ROWS", 10)
    monkeypatch.setattr(stream, "ROWS", 4)
    finish_align(rd, AlignConfig(), [Stub.name], table=False)
    text = page.read_text()
    assert _report_rows(page) == full
    assert "uniform random sample of 10 of the" in text
    assert text.count("data:image/png;base64,") == 4
