"""Frame captions as labels (Ventura et al.): captioners, CLIPScore top-K selection, the stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from howtocap.errors import HowtocapError
from howtocap.framecaps.config import FrameCapsConfig
from howtocap.framecaps.label import clipscore, create_captioner, select_captions
from howtocap.framecaps.run import framecaps_run
from howtocap.io.video import segment_times
from howtocap.samples import DEFAULT_STEPS, make_narrated_video


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_clipscore_is_weighted_clipped_cosine() -> None:
    img = unit(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    txt = unit(np.array([[1.0, 0.0], [0.0, -1.0], [1.0, 0.0]]))
    np.testing.assert_allclose(clipscore(img, txt), [2.5, 0.0, 2.5 / np.sqrt(2)])


def test_top_k_per_captioner_is_distinct_and_best() -> None:
    rng = np.random.default_rng(0)
    frames = unit(rng.normal(size=(6, 8)))
    caps = {"a": ["x", "x", "y", "z", "w", "v"], "b": ["p", "q", "r", "s", "t", "u"]}
    emb = {"a": unit(frames + rng.normal(scale=0.1, size=frames.shape)),
           "b": unit(rng.normal(size=(6, 8)))}
    emb["a"][1] = frames[1]  # the duplicate "x" scores highest: it must count once
    df = select_captions("v", 30.0, segment_times(0.0, 30.0, 6), caps, frames, emb,
                         FrameCapsConfig(frames=6, top_k=2))
    assert len(df) == 12 and set(df["start"]) == {0.0} and set(df["end"]) == {30.0}
    for name, g in df.groupby("captioner"):
        kept = g[g["kept"]]
        assert len(kept) == 2 and kept["text"].str.lower().nunique() == 2, name
        best = g.groupby("text")["clipscore"].max().nlargest(2)
        assert set(kept["text"]) == set(best.index), name
        expected = clipscore(frames, emb[name])
        np.testing.assert_allclose(g["clipscore"], expected, rtol=1e-6)
    np.testing.assert_allclose(segment_times(0.0, 30.0, 6), [2.5, 7.5, 12.5, 17.5, 22.5, 27.5])


@pytest.mark.slow
def test_framecaps_run_with_embedded_and_hf_captioners(tmp_path: Path, tiny_blip: Path) -> None:
    videos = tmp_path / "videos"
    for i, steps in enumerate([DEFAULT_STEPS[:2], DEFAULT_STEPS[2:4]]):
        make_narrated_video(videos, f"v{i}", steps, seconds_per_step=3.0, fps=5, size=96,
                            audio=False, subtitles=None)
    (videos / "broken.mp4").write_bytes(b"not a video" * 50)
    out = tmp_path / "run"
    cfg = FrameCapsConfig(frames=4, top_k=2)
    summary = framecaps_run([videos], out, captioners=["default", f"hf:{tiny_blip}"], cfg=cfg,
                            progress=False)
    assert summary.done == 2 and [v for v, _ in summary.failed] == ["broken"]
    assert "broken.mp4" in summary.failed[0][1]
    df = pd.read_parquet(out / "framecaps")
    assert set(df["video_id"]) == {"v0", "v1"}
    counts = df.groupby(["video_id", "captioner"]).size()
    assert (counts == 4).all() and len(counts) == 4
    for key, g in df.groupby(["video_id", "captioner"]):
        # kept: the top_k distinct captions by CLIPScore, re-derived from the stored scores
        best = g.assign(low=g["text"].str.lower()).groupby("low")["clipscore"].max()
        want = set(best.nlargest(cfg.top_k).index)
        assert set(g.loc[g["kept"], "text"].str.lower()) == want, key
        assert g["kept"].sum() == len(want) == min(cfg.top_k, len(best)), key
    default = df[df["captioner"] == "default"]
    assert default["text"].str.startswith("a photo of a ").all()
    np.testing.assert_allclose(sorted(df[df["video_id"] == "v0"]["frame_time"].unique()),
                               segment_times(0.0, 6.0, 4), atol=1e-6)
    # a re-run resumes: nothing left to do but the broken video
    again = framecaps_run([videos], out, captioners=["default", f"hf:{tiny_blip}"], cfg=cfg,
                          progress=False)
    assert again.skipped == 2 and again.done == 0
    assert pd.read_parquet(out / "framecaps").equals(df)


def test_unknown_captioner_is_one_line() -> None:
    with pytest.raises(HowtocapError, match="unknown image captioner 'blip'; choose one of"):
        create_captioner("blip")


@pytest.mark.slow
def test_train_reads_framecaps_as_multi_caption_clips(tmp_path: Path) -> None:
    """A framecaps run trains directly: clips are whole videos, several kept captions each."""
    from howtocap.engine.rundir import RunDir
    from howtocap.io.pairs import read_pairs
    from howtocap.train.api import train
    from tests.support.stages import write_rows
    from tests.support.tiny_models import TinyEncoder

    videos = tmp_path / "videos"
    rd = RunDir(tmp_path / "fc")
    rows = []
    for i, steps in enumerate([DEFAULT_STEPS[i:i + 1] for i in range(4)]):
        v = make_narrated_video(videos, f"v{i}", steps, seconds_per_step=2.0, fps=5, size=64,
                                audio=False, subtitles=None)
        rows += [{"video_id": v.video_id, "start": 0.0, "end": 2.0, "text": t,
                  "captioner": c, "frame_time": 1.0, "clipscore": 1.0, "kept": k}
                 for t, c, k in [(steps[0][2], "a", True), (f"frame {i}", "b", True),
                                 ("dropped caption", "b", False)]]
    from howtocap.io.inputs import resolve_inputs

    rd.record_videos(resolve_inputs([videos]))
    write_rows(rd, "framecaps", pd.DataFrame(rows))
    pairs = read_pairs(rd.root)
    assert len(pairs) == 8 and "dropped caption" not in set(pairs["text"])
    res = train(rd.root, out_dir=tmp_path / "ckpt", encoder=TinyEncoder(), epochs=2,
                batch_size=4, lr=3e-3, frames_per_clip=2, eval_fraction=0.25, progress=False)
    assert res.n_train_clips + res.n_eval_clips == 4  # 8 captions, 4 clips
    assert (tmp_path / "ckpt" / "ckpt" / "last.pt").exists()
