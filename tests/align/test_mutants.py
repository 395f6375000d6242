"""Alignment maths: behaviours the mutation check found untested
(benchmarks/robustness/bench_mutation.py).

Every expectation comes from the documented rule (the module docstrings of ``howtocap.align``
and ``howtocap.encoders.cache``) computed the slow way, never from the code's own output."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.filter import (
    MIN_REFERENCE,
    align_video,
    apply_filter,
    best_offsets,
    candidate_windows,
    chatter_flags,
    choose_threshold,
    describe_filter,
    empty_aligned,
    filter_counts,
    reference_z,
    video_extent,
    window_scores,
)
from howtocap.encoders.windows import rows_covering, window_means
from howtocap.errors import HowtocapError
from tests.support.align import Frames, unit


def _rows(a: float, b: float, n: int, fps: float = 1.0) -> list[int]:
    """The documented coverage: rows whose middle ``(i + 0.5) / fps`` lies in ``[a, b)``; a
    window too short to hold one gets the row (``[i/fps, (i+1)/fps)``) holding its middle."""
    rows = [i for i in range(n) if a - 1e-9 <= (i + 0.5) / fps < b - 1e-9]
    return rows or [min(max(int(np.floor((a + b) / 2 * fps)), 0), n - 1)]


def _max_pool(emb: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              renormalize: bool = False) -> np.ndarray:
    """A pooling unlike the mean (the MEE baseline's kind), written one window at a time, with
    ``Encoder.pool_clips``'s signature (``renormalize`` does not apply to it)."""
    out = np.empty((*lo.shape, emb.shape[1]))
    for idx in np.ndindex(lo.shape):
        out[idx] = np.asarray(emb, dtype=np.float64)[lo[idx]:hi[idx]].max(axis=0)
    return out


def _caps(starts: list[float], **extra: list) -> pd.DataFrame:
    return pd.DataFrame({"video_id": "v", "start": starts,
                         "text": [f"c{i}" for i in range(len(starts))], **extra})


def _video(n: int = 40, d: int = 8, seed: int = 0) -> np.ndarray:
    return unit(np.random.default_rng(seed).normal(size=(n, d)))


# -- the score reported is the score of the window reported ----------------------------------

@pytest.mark.parametrize("duration", [30.0, 0.0])
def test_each_score_belongs_to_the_window_it_reports(duration: float) -> None:
    """60 rows but (first case) a 30-s duration: windows and scores both live in [0, 30];
    without a duration the rows decide the extent (60 s)."""
    emb = _video(60, seed=1)
    starts = [3.0, 14.5, 25.0, 28.0, 45.0]
    text = unit(np.random.default_rng(2).normal(size=(len(starts), 8)))
    out = align_video("v", _caps(starts), [Frames(emb, duration=duration)], [text], ["e"],
                      AlignConfig())
    extent = duration or 60.0
    # outside: even the earliest shift (-10 s) starts after the last whole clip (extent - 8)
    assert out["outside"].tolist() == [False, False, False, False, extent - 8 < 45.0 - 10]
    for i, r in out[~out["outside"]].iterrows():
        assert r["start"] >= 0.0 and r["end"] <= extent + 1e-9
        mean = emb[_rows(r["start"], r["end"], len(emb))].mean(axis=0)
        assert r["score"] == pytest.approx(float(text[i] @ mean), abs=1e-9)


def test_a_single_caption_is_aligned_and_scored() -> None:
    emb = _video(30, seed=3)
    text = unit(emb[12:20].mean(axis=0, keepdims=True))  # describes [12, 20)
    out = align_video("v", _caps([9.0]), [Frames(emb, duration=30.0)], [text], ["e"],
                      AlignConfig())
    assert out["start"].tolist() == [12.0] and out["offset"].tolist() == [3.0]
    scores, offsets = window_scores(emb, text, np.array([9.0]), 30.0, AlignConfig())
    assert scores.shape == (1, 21) and offsets[scores.argmax()] == 3.0


def test_outside_captions_keep_their_own_clip() -> None:
    emb = _video(20, seed=4)
    out = align_video("v", _caps([5.0, 70.0]), [Frames(emb, duration=20.0)],
                      [unit(np.ones((2, 8)))], ["e"], AlignConfig(clip_seconds=6.0))
    assert out["outside"].tolist() == [False, True]
    assert (out.loc[1, "start"], out.loc[1, "end"], out.loc[1, "offset"]) == (70.0, 76.0, 0.0)


# -- pass-through columns and the empty table -------------------------------------------------

def test_caption_provenance_passes_through_and_defaults_when_absent() -> None:
    emb = _video(30, seed=5)
    text = unit(np.ones((2, 8)))
    caps = _caps([4.0, 12.0], end=[9.0, 14.0], source=["llm", "asr"], block=[3, 7],
                 model=["qwen", "whisper"])
    out = align_video("v", caps, [Frames(emb, duration=30.0)], [text], ["e"], AlignConfig())
    assert out["orig_end"].tolist() == [9.0, 14.0]  # not start + clip
    assert out["source"].tolist() == ["llm", "asr"] and out["block"].tolist() == [3, 7]
    assert out["model"].tolist() == ["qwen", "whisper"]
    assert not out["kept"].any()  # the filter decides later
    bare = align_video("v", _caps([4.0, 12.0]), [Frames(emb, duration=30.0)], [text], ["e"],
                       AlignConfig())
    assert bare["orig_end"].tolist() == [12.0, 20.0]  # start + clip
    assert bare["source"].tolist() == ["", ""] and bare["block"].tolist() == [-1, -1]
    assert bare["model"].tolist() == ["", ""]


def test_partial_flag_is_a_bool_per_row() -> None:
    emb = _video(30, seed=6)
    for partial in (False, True):
        out = align_video("v", _caps([4.0, 12.0]), [Frames(emb, 1.0, 30.0, partial)],
                          [unit(np.ones((2, 8)))], ["e"], AlignConfig())
        assert out["partial"].dtype == bool and out["partial"].tolist() == [partial] * 2


def test_empty_table_has_the_columns_and_dtypes_of_a_full_one() -> None:
    """Rows of videos with and without captions are concatenated into a shard's scores."""
    emb = _video(30, seed=7)
    full = align_video("v", _caps([4.0]), [Frames(emb, duration=30.0)],
                       [unit(np.ones((1, 8)))], ["e"], AlignConfig())
    empty = empty_aligned()
    assert len(empty) == 0
    for col in ("partial", "null_z", "outside", "start", "score", "kept"):
        assert col in empty.columns, col
        assert empty[col].dtype == full[col].dtype, col
    assert full["null_z"].dtype == np.float64 and full["null_z"].isna().all()


# -- pooling, encoders and the reference null ------------------------------------------------

def test_a_pooling_replaces_the_window_mean_everywhere() -> None:
    """``pools`` (MEE's max pooling) scores the windows and is also the clip null z uses."""
    rng = np.random.default_rng(8)
    emb = _video(30, seed=9)
    text = unit(rng.normal(size=(2, 8)))
    starts = np.array([4.0, 15.0])
    cfg = AlignConfig()
    scores, offsets = window_scores(emb, text, starts, 30.0, cfg, _max_pool)
    for c, s in enumerate(starts):
        for j, off in enumerate(offsets):
            a = min(max(s + off, 0.0), 22.0)
            pooled = emb[_rows(a, a + 8, 30)].max(axis=0)
            assert scores[c, j] == pytest.approx(float(text[c] @ pooled), abs=1e-9)
    ref = unit(rng.normal(size=(12, 8)))
    vids = [f"o{i}" for i in range(12)]
    out = align_video("v", _caps(starts.tolist()), [Frames(emb, duration=30.0)], [text],
                      ["e"], cfg, pools=[_max_pool], reference=[ref], reference_videos=vids)
    for i, r in out.iterrows():
        clip = emb[_rows(r["start"], r["end"], 30)].max(axis=0)
        assert r["score"] == pytest.approx(float(text[i] @ clip), abs=1e-9)
        null = ref @ clip
        med = np.median(null)
        z = (float(text[i] @ clip) - med) / (1.4826 * np.median(np.abs(null - med)))
        assert r["null_z"] == pytest.approx(z, abs=1e-9)
    with pytest.raises(ValueError):
        align_video("v", _caps([4.0]), [Frames(emb)] * 2, [text[:1]] * 2, ["a", "b"], cfg,
                    pools=[_max_pool])


def test_mismatched_inputs_are_refused() -> None:
    emb = _video(30, seed=10)
    text = unit(np.ones((2, 8)))
    with pytest.raises(ValueError, match="per encoder"):
        align_video("v", _caps([4.0, 9.0]), [Frames(emb)], [text, text], ["e"], AlignConfig())
    with pytest.raises(ValueError, match="do not match"):
        window_scores(emb, text, np.array([4.0, 9.0, 12.0]), 30.0, AlignConfig())
    with pytest.raises(HowtocapError, match="clipX"):
        align_video("clipX", _caps([4.0]), [Frames(emb[:0])], [text[:1]], ["e"],
                    AlignConfig())


def test_zero_captions_score_to_an_empty_matrix_and_index() -> None:
    scores, offsets = window_scores(_video(30), np.zeros((0, 8)), np.zeros(0), 30.0,
                                    AlignConfig())
    assert scores.shape == (0, 21) and len(offsets) == 21
    best = best_offsets(scores, offsets)
    assert best.shape == (0,) and best.dtype.kind == "i"


def test_reference_z_needs_min_reference_other_videos() -> None:
    rng = np.random.default_rng(11)
    windows = [unit(rng.normal(size=(1, 6)))]
    score = np.array([0.3])
    for n_other, has_z in ((MIN_REFERENCE, True), (MIN_REFERENCE - 1, False)):
        ref = [unit(rng.normal(size=(n_other + 5, 6)))]
        vids = ["v"] * 5 + [f"o{i}" for i in range(n_other)]  # this video's 5 do not count
        z = reference_z("v", score, windows, ref, vids)
        assert z.shape == (1,) and bool(np.isfinite(z[0])) == has_z


def test_reference_z_averages_the_encoders_similarities() -> None:
    rng = np.random.default_rng(12)
    wa, wb = unit(rng.normal(size=(2, 6))), unit(rng.normal(size=(2, 6)))
    ra, rb = unit(rng.normal(size=(15, 6))), unit(rng.normal(size=(15, 6)))
    vids = [f"o{i}" for i in range(15)]
    score = np.array([0.5, -0.1])
    z = reference_z("v", score, [wa, wb], [ra, rb], vids)
    for i in range(2):
        null = (ra @ wa[i] + rb @ wb[i]) / 2
        med = np.median(null)
        assert z[i] == pytest.approx((score[i] - med) / (1.4826 * np.median(np.abs(null - med))))


def test_z_needs_both_the_reference_and_its_video_ids() -> None:
    emb = _video(30, seed=13)
    text = unit(np.ones((1, 8)))
    ref = unit(np.random.default_rng(14).normal(size=(12, 8)))
    vids = [f"o{i}" for i in range(12)]
    fr = [Frames(emb, duration=30.0)]
    for kw in ({"reference": [ref]}, {"reference_videos": vids}, {"clips": [ref]},
               {"clip_videos": vids}):
        out = align_video("v", _caps([4.0]), fr, [text], ["e"], AlignConfig(), **kw)
        assert out[["null_z", "z_text", "z_clip"]].isna().all().all(), kw


# -- settings ---------------------------------------------------------------------------------

def test_scoring_key_follows_what_the_scores_depend_on() -> None:
    """A cached score is reused while the key stays; the filter settings must not move it."""
    base = AlignConfig()
    key = base.scoring_key(["default"])
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert AlignConfig(null_z=2.0, seed=3, drop_chatter=False).scoring_key(["default"]) == key
    assert AlignConfig(keep_top=5).scoring_key(["default"]) == key
    changed = [AlignConfig(offset_seconds=5).scoring_key(["default"]),
               AlignConfig(clip_seconds=4).scoring_key(["default"]),
               AlignConfig(fps=2).scoring_key(["default"]),
               AlignConfig(offset_step=0.5).scoring_key(["default"]),
               AlignConfig(renormalize=True).scoring_key(["default"]),
               base.scoring_key(["default", "clip"]), base.scoring_key(["clip"])]
    assert len({key, *changed}) == len(changed) + 1


def test_bad_align_options_name_each_option_on_one_line() -> None:
    from howtocap.cli.options import build, model_options

    def align_config(**values: object) -> AlignConfig:  # as `howtocap align` builds it
        return build(AlignConfig, values, list(model_options(AlignConfig)))

    with pytest.raises(HowtocapError) as e:
        align_config(clip_seconds=0, fps=-1, quantile=None)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.fullmatch(r"--clip-seconds: [^;]+; --fps: [^;]+", msg), msg
    with pytest.raises(HowtocapError, match=r"^choose one filter"):
        align_config(threshold=0.2, keep_top=3)


# -- extent and windows -----------------------------------------------------------------------

def test_video_extent_ignores_a_missing_or_negative_duration() -> None:
    assert video_extent(10, 0.5, 1.0) == 0.5  # a real (short) duration counts
    assert video_extent(10, 25.0, 2.0) == 5.0  # rows decoded: 10 at 2 fps
    for bad in (0.0, -5.0):
        assert video_extent(10, bad, 1.0) == 10.0


def test_a_one_row_video_has_windows_and_no_rows_is_an_error() -> None:
    ws, we, lo, hi, _ = candidate_windows(np.array([0.0]), 1, 1.0, AlignConfig())
    assert np.all(ws == 0.0) and np.all(we == 1.0) and np.all(lo == 0) and np.all(hi == 1)
    with pytest.raises(ValueError, match="no frame"):
        candidate_windows(np.array([0.0]), 0, 1.0, AlignConfig())


# -- the global filter ------------------------------------------------------------------------

def _table(scores: list[float], videos: list[str], **extra: list) -> pd.DataFrame:
    return pd.DataFrame({"video_id": videos, "score": scores, **extra})


def test_threshold_from_a_plain_array_and_the_trivial_cases() -> None:
    scores = np.arange(20, dtype=np.float32).reshape(4, 5)  # any shape: every pair counts
    assert choose_threshold(scores, AlignConfig(keep_top=3)) == 17.0
    assert choose_threshold(scores, AlignConfig(quantile=0.5)) == pytest.approx(9.5)
    assert choose_threshold(scores, AlignConfig(quantile=1.0)) == 0.0  # keep everything
    assert choose_threshold(scores, AlignConfig()) == -np.inf  # no score filter: keep all
    assert choose_threshold([], AlignConfig(keep_top=5)) == -np.inf
    assert choose_threshold([np.array([0.3])], AlignConfig(keep_top=1)) == pytest.approx(0.3)


def test_sampled_threshold_is_reproducible_and_follows_the_given_rng() -> None:
    rng = np.random.default_rng(20)
    groups = [rng.normal(loc=i / 50, size=10) for i in range(200)]
    cfg = AlignConfig(keep_top=300, sample_videos=20)
    once = choose_threshold(groups, cfg)
    assert choose_threshold(groups, cfg) == once  # seeded by cfg.seed, not the clock
    assert choose_threshold(groups, cfg, np.random.default_rng(cfg.seed)) == once
    other = choose_threshold(groups, cfg, np.random.default_rng(7))
    assert other == choose_threshold(groups, AlignConfig(keep_top=300, sample_videos=20, seed=7))
    assert other != once
    # sampling every video is no sampling: the exact count is kept
    exact = choose_threshold(groups[:20], AlignConfig(keep_top=37, sample_videos=20))
    assert sum(int((g >= exact).sum()) for g in groups[:20]) == 37


def test_sampling_one_video_estimates_from_that_video_alone() -> None:
    groups = [np.arange(10.0) + 100 * i for i in range(3)]
    thr = choose_threshold(groups, AlignConfig(keep_top=3, sample_videos=1))
    assert any(thr == pytest.approx(np.quantile(g, 0.9)) for g in groups)


def test_apply_filter_threshold_does_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(21)
    df = _table(rng.normal(size=600).tolist(), [f"v{i % 150:03d}" for i in range(600)],
                text=["step"] * 600)
    cfg = AlignConfig(keep_top=60, sample_videos=10)
    a, ta = apply_filter(df, cfg)
    b, tb = apply_filter(df.sample(frac=1.0, random_state=3).reset_index(drop=True), cfg)
    assert ta == tb and int(a["kept"].sum()) == int(b["kept"].sum())
    assert apply_filter(df, cfg)[1] == ta  # and again, the same


def test_filter_on_one_row_tables_without_text_or_kept() -> None:
    one = _table([0.4], ["v"])
    out, thr = apply_filter(one, AlignConfig(threshold=0.5))
    assert thr == 0.5 and out["kept"].tolist() == [False]
    assert out["chatter"].dtype == bool and out["chatter"].tolist() == [False]
    out, _ = apply_filter(one, AlignConfig(keep_all=True))
    assert out["kept"].dtype == bool and out["kept"].tolist() == [True]
    assert chatter_flags(["Subscribe to my channel!"]).tolist() == [True]
    empty = _table([], [])
    out, thr = apply_filter(empty, AlignConfig(threshold=0.5))
    assert thr == 0.5 and out["kept"].dtype == bool and len(out) == 0
    assert apply_filter(empty, AlignConfig())[1] == -np.inf


def test_filter_counts_only_for_the_default_filter() -> None:
    df = _table([0.1, 0.2, 0.3], ["a", "b", "c"], text=["Like and subscribe!", "Cut it.", "x"],
                null_z=[2.0, np.nan, -1.0])
    out, _ = apply_filter(df, AlignConfig())
    assert filter_counts(out, AlignConfig()) == {
        "no_null_z": 1, "chatter_dropped": 1, "chatter_dropped_only_by_text": 1}
    explicit, _ = apply_filter(df, AlignConfig(threshold=0.0))
    assert set(filter_counts(explicit, AlignConfig(threshold=0.0)).values()) == {0}
    no_z, _ = apply_filter(df.drop(columns="null_z"), AlignConfig())
    assert filter_counts(no_z, AlignConfig())["no_null_z"] == 3


def test_describe_filter_names_the_filter_that_applied() -> None:
    assert describe_filter(AlignConfig(keep_all=True), -np.inf) == "no filter (--keep-all)"
    custom = describe_filter(AlignConfig(null_z=2.5, drop_chatter=False), -np.inf)
    assert "null z >= 2.5" in custom and "chatter" not in custom
    assert custom.endswith("clips")  # nothing appended when chatter is kept
    assert describe_filter(AlignConfig(keep_top=5), 0.25) == "--keep-top: score >= 0.2500"


# -- window maths (encoders/cache.py) ---------------------------------------------------------

@pytest.mark.parametrize("fps", [1.0, 2.0, 0.5])
def test_rows_covering_matches_the_documented_rule(fps: float) -> None:
    """Long, short, sub-row, partly and wholly outside windows, against the rule one by one."""
    n = 12
    rng = np.random.default_rng(int(fps * 10))
    a = np.round(rng.uniform(-4, n / fps + 4, size=300), 1)
    b = a + np.round(rng.choice([0.1, 0.3, 0.6, 1.0, 2.5, 8.0], size=300), 1)
    pairs = [*zip(a, b, strict=True), (0.6 / fps, 0.9 / fps), (0.1 / fps, 0.4 / fps),
             (50.0, 58.0), (-9.0, -1.0), (0.0, n / fps)]
    s, e = np.array(pairs).T
    lo, hi = rows_covering(s, e, n, fps)
    assert lo.dtype.kind == "i" and hi.dtype.kind == "i"
    for (x, y), first, end in zip(pairs, lo, hi, strict=True):
        rows = _rows(x, y, n, fps)
        assert (int(first), int(end)) == (rows[0], rows[-1] + 1), (x, y, fps)


def test_window_means_are_plain_means_unless_renormalized() -> None:
    emb = _video(20, seed=30)
    lo, hi = np.array([[0, 3]]), np.array([[20, 5]])
    means = window_means(emb, lo, hi)
    np.testing.assert_allclose(means[0, 0], emb.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(means[0, 1], emb[3:5].mean(axis=0), atol=1e-12)
    assert np.linalg.norm(means[0, 0]) < 0.9  # disagreeing frames: a shorter mean
    unit = window_means(emb, lo, hi, renormalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, atol=1e-12)


def test_renormalized_windows_are_also_the_clips_null_z_scores() -> None:
    """With ``renormalize`` the caption is scored on the unit-length window mean, and the
    z against other videos' captions uses that same clip."""
    rng = np.random.default_rng(31)
    emb = _video(30, seed=32)
    text = unit(rng.normal(size=(1, 8)))
    ref = unit(rng.normal(size=(12, 8)))
    cfg = AlignConfig(renormalize=True)
    out = align_video("v", _caps([6.0]), [Frames(emb, duration=30.0)], [text], ["e"], cfg,
                      reference=[ref], reference_videos=[f"o{i}" for i in range(12)])
    r = out.iloc[0]
    clip = unit(emb[_rows(r["start"], r["end"], 30)].mean(axis=0))
    assert r["score"] == pytest.approx(float(text[0] @ clip), abs=1e-9)
    null = ref @ clip
    med = np.median(null)
    z = (float(text[0] @ clip) - med) / (1.4826 * np.median(np.abs(null - med)))
    assert r["null_z"] == pytest.approx(z, abs=1e-9)
