"""The default filter on generated narrated videos with labelled chatter, through the real
pipeline (run directory, per-video stage, reduce step) and the embedded default encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.filter import DEFAULT_NULL_Z
from howtocap.align.run import align_run, read_aligned
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.samples import (
    CHATTER_IMAGE,
    CHATTER_LINES,
    DEFAULT_STEPS,
    ground_truth,
    make_narrated_video,
)
from tests.support.stages import write_rows


@pytest.fixture(scope="module")
def chatter_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """4 videos: every one of the 12 steps once, each video opened and closed by chatter (all 8
    chatter lines once). Two captions per segment, the short caption and the spoken sentence
    (an LLM often writes several), at the segment's start with an LLM-like ±2 s error."""
    from howtocap.encoders import create

    root = tmp_path_factory.mktemp("filter")
    rng = np.random.default_rng(0)
    videos = []
    for v in range(4):
        steps = DEFAULT_STEPS[3 * v:3 * v + 3]
        (n1, c1), (n2, c2) = CHATTER_LINES[2 * v], CHATTER_LINES[2 * v + 1]
        specs = [(CHATTER_IMAGE, n1, c1), *steps, (CHATTER_IMAGE, n2, c2)]
        videos.append(make_narrated_video(root / "videos", f"v{v}", specs, audio=False,
                                          subtitles=None, size=128, fps=5))
    truth = ground_truth(videos)
    truth = pd.concat([truth, truth.assign(caption=truth["narration"])], ignore_index=True)
    truth["cap_start"] = truth["start"] + rng.uniform(-2, 2, len(truth))
    rundir = RunDir(root / "run")
    rundir.record_videos([VideoItem(v.video_id, v.video_path) for v in videos])
    write_rows(rundir, "captions", pd.DataFrame({
        "video_id": truth["video_id"], "start": truth["cap_start"],
        "end": truth["cap_start"] + 8, "text": truth["caption"], "source": "llm", "block": 0,
        "model": "test"}))
    encoder = create("default", device="cpu")
    align_run(rundir, [], AlignConfig(), encoders=[encoder], progress=False)
    return {"rundir": rundir, "truth": truth, "encoder": encoder}


def _labelled(run: dict[str, Any]) -> pd.DataFrame:
    al = read_aligned(run["rundir"])
    kinds = run["truth"].set_index(["video_id", "caption"])["kind"]
    al["kind"] = [kinds[(v, t)] for v, t in zip(al["video_id"], al["text"], strict=True)]
    return al


@pytest.mark.slow
def test_generator_labels_chatter(chatter_run: dict[str, Any]) -> None:
    truth = chatter_run["truth"]
    assert truth["kind"].value_counts().to_dict() == {"step": 24, "chatter": 16}
    assert set(truth.loc[truth["kind"] == "chatter", "image"]) == {CHATTER_IMAGE}
    assert set(truth.loc[truth["kind"] == "chatter", "caption"]) == {
        t for line in CHATTER_LINES for t in line}


@pytest.mark.slow
def test_default_filter_keeps_steps_and_drops_chatter(chatter_run: dict[str, Any]) -> None:
    al = _labelled(chatter_run)
    assert len(al) == 40 and al["null_z"].notna().all()  # every caption was tested
    steps, chatter = al[al["kind"] == "step"], al[al["kind"] == "chatter"]
    kept_steps = float(steps["kept"].mean())
    dropped_chatter = 1.0 - float(chatter["kept"].mean())
    detail = al[["text", "kind", "score", "null_z", "kept"]].round(3).to_string()
    # The target, >= 90 % / >= 80 %, on videos the default's bar was not chosen on
    # (benchmarks/quality/bench_filter.py chose it on its seed-1 set): the null z bar plus the text
    # chatter test keep 24/24 steps and drop 14/16 chatter here (the old visual-only 1.5:
    # 23/24, 11/16). One caption is 4-6 %, so a change of two captions fails this.
    assert kept_steps >= 0.9, detail
    assert dropped_chatter >= 0.8, detail
    z = al["null_z"].to_numpy()
    is_step = (al["kind"] == "step").to_numpy()
    auc = float((z[is_step][:, None] > z[~is_step][None, :]).mean())
    assert auc >= 0.85, (auc, detail)
    cfg = chatter_run["rundir"].configs.read("align")
    assert cfg["filter"].startswith("default filter") and cfg["kept"] == int(al["kept"].sum())
    assert cfg["drop_chatter"] is True and cfg["chatter_dropped"] > 0
    html = (chatter_run["rundir"].root / "align_report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "default filter: null z" in html
    # the reference captions were drawn once and recorded with the run
    ref = chatter_run["rundir"].configs.read("align_reference")
    assert ref is not None and len(ref["captions"]) == 40 and len(ref["clip_videos"]) == 4
    assert al["z_text"].notna().all() and al["z_clip"].notna().all()


@pytest.mark.slow
def test_old_keep_all_and_explicit_modes_refilter_the_same_scores(
        chatter_run: dict[str, Any]) -> None:
    rundir: RunDir = chatter_run["rundir"]
    before = _labelled(chatter_run)
    s = align_run(rundir, [], AlignConfig(keep_all=True), encoders=[chatter_run["encoder"]],
                  progress=False)
    assert s.done == 0 and bool(read_aligned(rundir)["kept"].all())  # chatter survives
    s = align_run(rundir, [], AlignConfig(quantile=0.5), encoders=[chatter_run["encoder"]],
                  progress=False)
    after = read_aligned(rundir)
    assert s.done == 0 and int(after["kept"].sum()) == 20
    np.testing.assert_array_equal(after["score"], before["score"])
    assert after.loc[after["kept"], "score"].min() >= after.loc[~after["kept"], "score"].max()


@pytest.mark.slow
def test_video_file_is_real(chatter_run: dict[str, Any], tmp_path: Path) -> None:
    """The presenter segment really shows a different picture from the steps."""
    from howtocap.io.video import sample_frames

    path = chatter_run["rundir"].table("videos").set_index("video_id").loc["v0", "video_path"]
    chat, step = sample_frames(Path(path), [3.0, 9.0], size=64)
    assert np.abs(np.asarray(chat, dtype=float) - np.asarray(step, dtype=float)).mean() > 10


@pytest.mark.slow
def test_chatter_column_and_count_in_the_run(chatter_run: dict[str, Any]) -> None:
    """The default's text test through the pipeline: the verdict is a column, every flagged
    caption is dropped, and config + report count them."""
    from howtocap.caption.chatter import is_chatter

    rundir: RunDir = chatter_run["rundir"]
    align_run(rundir, [], AlignConfig(), encoders=[chatter_run["encoder"]], progress=False)
    al = _labelled(chatter_run)
    assert al["chatter"].dtype == bool
    assert al["chatter"].tolist() == [is_chatter(t) for t in al["text"]]
    flagged = al["chatter"].to_numpy()
    assert not flagged[(al["kind"] == "step").to_numpy()].any()  # no step looks like chatter
    assert 8 <= int(flagged.sum()) < int((al["kind"] == "chatter").sum())  # not all of it
    assert not al.loc[flagged, "kept"].any()
    cfg = rundir.configs.read("align")
    assert cfg["drop_chatter"] is True and cfg["chatter_dropped"] == int(flagged.sum())
    bar = cfg["null_z"] if cfg["null_z"] is not None else DEFAULT_NULL_Z
    above = int((flagged & (al["null_z"] >= bar).to_numpy()).sum())
    assert cfg["chatter_dropped_only_by_text"] == above
    assert cfg["filter"].endswith("and channel chatter dropped")
    html = (rundir.root / "align_report.html").read_text()
    assert f"Dropped: channel chatter ({int(flagged.sum())})" in html


@pytest.mark.slow
def test_keep_chatter_and_threshold_refilter_without_rescoring(
        chatter_run: dict[str, Any]) -> None:
    rundir: RunDir = chatter_run["rundir"]
    enc = [chatter_run["encoder"]]
    align_run(rundir, [], AlignConfig(), encoders=enc, progress=False)
    default = _labelled(chatter_run)
    part = rundir.shard_path("align_scores", 0)  # the shard file holding the scores
    before = part.stat().st_mtime_ns
    s = align_run(rundir, [], AlignConfig(drop_chatter=False), encoders=enc, progress=False)
    assert s.done == 0 and part.stat().st_mtime_ns == before  # re-filtered, not rescored
    keep = read_aligned(rundir)
    np.testing.assert_array_equal(keep["score"], default["score"])
    passes = ~(keep["null_z"] < DEFAULT_NULL_Z).to_numpy()
    np.testing.assert_array_equal(keep["kept"].to_numpy(), passes)  # the visual test alone
    np.testing.assert_array_equal(default["kept"].to_numpy(),
                                  passes & ~default["chatter"].to_numpy())
    cfg = rundir.configs.read("align")
    assert cfg["drop_chatter"] is False and cfg["chatter_dropped"] == 0
    assert "chatter" not in cfg["filter"]
    # an explicit threshold means exactly "score >= X": flagged chatter above it stays
    thr = float(keep.loc[keep["chatter"], "score"].max())  # the best-scoring chatter
    align_run(rundir, [], AlignConfig(threshold=thr), encoders=enc, progress=False)
    exp = read_aligned(rundir)
    np.testing.assert_array_equal(exp["kept"].to_numpy(), (exp["score"] >= thr).to_numpy())
    assert bool((exp["chatter"] & exp["kept"]).any())
    assert rundir.configs.read("align")["chatter_dropped"] == 0


@pytest.mark.slow
def test_cli_keep_chatter_reaches_the_config(chatter_run: dict[str, Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``align --keep-chatter`` and ``run --keep-chatter`` hand ``drop_chatter=False`` on;
    scoring is replaced by the reduce step over the fixture's scores."""
    import typer
    from typer.testing import CliRunner

    import howtocap.align.run as pipeline_align
    import howtocap.pipeline.run as pipeline_run
    from howtocap.cli import add_commands
    from howtocap.cli import app as main_app
    from howtocap.engine.core import StageSummary

    rundir: RunDir = chatter_run["rundir"]
    seen: list[AlignConfig] = []

    def fake_align_run(rd: RunDir, names: list[str], cfg: AlignConfig,
                       **_: Any) -> StageSummary:
        seen.append(cfg)
        pipeline_align.finish_align(rd, cfg, [chatter_run["encoder"].name])
        return StageSummary("align")

    monkeypatch.setattr(pipeline_align, "align_run", fake_align_run)
    app = typer.Typer()
    add_commands(app, "align")
    app.command("noop")(lambda: None)
    root = str(rundir.root)
    res = CliRunner().invoke(app, ["align", root, "--keep-chatter", "--quiet"])
    assert res.exit_code == 0, res.output
    assert seen[-1].drop_chatter is False
    assert rundir.configs.read("align")["drop_chatter"] is False
    assert "dropped as channel chatter" not in res.output
    res = CliRunner().invoke(app, ["align", root, "--quiet"])
    assert res.exit_code == 0, res.output
    n = rundir.configs.read("align")["chatter_dropped"]
    assert seen[-1].drop_chatter is True and n > 0
    assert f"; {n} dropped as channel chatter" in " ".join(res.output.split())
    # `run` shares the flag with the LLM stage's chatter filter
    runs: list[dict[str, Any]] = []

    def fake_pipeline(inputs: Any, out: Any, **kw: Any) -> list[StageSummary]:
        runs.append(kw)
        return []

    monkeypatch.setattr(pipeline_run, "run_pipeline", fake_pipeline)
    for flags, drop in (([], True), (["--keep-chatter"], False)):
        res = CliRunner().invoke(main_app, ["run", "--out", root, "--quiet", *flags])
        assert res.exit_code == 0, res.output
        assert runs[-1]["align"].drop_chatter is drop
        assert runs[-1]["caption"].caption.drop_chatter is drop


def test_row_medians_equal_numpys_bit_for_bit() -> None:
    """The null z's medians (one selection per row, in place) equal ``np.median``'s exactly,
    for odd and even rows, with ties, down to one column."""
    from howtocap.align.filter import _row_medians

    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 10, 11, 7000, 7001):
        for ties in (False, True):
            a = rng.standard_normal((6, n)) * 0.02
            if ties:
                a = np.round(a, 2)
            want = np.median(a, axis=1)
            got = _row_medians(a.copy())
            assert np.array_equal(want, got), (n, ties)
