"""The paper's retrieval metrics (§4): R@k among the gold captions of the same video, NDCG@k
over the goal's script sentences with ROUGE-L(gold caption, sentence) as graded relevance, and
R@1 on *isolated* frames (steps whose key objects no neighbouring step shares)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from howtocap.tdr.data import iou

ISOLATED_IOU = 0.05


def gold_ranks(scores: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """1-based rank of each row's gold column; ties count against it (a scorer that gives every
    candidate the same score earns the worst rank, not a lucky one)."""
    scores = np.asarray(scores, np.float64)
    g = scores[np.arange(len(gold)), gold]
    others = scores >= g[:, None]
    others[np.arange(len(gold)), gold] = False
    return 1 + others.sum(axis=1)


def recall_at(ranks: np.ndarray, ks: Sequence[int] = (1, 3, 5)) -> dict[str, float]:
    return {f"R@{k}": float(np.mean(ranks <= k)) if len(ranks) else float("nan") for k in ks}


def ndcg_at(scores: np.ndarray, relevance: np.ndarray, k: int) -> float:
    """NDCG@k of one ranking: DCG = Σ rel_i / log2(i + 1) over the top k by score, divided by
    the DCG of the ideal order. Ties in score are broken against relevance (pessimistic)."""
    scores = np.asarray(scores, np.float64)
    rel = np.asarray(relevance, np.float64)
    order = np.lexsort((rel, -scores))  # by score desc, then by relevance asc
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    top = rel[order[:k]]
    ideal = np.sort(rel)[::-1][:k]
    idcg = float((ideal * disc[:len(ideal)]).sum())
    return float((top * disc[:len(top)]).sum()) / idcg if idcg > 0 else 0.0


_scorer = None


def rouge_l(references: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
    """ROUGE-L F-measure of every (reference, candidate) pair, ``[len(refs), len(cands)]``
    (Google's ``rouge-score``, stemmed as in its ROUGE-1.5.5 port)."""
    global _scorer
    if _scorer is None:
        from rouge_score import rouge_scorer

        _scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return np.array([[_scorer.score(r, c)["rougeL"].fmeasure for c in candidates]
                     for r in references], np.float64).reshape(len(references), len(candidates))


def isolated_steps(objects: Sequence[frozenset[str]], threshold: float = ISOLATED_IOU
                   ) -> list[bool]:
    """Steps (in time order) whose key-object IoU with both neighbouring steps is below
    ``threshold``; a missing neighbour (first or last step) shares nothing."""
    pad = [frozenset(), *objects, frozenset()]  # iou with an empty set is 0
    return [max(iou(pad[i + 1], pad[i]), iou(pad[i + 1], pad[i + 2])) < threshold
            for i in range(len(objects))]
