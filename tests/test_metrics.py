"""Retrieval metrics: exact agreement with a sorting reference, tie rules, hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from howtocap.errors import HowtocapError
from howtocap.metrics import (
    TIE_RULES,
    crosstask_recall,
    multi_caption_metrics,
    ranks,
    reference_metrics,
    reference_ranks,
    retrieval_metrics,
)


def caption_mask(caption_item: list[int] | np.ndarray, n_items: int) -> np.ndarray:
    """``(n_items, n_captions)`` boolean: which captions describe each item."""
    return np.asarray(caption_item)[None, :] == np.arange(n_items)[:, None]


@pytest.mark.parametrize("ties", TIE_RULES)
def test_matches_reference_without_ties(ties: str) -> None:
    rng = np.random.default_rng(1)
    sim = rng.standard_normal((300, 300))  # float64: no accidental ties
    sim[np.arange(300), np.arange(300)] += 1.5  # a half-decent "model"
    assert len(np.unique(sim)) == sim.size
    fast = retrieval_metrics(sim, ties=ties)
    assert fast == reference_metrics(sim, ties=ties)
    # without ties every rule gives the same answer
    assert fast == retrieval_metrics(sim, ties="optimistic")
    assert 0 < fast["R@1"] < fast["R@10"] < 100
    assert fast["n"] == 300


@pytest.mark.parametrize("ties", TIE_RULES)
@pytest.mark.parametrize("levels", [2, 4, 12])
def test_matches_reference_with_many_ties(ties: str, levels: int) -> None:
    rng = np.random.default_rng(levels)
    sim = rng.integers(0, levels, size=(257, 190)).astype(np.float64)  # rectangular
    gt = rng.integers(0, 190, size=257)
    fast = ranks(sim, gt, ties=ties, chunk=31)  # odd chunk: rows split across chunks
    ref = reference_ranks(sim, gt, ties=ties)
    np.testing.assert_array_equal(fast, ref)
    assert retrieval_metrics(sim, gt, ties=ties) == reference_metrics(sim, gt, ties=ties)


def test_tie_rules_order_and_differ_with_ties() -> None:
    rng = np.random.default_rng(3)
    sim = rng.integers(0, 3, size=(100, 100)).astype(np.float32)
    p, o, m = (ranks(sim, ties=t) for t in ("pessimistic", "optimistic", "mean"))
    assert (o <= m).all() and (m <= p).all() and (o < p).any()
    np.testing.assert_array_equal(m, (o + p) / 2)


def test_hand_computed_example() -> None:
    sim = np.array([[0.9, 0.5, 0.9],   # correct item 0 tied with wrong item 2
                    [0.8, 0.1, 0.3],   # two wrong items score higher
                    [0.2, 0.4, 0.7]])  # correct item on top
    np.testing.assert_array_equal(ranks(sim), [2, 3, 1])
    np.testing.assert_array_equal(ranks(sim, ties="optimistic"), [1, 3, 1])
    np.testing.assert_array_equal(ranks(sim, ties="mean"), [1.5, 3, 1])
    m = retrieval_metrics(sim)
    assert m["R@1"] == pytest.approx(100 / 3) and m["R@5"] == 100
    assert m["MedR"] == 2 and m["MeanR"] == 2 and m["n"] == 3
    mo = retrieval_metrics(sim, ties="optimistic")
    assert mo["R@1"] == pytest.approx(200 / 3) and mo["MedR"] == 1
    assert mo["MeanR"] == pytest.approx(5 / 3)


def test_constant_scores_are_worst_case_by_default() -> None:
    sim = np.zeros((20, 20), np.float32)
    assert retrieval_metrics(sim)["MedR"] == 20
    assert retrieval_metrics(sim)["R@10"] == 0
    assert retrieval_metrics(sim, ties="optimistic")["R@1"] == 100


def test_torch_input_and_fp16_agree_with_numpy() -> None:
    rng = np.random.default_rng(4)
    sim = rng.integers(-3, 3, size=(64, 80)).astype(np.float16)
    gt = rng.integers(0, 80, size=64)
    ref = reference_metrics(sim.astype(np.float32), gt)
    assert retrieval_metrics(torch.from_numpy(sim), torch.from_numpy(gt)) == ref
    assert retrieval_metrics(sim, gt) == ref


@pytest.mark.parametrize("ties", TIE_RULES)
def test_multi_caption_matches_reference(ties: str) -> None:
    rng = np.random.default_rng(5)
    n_items, n_caps = 30, 140
    item = np.concatenate([np.arange(n_items), rng.integers(0, n_items, n_caps - n_items)])
    sim = rng.integers(0, 4, size=(n_caps, n_items)).astype(np.float32)
    res = multi_caption_metrics(sim, item, ties=ties)
    assert res["t2v"] == reference_metrics(sim, item, ties=ties)
    assert res["v2t"] == reference_metrics(sim.T, caption_mask(item, n_items), ties=ties)
    assert res["t2v"]["n"] == n_caps and res["v2t"]["n"] == n_items


def test_multi_caption_v2t_counts_best_caption_hand_example() -> None:
    # 2 videos; captions 0,1 describe video 0, caption 2 describes video 1
    sim_t2v = np.array([[0.1, 0.9],
                        [0.8, 0.2],
                        [0.5, 0.3]])
    item = np.array([0, 0, 1])
    res = multi_caption_metrics(sim_t2v, item)
    # t2v: caption 0 ranks video 0 second, caption 1 first, caption 2 second (0.5 > 0.3)
    assert res["t2v"]["MeanR"] == pytest.approx(5 / 3)
    # v2t video 0: best own caption (0.8) is top; video 1: wrong caption 0 (0.9) beats 0.3
    # and wrong caption 1 (0.2) does not -> rank 2
    assert res["v2t"]["R@1"] == 50 and res["v2t"]["MeanR"] == 1.5


def test_single_caption_multi_equals_plain() -> None:
    rng = np.random.default_rng(6)
    sim = rng.standard_normal((50, 50)).astype(np.float32)
    res = multi_caption_metrics(sim, np.arange(50))
    assert res["t2v"] == retrieval_metrics(sim)
    assert res["v2t"] == retrieval_metrics(sim.T)


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(HowtocapError, match="NaN"):
        retrieval_metrics(np.full((3, 3), np.nan))
    with pytest.raises(HowtocapError, match="ties"):
        retrieval_metrics(np.eye(3), ties="random")
    with pytest.raises(HowtocapError, match="gt"):
        retrieval_metrics(np.eye(3), np.array([0, 1, 7]))
    with pytest.raises(HowtocapError, match="at least one caption"):
        multi_caption_metrics(np.eye(3), np.array([0, 0, 1]))


def test_crosstask_recall_tiny_fixture() -> None:
    gt_a = np.zeros((10, 3))
    gt_a[1:3, 0] = 1
    gt_a[5:7, 1] = 1   # step 2 does not occur in video a
    sc_a = np.zeros((10, 3))
    sc_a[2, 0] = 1     # hit
    sc_a[9, 1] = 1     # miss
    gt_b = np.zeros((4, 3))
    gt_b[0, 2] = 1
    sc_b = np.zeros((4, 3))
    sc_b[0, 2] = 1     # hit
    res = crosstask_recall([sc_a, sc_b], [gt_a, gt_b], tasks=["t1", "t2"])
    assert res["per_task"] == {"t1": 50.0, "t2": 100.0}
    assert res["recall"] == 75.0 and res["n_steps"] == 3
    same = crosstask_recall([sc_a, sc_b], [gt_a, gt_b], tasks=["t", "t"])
    assert same["recall"] == pytest.approx(200 / 3)


def test_owner_form_equals_dense_mask_across_chunks() -> None:
    rng = np.random.default_rng(7)
    item = np.concatenate([np.arange(23), rng.integers(0, 23, 77)])
    sim_v2t = rng.integers(0, 3, size=(23, 100)).astype(np.float32)
    for ties in TIE_RULES:
        np.testing.assert_array_equal(ranks(sim_v2t, owner=item, ties=ties, chunk=5),
                                      reference_ranks(sim_v2t, caption_mask(item, 23),
                                                      ties=ties))
    with pytest.raises(HowtocapError, match="owner indices"):
        ranks(sim_v2t, owner=np.full(100, 40))
