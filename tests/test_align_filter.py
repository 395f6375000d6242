"""The default filter on generated narrated videos with labelled chatter, through the real
pipeline (run directory, per-video stage, reduce step) and the embedded default encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.align import AlignConfig
from howtocap.io.inputs import VideoItem
from howtocap.pipeline.align import align_run, read_aligned
from howtocap.rundir import RunDir
from howtocap.samples import (
    CHATTER_IMAGE,
    CHATTER_LINES,
    DEFAULT_STEPS,
    ground_truth,
    make_narrated_video,
)


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
    for vid, g in truth.groupby("video_id"):
        rundir.write_part("captions", str(vid), pd.DataFrame({
            "video_id": vid, "start": g["cap_start"], "end": g["cap_start"] + 8,
            "text": g["caption"], "source": "llm", "block": 0, "model": "test"}))
    encoder = create("default", device="cpu")
    align_run(rundir, [], AlignConfig(), encoders=[encoder], progress=False)
    return {"rundir": rundir, "truth": truth, "encoder": encoder}


def _labelled(run: dict[str, Any]) -> pd.DataFrame:
    al = read_aligned(run["rundir"])
    kinds = run["truth"].set_index(["video_id", "caption"])["kind"]
    al["kind"] = [kinds[(v, t)] for v, t in zip(al["video_id"], al["text"], strict=True)]
    return al


def test_generator_labels_chatter(chatter_run: dict[str, Any]) -> None:
    truth = chatter_run["truth"]
    assert truth["kind"].value_counts().to_dict() == {"step": 24, "chatter": 16}
    assert set(truth.loc[truth["kind"] == "chatter", "image"]) == {CHATTER_IMAGE}
    assert set(truth.loc[truth["kind"] == "chatter", "caption"]) == {
        t for line in CHATTER_LINES for t in line}


def test_default_filter_keeps_steps_and_drops_chatter(chatter_run: dict[str, Any]) -> None:
    al = _labelled(chatter_run)
    assert len(al) == 40 and al["null_z"].notna().all()  # every caption was tested
    steps, chatter = al[al["kind"] == "step"], al[al["kind"] == "chatter"]
    kept_steps = float(steps["kept"].mean())
    dropped_chatter = 1.0 - float(chatter["kept"].mean())
    detail = al[["text", "kind", "score", "null_z", "kept"]].round(3).to_string()
    # The target is >= 90 % / >= 80 %; with the embedded encoder no setting of any
    # filter reaches both on the 10-video benchmark (benchmarks/results/filter.md: the default
    # keeps 82 % / drops 82 %). On 40 captions one caption is 4-6 %, so this checks a lower
    # level (the old default, keep all, drops 0 %) and that null_z ranks steps above chatter.
    assert kept_steps >= 0.8, detail
    assert dropped_chatter >= 0.6, detail
    z = al["null_z"].to_numpy()
    is_step = (al["kind"] == "step").to_numpy()
    auc = float((z[is_step][:, None] > z[~is_step][None, :]).mean())
    assert auc >= 0.85, (auc, detail)
    cfg = chatter_run["rundir"].read_config("align")
    assert cfg["filter"].startswith("default filter") and cfg["kept"] == int(al["kept"].sum())
    html = (chatter_run["rundir"].root / "align_report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "default filter: null z" in html
    # the reference captions were drawn once and recorded with the run
    ref = chatter_run["rundir"].read_config("align_reference")
    assert ref is not None and len(ref["captions"]) == 40 and len(ref["clip_videos"]) == 4
    assert al["z_text"].notna().all() and al["z_clip"].notna().all()


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


def test_video_file_is_real(chatter_run: dict[str, Any], tmp_path: Path) -> None:
    """The presenter segment really shows a different picture from the steps."""
    from howtocap.io.video import sample_frames

    path = chatter_run["rundir"].videos().set_index("video_id").loc["v0", "video_path"]
    chat, step = sample_frames(Path(path), [3.0, 9.0], size=64)
    assert np.abs(np.asarray(chat, dtype=float) - np.asarray(step, dtype=float)).mean() > 10
