"""Retrieval metrics: behaviours the mutation check found untested
(benchmarks/robustness/bench_mutation.py). Expected values are counted by hand or by the sorting
reference, never taken from the function under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from howtocap.errors import HowtocapError
from howtocap.metrics import (
    crosstask_recall,
    metrics_from_ranks,
    multi_caption_metrics,
    ranks,
    reference_metrics,
    reference_ranks,
    retrieval_metrics,
)


def test_no_queries_give_nan_metrics_not_a_crash() -> None:
    out = metrics_from_ranks(np.array([]))
    assert out["n"] == 0
    assert all(math.isnan(out[k]) for k in ("R@1", "R@5", "R@10", "R@50", "MedR", "MeanR"))


def test_custom_recall_levels_reach_every_entry_point() -> None:
    sim = np.array([[0.9, 0.1, 0.2], [0.8, 0.7, 0.1], [0.1, 0.2, 0.3]])  # ranks 1, 2, 1
    for out in (retrieval_metrics(sim, recall_at=(2, 3)),
                reference_metrics(sim, recall_at=(2, 3)),
                multi_caption_metrics(sim, [0, 1, 2], recall_at=(2, 3))["t2v"],
                multi_caption_metrics(sim, [0, 1, 2], recall_at=(2, 3))["v2t"]):
        assert "R@1" not in out and out["R@2"] == 100.0 and out["R@3"] == 100.0
    assert retrieval_metrics(sim, recall_at=(1,))["R@1"] == pytest.approx(200 / 3)


def test_reference_ranks_default_to_the_pessimistic_rule() -> None:
    sim = np.ones((3, 3))  # every item ties: pessimistic puts the correct one last
    assert reference_ranks(sim).tolist() == [3.0, 3.0, 3.0]
    assert ranks(sim).tolist() == [3.0, 3.0, 3.0]


def test_float64_scores_are_compared_at_full_precision() -> None:
    """1e-12 apart: float32 would make these a tie and (pessimistic) rank the query 2nd."""
    sim = np.array([[0.5 + 1e-12, 0.5], [0.5, 0.5 + 1e-12]], dtype=np.float64)
    assert ranks(sim).tolist() == [1.0, 1.0]
    assert ranks(sim, np.array([[True, False], [False, True]])).tolist() == [1.0, 1.0]


def test_integer_and_grad_tracking_scores_rank_like_floats() -> None:
    ints = np.array([[3, 1, 3], [0, 2, 5], [4, 4, 4]], dtype=np.int64)
    mask = np.eye(3, dtype=bool)
    owner = np.array([0, 1, 2])
    as_float = ints.astype(np.float64)
    for ties in ("pessimistic", "optimistic", "mean"):
        want = reference_ranks(as_float, ties=ties)
        assert ranks(ints, ties=ties).tolist() == want.tolist()
        assert ranks(ints, mask, ties=ties).tolist() == want.tolist()
        assert ranks(ints.T, owner=owner, ties=ties).tolist() == \
            reference_ranks(as_float.T, mask, ties=ties).tolist()
    model_out = torch.tensor(as_float, requires_grad=True)  # straight from a model
    assert ranks(model_out).tolist() == reference_ranks(as_float).tolist()


def test_bad_shapes_and_rules_are_named_in_the_error() -> None:
    with pytest.raises(HowtocapError, match="2-D"):
        ranks(np.zeros(4))
    with pytest.raises(HowtocapError, match="pessimistic, optimistic, mean"):
        ranks(np.zeros((2, 2)), ties="best")
    with pytest.raises(HowtocapError, match="diagonal"):
        ranks(np.zeros((3, 2)))


def test_multi_caption_refuses_bad_caption_items() -> None:
    sim = np.zeros((4, 3))
    with pytest.raises(HowtocapError, match="3 entries for 4 captions"):
        multi_caption_metrics(sim, [0, 1, 2])
    for bad in ([0, 1, 2, 3], [0, 1, 2, -1]):  # one past the end, or negative
        with pytest.raises(HowtocapError, match=r"\[0, 3\)"):
            multi_caption_metrics(sim, bad)
    with pytest.raises(HowtocapError, match="every item needs"):
        multi_caption_metrics(sim, [0, 1, 1, 0])


def test_crosstask_without_task_names_averages_over_videos() -> None:
    """Video a: 2 of 2 steps found; video b: 0 of 1. Per video: (100 + 0) / 2 = 50, not the
    pooled 2 / 3 that one shared task would give."""
    gt_a = np.array([[1, 0], [0, 1], [0, 0]])
    sc_a = np.array([[0.9, 0.1], [0.1, 0.9], [0.0, 0.0]])
    gt_b = np.array([[1], [0]])
    sc_b = np.array([[0.1], [0.9]])
    out = crosstask_recall([sc_a, sc_b], [gt_a, gt_b])
    assert out["recall"] == pytest.approx(50.0) and out["per_task"] == {"0": 100.0, "1": 0.0}
    assert out["n_steps"] == 3
    pooled = crosstask_recall([sc_a, sc_b], [gt_a, gt_b], tasks=["t", "t"])
    assert pooled["recall"] == pytest.approx(200 / 3)


def test_crosstask_with_no_steps_present_is_nan_and_bad_inputs_are_named() -> None:
    out = crosstask_recall([np.zeros((3, 2))], [np.zeros((3, 2))])
    assert math.isnan(out["recall"]) and out["n_steps"] == 0
    with pytest.raises(HowtocapError, match="2 score arrays for 1 ground-truth"):
        crosstask_recall([np.zeros((2, 2))] * 2, [np.zeros((2, 2))])
    with pytest.raises(HowtocapError, match="1 task names for 2 videos"):
        crosstask_recall([np.zeros((2, 2))] * 2, [np.zeros((2, 2))] * 2, tasks=["t"])
    with pytest.raises(HowtocapError, match="n_seconds, n_steps"):
        crosstask_recall([np.zeros((3, 2))], [np.zeros((2, 2))])


def test_minus_infinity_scores_are_allowed_only_nan_is_refused() -> None:
    """-inf is how callers mask items out; only NaN makes a rank meaningless."""
    sim = np.array([[0.2, -np.inf, 0.1], [-np.inf, 0.5, np.inf]])
    assert ranks(sim).tolist() == [1.0, 2.0]
    with pytest.raises(HowtocapError, match="NaN"):
        ranks(np.array([[0.2, np.nan], [0.1, 0.3]]))


def test_a_mask_with_several_correct_items_ranks_the_best_of_them() -> None:
    sim = np.array([[0.9, 0.5, 0.7, 0.1], [0.2, 0.3, 0.8, 0.6], [0.4, 0.4, 0.4, 0.4]])
    mask = np.array([[False, True, True, False], [True, False, False, True],
                     [False, False, True, True]])
    # row 0: best correct 0.7, one wrong above; row 1: best correct 0.6, one wrong (0.8)
    # above; row 2: all tie, two wrong items tie with the best correct
    assert ranks(sim, mask).tolist() == [2.0, 2.0, 3.0]
    assert ranks(sim, mask, ties="optimistic").tolist() == [2.0, 2.0, 1.0]
    for chunk in (1, 2):
        assert ranks(sim, mask, chunk=chunk).tolist() == [2.0, 2.0, 3.0]


def test_ground_truth_bounds_are_checked_at_the_edges() -> None:
    sim = np.zeros((3, 3))
    with pytest.raises(HowtocapError, match=r"\[0, 3\)"):
        ranks(sim, np.array([0, 1, 3]))  # one past the last item
    with pytest.raises(HowtocapError, match="at least one correct item"):
        ranks(sim, np.array([[True, False, False], [False, False, False],
                             [False, False, True]]))
    with pytest.raises(HowtocapError, match="either gt or owner"):
        ranks(sim, np.array([0, 1, 2]), owner=np.array([0, 1, 2]))
    with pytest.raises(HowtocapError, match=r"owner indices must lie in \[0, 3\)"):
        ranks(np.zeros((3, 4)), owner=np.array([0, 1, 2, 3]))  # item 3: a query not there
    with pytest.raises(HowtocapError, match="at least one correct item"):
        ranks(sim, owner=np.array([0, 0, 1]))  # the last query owns nothing
