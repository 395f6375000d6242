"""Filter & align on synthetic embeddings, where the right answer is known exactly."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from howtocap.align.config import AlignConfig
from howtocap.align.filter import (
    DEFAULT_NULL_Z,
    align_video,
    apply_filter,
    candidate_windows,
    choose_threshold,
    describe_filter,
    filter_mode,
    offset_grid,
    window_scores,
)
from howtocap.align.report import write_align_report
from howtocap.errors import HowtocapError
from howtocap.schemas import SCHEMAS
from tests.support.align import Frames, unit


def _loop_reference(emb: np.ndarray, text: np.ndarray, starts: np.ndarray, duration: float,
                    cfg: AlignConfig) -> np.ndarray:
    """Written from the documented definition, one caption and one offset at a time."""
    n = len(emb)
    extent = min(duration, n / cfg.fps) if duration > 0 else n / cfg.fps
    k = int(math.floor(cfg.offset_seconds / cfg.offset_step + 1e-9))
    out = np.zeros((len(starts), 2 * k + 1))
    for c, s in enumerate(starts):
        for j, step in enumerate(range(-k, k + 1)):
            if extent >= cfg.clip_seconds:
                a = min(max(s + step * cfg.offset_step, 0.0), extent - cfg.clip_seconds)
                b = a + cfg.clip_seconds
            else:
                a, b = 0.0, extent
            rows = [i for i in range(n) if a - 1e-9 <= (i + 0.5) / cfg.fps < b - 1e-9]
            if not rows:  # a window always covers the row its start falls in
                rows = [min(int(a * cfg.fps), n - 1)]
            mean = emb[rows].astype(np.float64).mean(axis=0)
            if cfg.renormalize:
                mean = mean / np.linalg.norm(mean)
            out[c, j] = float(text[c] @ mean)
    return out


@pytest.mark.parametrize("fps,renorm,duration", [(1.0, False, 0.0), (2.0, False, 17.3),
                                                  (1.0, True, 39.5), (0.5, False, 0.0)])
def test_window_scores_equal_loop_reference(fps: float, renorm: bool, duration: float) -> None:
    rng = np.random.default_rng(1)
    n, d = 40, 16
    emb = unit(rng.normal(size=(n, d))).astype(np.float16)
    starts = np.array([-3.0, 0.0, 0.4, 5.0, 12.5, 19.0, 33.0, 39.9, 55.0, 200.0])
    text = unit(rng.normal(size=(len(starts), d))).astype(np.float32)
    cfg = AlignConfig(fps=fps, renormalize=renorm)
    scores, offsets = window_scores(emb, text, starts, duration, cfg)
    assert offsets.tolist() == list(range(-10, 11))
    ref = _loop_reference(emb.astype(np.float64), text.astype(np.float64), starts, duration,
                          cfg)
    np.testing.assert_allclose(scores, ref, atol=1e-5)


def test_windows_are_clamped_at_both_borders() -> None:
    cfg = AlignConfig()
    ws, we, lo, hi, offsets = candidate_windows(np.array([0.0, 25.0, 12.0]), 30, 30.0, cfg)
    assert np.all(we - ws == 8.0)
    # caption at 0: every negative shift lands on [0, 8), positive shifts move right
    assert ws[0, :11].tolist() == [0.0] * 11
    assert ws[0, 11:].tolist() == [float(x) for x in range(1, 11)]
    # caption at 25: the last start that fits is 30 - 8 = 22
    assert ws[1].max() == 22.0 and ws[1, 0] == 15.0
    # unclamped windows cover exactly the 8 rows of [a, a+8)
    assert lo[2].tolist() == [float(x) for x in range(2, 23)]
    assert np.all(hi - lo == 8)


def test_video_shorter_than_one_window_uses_whole_video() -> None:
    rng = np.random.default_rng(2)
    emb = unit(rng.normal(size=(5, 8)))
    text = unit(rng.normal(size=(3, 8)))
    cfg = AlignConfig()
    ws, we, lo, hi, _ = candidate_windows(np.array([2.0, 30.0]), 5, 4.6, cfg)
    assert np.all(ws == 0.0) and np.all(we == 4.6)
    assert np.all(lo == 0) and np.all(hi == 5)  # row 4's middle (4.5) is inside [0, 4.6)
    caps = pd.DataFrame({"video_id": "v", "start": [2.0, 30.0, -9.0], "end": [10.0, 38.0, -1.0],
                         "text": ["a", "b", "c"]})
    out = align_video("v", caps, [Frames(emb, duration=4.6)], [text], ["e"], cfg)
    # 2 and -9 reach the whole video within 10 s; 30 would have to move 30 s: outside
    assert out["outside"].tolist() == [False, True, False]
    assert out.loc[[0, 2], "start"].tolist() == [0.0, 0.0]
    assert out.loc[[0, 2], "end"].tolist() == [4.6, 4.6]
    assert out.loc[[0, 2], "offset"].tolist() == [-2.0, 9.0]
    np.testing.assert_allclose(out.loc[[0, 2], "score"], text[[0, 2]] @ emb.mean(axis=0),
                               atol=1e-6)
    assert np.isnan(out.loc[1, "score"]) and out.loc[1, "start"] == 30.0


def _guarded_reference(emb: np.ndarray, text: np.ndarray, starts: np.ndarray, duration: float,
                       cfg: AlignConfig) -> list[float | None]:
    """Brute force from the documented rule: clamp each shifted window into the video, allow
    it only if the caption moves at most T, take the best allowed (None: outside)."""
    ref = _loop_reference(emb, text, starts, duration, cfg)
    extent = min(duration, len(emb) / cfg.fps)
    k = int(math.floor(cfg.offset_seconds / cfg.offset_step + 1e-9))
    chosen: list[float | None] = []
    for c, s in enumerate(starts):
        best: tuple[float, float, float] | None = None  # (-score, |δ|, start)
        for j, step in enumerate(range(-k, k + 1)):
            a = min(max(s + step * cfg.offset_step, 0.0), extent - cfg.clip_seconds) \
                if extent >= cfg.clip_seconds else 0.0
            if abs(a - s) > cfg.offset_seconds + 1e-9:
                continue
            cand = (-round(ref[c, j], 6), abs(step), a)
            best = cand if best is None or cand < best else best
        chosen.append(None if best is None else best[2])
    return chosen


@pytest.mark.parametrize("duration", [40.0, 37.5])
def test_guard_at_both_ends_no_caption_moves_more_than_t(duration: float) -> None:
    rng = np.random.default_rng(3)
    emb = unit(rng.normal(size=(int(np.ceil(duration)), 8)))
    last_ok = duration - 8 + 10  # the latest start that can still reach a whole clip
    starts = np.array([-18.0, -10.5, -10.0, -4.0, 0.0, 13.0, 30.0, last_ok, last_ok + 0.5,
                       55.0, 200.0])
    caps = pd.DataFrame({"video_id": "v", "start": starts, "end": starts + 8,
                         "text": [f"c{i}" for i in range(len(starts))]})
    text = unit(rng.normal(size=(len(starts), 8)))
    cfg = AlignConfig()
    out = align_video("v", caps, [Frames(emb, duration=duration)], [text], ["e"], cfg)
    expect_out = [True, True, False, False, False, False, False, False, True, True, True]
    assert out["outside"].tolist() == expect_out
    inside = out[~out["outside"]]
    assert np.all(np.abs(inside["offset"]) <= 10.0 + 1e-9)
    assert np.all(inside["start"] >= 0) and np.all(inside["end"] <= duration + 1e-9)
    np.testing.assert_allclose(inside["start"] - inside["orig_start"], inside["offset"])
    # the example: a caption at 55 s of a 40-s video is dropped, not moved by -23 s
    assert bool(out.loc[9, "outside"]) and out.loc[9, "offset"] == 0.0
    assert out.loc[2, "start"] == 0.0 and out.loc[2, "offset"] == 10.0  # start end: +T exactly
    assert out.loc[7, "start"] == duration - 8 and out.loc[7, "offset"] == -10.0  # end: -T
    brute = _guarded_reference(emb, text, starts, duration, cfg)
    assert [b is None for b in brute] == expect_out
    np.testing.assert_allclose(inside["start"], [b for b in brute if b is not None])
    assert out.loc[out["outside"], "score"].isna().all()


def test_a_dropped_caption_never_shifts_the_others() -> None:
    """The reference skips a caption without advancing its text index, so every later caption
    is scored with the wrong text; here each caption is its own row."""
    emb, text, starts = _planted(2.0)
    keep = pd.DataFrame({"video_id": "v", "start": starts, "end": starts + 8,
                         "text": [f"step {i}" for i in range(10)]})
    junk = pd.DataFrame({"video_id": "v", "start": [500.0, -40.0], "end": [508.0, -32.0],
                         "text": ["past the end", "before the start"]})
    mixed = pd.concat([keep.iloc[:3], junk.iloc[:1], keep.iloc[3:7], junk.iloc[1:],
                       keep.iloc[7:]], ignore_index=True)
    rng = np.random.default_rng(11)
    junk_text = unit(rng.normal(size=(2, text.shape[1])))
    mixed_text = np.concatenate([text[:3], junk_text[:1], text[3:7], junk_text[1:], text[7:]])
    ref = unit(rng.normal(size=(12, text.shape[1])))
    ref_vids = [f"o{i % 4}" for i in range(12)]
    fr = [Frames(emb, duration=80.0)]
    a = align_video("v", keep, fr, [text], ["e"], AlignConfig(), reference=[ref],
                    reference_videos=ref_vids)
    b = align_video("v", mixed, fr, [mixed_text], ["e"], AlignConfig(), reference=[ref],
                    reference_videos=ref_vids)
    assert b["outside"].sum() == 2 and not a["outside"].any()
    b_in = b[~b["outside"]].reset_index(drop=True)
    for col in ("start", "end", "offset", "score", "null_z", "text"):
        assert b_in[col].tolist() == a[col].tolist(), col
    assert a["offset"].tolist() == [2.0] * 10  # and the planted shift is still found


def _robust_z(x: float, null: np.ndarray) -> float:
    med = float(np.median(null))
    return (x - med) / (1.4826 * float(np.median(np.abs(null - med))))


def test_null_z_by_hand() -> None:
    rng = np.random.default_rng(12)
    emb = unit(rng.normal(size=(30, 6)))
    text = unit(rng.normal(size=(2, 6)))
    ref = unit(rng.normal(size=(14, 6)))
    vids = ["v"] * 3 + [f"o{i}" for i in range(11)]  # the first 3 are this video's: left out
    caps = pd.DataFrame({"video_id": "v", "start": [4.0, 15.0], "end": [12.0, 23.0],
                         "text": ["a", "b"]})
    out = align_video("v", caps, [Frames(emb, duration=30.0)], [text], ["e"], AlignConfig(),
                      reference=[ref], reference_videos=vids)
    for i in range(2):
        a = int(out.loc[i, "start"])
        clip = emb[a:a + 8].mean(axis=0)
        null = ref[3:] @ clip
        assert out.loc[i, "score"] == pytest.approx(float(text[i] @ clip), abs=1e-9)
        assert out.loc[i, "null_z"] == pytest.approx(_robust_z(text[i] @ clip, null), abs=1e-9)
    # with clips of other videos too: z_clip is the caption against them, null_z the mean
    clips = unit(rng.normal(size=(16, 6)))
    cvids = ["v"] * 4 + ["o1"] * 12  # this video's own clips are left out
    both = align_video("v", caps, [Frames(emb, duration=30.0)], [text], ["e"], AlignConfig(),
                       reference=[ref], reference_videos=vids, clips=[clips],
                       clip_videos=cvids)
    for i in range(2):
        null = clips[4:] @ text[i]
        zc = _robust_z(both.loc[i, "score"], null)
        assert both.loc[i, "z_clip"] == pytest.approx(zc, abs=1e-9)
        assert both.loc[i, "z_text"] == pytest.approx(out.loc[i, "null_z"], abs=1e-12)
        assert both.loc[i, "null_z"] == pytest.approx((zc + out.loc[i, "null_z"]) / 2, abs=1e-9)
    # fewer than MIN_REFERENCE captions of other videos: no z, and the default keeps it
    few = align_video("v", caps, [Frames(emb, duration=30.0)], [text], ["e"], AlignConfig(),
                      reference=[ref[:8]], reference_videos=vids[:8])
    assert few["null_z"].isna().all()
    kept, _ = apply_filter(few, AlignConfig())
    assert kept["kept"].all()


def _planted(shift: float, d: int = 32, seed: int = 4
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ten 8-s segments of distinct content; captions claim each segment ``shift`` s early."""
    rng = np.random.default_rng(seed)
    topics = unit(rng.normal(size=(10, d)))
    emb = np.repeat(topics, 8, axis=0)
    emb = unit(emb + 0.05 * rng.normal(size=emb.shape))
    true_starts = np.arange(10) * 8.0
    starts = true_starts - shift
    return emb, unit(topics + 0.05 * rng.normal(size=topics.shape)), starts


def test_planted_shift_of_four_seconds_is_found() -> None:
    emb, text, starts = _planted(4.0)
    caps = pd.DataFrame({"video_id": "v", "start": starts, "end": starts + 8,
                         "text": [f"step {i}" for i in range(10)]})
    out = align_video("v", caps, [Frames(emb, duration=80.0)], [text], ["e"], AlignConfig())
    assert out["offset"].tolist() == [4.0] * 10
    assert out["start"].tolist() == [8.0 * i for i in range(10)]
    assert out["encoders"].unique().tolist() == ["e"]


def test_two_encoders_average_their_similarities() -> None:
    emb_a, text_a, starts = _planted(3.0, seed=5)
    emb_b, text_b, _ = _planted(-3.0, seed=6)
    # encoder B sees the same captions 3 s *later*: its own best shift is -3
    starts_b = starts
    cfg = AlignConfig()
    sa, offsets = window_scores(emb_a, text_a, starts, 80.0, cfg)
    sb, _ = window_scores(emb_b, text_b, starts_b, 80.0, cfg)
    caps = pd.DataFrame({"video_id": "v", "start": starts, "end": starts + 8,
                         "text": [f"s{i}" for i in range(10)]})
    out = align_video("v", caps, [Frames(emb_a, duration=80.0), Frames(emb_b, duration=80.0)],
                      [text_a, text_b], ["A", "B"], cfg)
    avg = (sa + sb) / 2
    best = avg.argmax(axis=1)
    np.testing.assert_allclose(out["score"], avg.max(axis=1), atol=1e-9)
    mid = (starts >= 3) & (starts <= 62)
    np.testing.assert_array_equal(out.loc[mid, "start"], (starts + offsets[best])[mid])
    # the average differs from each encoder alone
    assert not np.allclose(out["score"], sa.max(axis=1))
    assert out["encoders"].iloc[0] == "A,B"


def test_zero_captions_and_partial_video() -> None:
    caps = pd.DataFrame({"video_id": [], "start": [], "end": [], "text": []})
    emb = unit(np.random.default_rng(7).normal(size=(12, 4)))
    out = align_video("v", caps, [Frames(emb)], [np.zeros((0, 4))], ["e"], AlignConfig())
    assert len(out) == 0 and list(out.columns[:len(SCHEMAS["aligned"])]) == list(
        SCHEMAS["aligned"])
    caps = pd.DataFrame({"video_id": "v", "start": [12.0, 20.0], "end": [20.0, 28.0],
                         "text": ["x", "y"]})
    # the video is 40 s long, but only 12 s decoded: align on the decoded part and say so; a
    # caption that cannot reach a clip of the decoded part within 10 s is outside
    out = align_video("v", caps, [Frames(emb, duration=40.0, partial=True)],
                      [unit(np.ones((2, 4)))], ["e"], AlignConfig())
    assert bool(out.loc[0, "partial"]) and 2.0 <= out.loc[0, "start"] <= 4.0
    assert out.loc[0, "end"] <= 12.0
    assert out["outside"].tolist() == [False, True]


def test_offset_grid_steps() -> None:
    assert offset_grid(AlignConfig(offset_seconds=2, offset_step=0.5)).tolist() == [
        -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2]
    assert offset_grid(AlignConfig(offset_seconds=0)).tolist() == [0.0]


def _table(scores: list[float], videos: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"video_id": videos, "score": scores, "kept": False})


def test_filters_exact_on_small_data() -> None:
    scores = [float(x) for x in range(100)]
    df = _table(scores, [f"v{i % 7}" for i in range(100)])
    out, thr = apply_filter(df, AlignConfig(threshold=42.5))
    assert thr == 42.5 and int(out["kept"].sum()) == 57
    out, thr = apply_filter(df, AlignConfig(quantile=0.1))
    assert int(out["kept"].sum()) == 10 and out.loc[out["kept"], "score"].min() == 90
    out, thr = apply_filter(df, AlignConfig(keep_top=7))
    assert thr == 93.0 and sorted(out.loc[out["kept"], "score"]) == [93, 94, 95, 96, 97, 98, 99]
    out, thr = apply_filter(df, AlignConfig(keep_top=1000))
    assert bool(out["kept"].all())
    out, _ = apply_filter(df, AlignConfig(keep_top=0))
    assert not out["kept"].any()
    with pytest.raises(ValidationError):
        AlignConfig(threshold=0.2, keep_top=5)
    # the explicit modes ignore null_z entirely: same kept rows with or without it
    z = pd.Series(np.linspace(-2, 3, 100)[::-1])
    for cfg in (AlignConfig(threshold=42.5), AlignConfig(quantile=0.1), AlignConfig(keep_top=7)):
        a, ta = apply_filter(df, cfg)
        b, tb = apply_filter(df.assign(null_z=z), cfg)
        assert ta == tb and a["kept"].tolist() == b["kept"].tolist()


def test_default_filter_is_the_null_z_bar() -> None:
    df = _table([float(x) for x in range(6)], ["a", "a", "b", "b", "c", "c"])
    bar = DEFAULT_NULL_Z
    df["null_z"] = [3.0, 0.2, bar, float("nan"), -1.0, bar - 0.01]
    out, thr = apply_filter(df, AlignConfig())
    assert thr == -math.inf  # not a score threshold
    assert out["kept"].tolist() == [True, False, True, True, False, False]  # NaN: kept
    out, _ = apply_filter(df, AlignConfig(null_z=0.1))
    assert out["kept"].tolist() == [True, True, True, True, False, True]
    out, _ = apply_filter(df, AlignConfig(keep_all=True))
    assert bool(out["kept"].all())
    assert describe_filter(AlignConfig(), thr).startswith(f"default filter: null z >= {bar:g}")
    assert filter_mode(AlignConfig(quantile=0.5)) == "quantile"
    for bad in ({"null_z": 1.0, "threshold": 0.2}, {"keep_all": True, "quantile": 0.5}):
        with pytest.raises(ValidationError, match="choose one filter"):
            AlignConfig(**bad)


def test_keep_top_sample_estimate_on_large_data() -> None:
    rng = np.random.default_rng(8)
    per_video = [rng.normal(loc=rng.normal(0, 0.2), scale=1.0, size=rng.integers(5, 40))
                 for _ in range(4000)]
    total = sum(len(v) for v in per_video)
    cfg = AlignConfig(keep_top=5000, sample_videos=400)
    thr = choose_threshold(per_video, cfg, np.random.default_rng(0))
    kept = sum(int((v >= thr).sum()) for v in per_video)
    assert abs(kept - 5000) / 5000 < 0.1, (kept, total)
    exact = choose_threshold(per_video, AlignConfig(keep_top=5000, sample_videos=0))
    assert sum(int((v >= exact).sum()) for v in per_video) == 5000
    assert thr != exact  # really estimated, not computed on everything


def test_report_is_self_contained(tmp_path) -> None:
    rng = np.random.default_rng(9)
    df = pd.DataFrame({"video_id": [f"v{i % 5}" for i in range(200)],
                       "score": rng.normal(0.2, 0.05, 200),
                       "offset": rng.integers(-10, 11, 200).astype(float),
                       "kept": False, "partial": False})
    df, thr = apply_filter(df, AlignConfig(quantile=0.3))
    path = write_align_report(df, thr, {"encoders": ["e"]}, tmp_path / "r.html")
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 3
    assert "<td>60</td>" in text  # kept pairs
    assert "src=\"http" not in text


def test_bad_options_are_one_line_errors() -> None:
    from howtocap.cli.options import build, model_options

    def align_config(**values: object) -> AlignConfig:  # as `howtocap align` builds it
        return build(AlignConfig, values, list(model_options(AlignConfig)))

    assert align_config(threshold=None, keep_top=3).keep_top == 3
    with pytest.raises(HowtocapError, match="choose one filter"):
        align_config(threshold=0.1, quantile=0.5)
    with pytest.raises(HowtocapError, match="^--clip-seconds: "):
        align_config(clip_seconds=0)


def _chatter_table() -> pd.DataFrame:
    """Four captions: chatter with a high null z, a step, chatter with a low null z, and a
    digression the text patterns do not name (left to the visual test)."""
    return pd.DataFrame({
        "video_id": ["a", "a", "b", "b"], "score": [0.30, 0.25, 0.01, 0.20], "kept": False,
        "text": ["Don't forget to like and subscribe.", "pour the coffee into the cup",
                 "Thanks for watching, see you next time.", "My family has loved this for years."],
        "null_z": [5.0, 3.0, -1.0, 4.0]})


def test_default_filter_drops_text_chatter_even_with_a_high_null_z() -> None:
    from howtocap.align.filter import filter_counts

    df = _chatter_table()
    out, thr = apply_filter(df, AlignConfig())
    assert thr == -math.inf
    assert out["chatter"].tolist() == [True, False, True, False]
    assert out["chatter"].dtype == bool
    assert out["kept"].tolist() == [False, True, False, True]
    assert filter_counts(out, AlignConfig()) == {
        "no_null_z": 0, "chatter_dropped": 2, "chatter_dropped_only_by_text": 1}
    assert describe_filter(AlignConfig(), thr).endswith(", and channel chatter dropped")
    # --keep-chatter: the visual test alone; the verdict is still recorded
    keep = AlignConfig(drop_chatter=False)
    out, _ = apply_filter(df, keep)
    assert out["kept"].tolist() == [True, True, False, True]
    assert out["chatter"].tolist() == [True, False, True, False]
    assert filter_counts(out, keep) == {
        "no_null_z": 0, "chatter_dropped": 0, "chatter_dropped_only_by_text": 0}
    assert "chatter" not in describe_filter(keep, -math.inf)
    # NaN null z (no reference) is still kept unless the text flags it
    out, _ = apply_filter(df.assign(null_z=np.nan), AlignConfig())
    assert out["kept"].tolist() == [False, True, False, True]
    assert filter_counts(out, AlignConfig())["no_null_z"] == 4


def test_explicit_modes_and_keep_all_do_not_apply_the_text_test() -> None:
    from howtocap.align.filter import filter_counts

    df = _chatter_table()
    for cfg, kept in ((AlignConfig(threshold=0.2), [True, True, False, True]),
                      (AlignConfig(keep_top=1), [True, False, False, False]),
                      (AlignConfig(quantile=0.5), [True, True, False, False]),
                      (AlignConfig(keep_all=True), [True, True, True, True])):
        out, _ = apply_filter(df, cfg)
        assert out["kept"].tolist() == kept, cfg
        assert out["chatter"].tolist() == [True, False, True, False]
        assert filter_counts(out, cfg)["chatter_dropped"] == 0
        assert "chatter" not in describe_filter(cfg, 0.2)


def test_empty_and_textless_tables_get_a_chatter_column() -> None:
    from howtocap.align.filter import empty_aligned

    out, _ = apply_filter(empty_aligned(), AlignConfig())
    assert len(out) == 0 and out["chatter"].dtype == bool and out["kept"].dtype == bool
    out, _ = apply_filter(_table([1.0, 2.0], ["a", "b"]), AlignConfig())
    assert out["chatter"].tolist() == [False, False]


def test_report_counts_and_lists_text_chatter(tmp_path: Path) -> None:
    from howtocap.align.filter import filter_counts

    df = _chatter_table().assign(start=0.0, end=8.0, orig_start=[1.0, 2.0, 3.0, 4.0],
                                 offset=0.0, partial=False)
    cfg = AlignConfig()
    out, thr = apply_filter(df, cfg)
    config = {**cfg.model_dump(), "filter": describe_filter(cfg, thr),
              **filter_counts(out, cfg)}
    assert config["drop_chatter"] is True
    html = write_align_report(out, thr, config, tmp_path / "r.html").read_text()
    assert ("<th>dropped: channel chatter (text test)</th><td>2 (1 of them above the null z "
            "bar)</td>") in html
    assert "Dropped: channel chatter (2)" in html
    assert "Don&#x27;t forget to like and subscribe." in html
    assert html.count("data:image/png;base64,") == 4  # the null z histogram too
    # --keep-chatter: nothing dropped by the text test, no list
    keep = AlignConfig(drop_chatter=False)
    out, thr = apply_filter(df, keep)
    html = write_align_report(out, thr, {"filter": describe_filter(keep, thr),
                                         **filter_counts(out, keep)},
                              tmp_path / "k.html").read_text()
    assert "<th>dropped: channel chatter (text test)</th><td>0</td>" in html
    assert "Dropped: channel chatter" not in html


def test_keep_chatter_option_maps_onto_drop_chatter() -> None:
    from howtocap.cli.options import build, model_options

    opts = list(model_options(AlignConfig))
    assert "--keep-chatter" in {o.flag for o in opts}
    assert build(AlignConfig, {}, opts).drop_chatter is True
    assert build(AlignConfig, {"keep_chatter": False}, opts).drop_chatter is True
    assert build(AlignConfig, {"keep_chatter": True}, opts).drop_chatter is False
    # with an explicit mode the flag is accepted (`run` shares it with the LLM stage)
    cfg = build(AlignConfig, {"keep_chatter": True, "threshold": 0.3}, opts)
    assert filter_mode(cfg) == "threshold" and cfg.drop_chatter is False


def test_null_z_help_names_the_default_bar() -> None:
    """The CLI's help is static text (no numpy at start-up): it must follow DEFAULT_NULL_Z."""
    import inspect

    from howtocap.cli.align import align_cmd

    param = inspect.signature(align_cmd, eval_str=True).parameters["null_z"]
    help_text = next(m.help for m in param.annotation.__metadata__ if hasattr(m, "help"))
    assert f"Default {DEFAULT_NULL_Z:g}." in help_text


def test_caption_fingerprint_text_is_the_per_video_csv() -> None:
    """The fingerprint text is built by one ``to_csv`` per chunk of rows; it must equal the
    per-video ``to_csv`` it replaced (recorded fingerprints are hashes of it): odd floats,
    quotes, commas, line breaks, missing values, interleaved videos, Arrow strings."""
    import pandas as pd

    from howtocap.align.run import _csv_per_group, _csv_per_video

    rng = np.random.default_rng(0)
    odd = [np.nan, 1e-7, 1e16, -0.0, 0.1 + 0.2, 3.0, 1 / 3, -1e-300, np.inf]
    texts = ["plain", "with, comma", 'with "quote"', "new\nline", "cr\rhere", "", "ünï",
             "tab\there", '"', "a\r\nb", None]
    for trial in range(60):
        n = int(rng.integers(0, 50))
        df = pd.DataFrame({
            "video_id": rng.choice(["a", "b", "c d", "v,1", None], n),
            "start": [odd[i] if rng.random() < 0.3 else float(rng.normal() * 100)
                      for i in rng.integers(0, len(odd), n)],
            "end": rng.normal(size=n) * 50,
            "text": [texts[i] for i in rng.integers(0, len(texts), n)]})
        if trial % 3 == 0:
            df = df.astype({"video_id": "string[pyarrow]", "text": "string[pyarrow]"})
        for cols in (["start", "end", "text"], ["start", "text"]):
            want = _csv_per_group(df, cols)
            assert _csv_per_video(df, cols, chunk=int(rng.integers(1, 20))) == want, trial


def test_report_counts_in_whole_numbers_and_says_what_each_chart_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three captions of one video: count axes tick whole numbers (not 0.25 captions), each
    figure's caption is a sentence, and the one-video kept fraction is a sentence, not a
    chart of one bar."""
    import howtocap.align.report as report

    axes: list[Any] = []

    def keep(fig: Any) -> str:
        fig.canvas.draw()
        axes.extend(fig.axes)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return "x"

    monkeypatch.setattr(report, "_png", keep)
    df = pd.DataFrame({"video_id": ["only"] * 3, "score": [0.1, 0.2, 0.3],
                       "offset": [0.0, 1.0, -2.0], "kept": [False, True, True],
                       "partial": False})
    text = write_align_report(df, 0.15, {"encoders": ["e"]}, tmp_path / "r.html").read_text()
    counted = [ax for ax in axes if ax.get_ylabel() in ("captions", "videos")]
    assert len(counted) == 2
    for ax in counted:
        ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert text.count("<figure>") == 2 and "One video (only): 2 of its 3 captions kept" in text
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", text)
    assert len(captions) == 2 and all(len(c.split()) > 8 for c in captions)
    empty = write_align_report(df.iloc[:0], 0.15, {}, tmp_path / "e.html").read_text()
    assert "<figure>" not in empty and "nothing to plot" in empty
