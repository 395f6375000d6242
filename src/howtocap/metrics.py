"""Retrieval metrics (R@K, median/mean rank) that are fast, exact and explicit about ties.
The rank of a query is ``1 + (wrong items scoring strictly higher than the correct one)`` plus a
tie term for wrong items scoring exactly the same: all of them (``pessimistic``, the default:
constant scores get the worst rank, never a lucky one), none (``optimistic``) or half (``mean``,
scipy's ``average``; ranks may then be fractional). With several correct items for a query
(video-to-text on MSVD), the best-scoring one counts, against wrong items only (docs/eval.md).
The common ``argsort(-sim)`` recipe leaves ties to the sort's internal order, so its numbers can
move with the hardware or library version. Here ranks come from counting, never from sorting:
``O(n*m)`` comparisons in row chunks, on the GPU when ``sim`` is a CUDA tensor.
Pure maths (numpy and torch), so it sits at the bottom: training and ``evaluate`` both use it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from howtocap.errors import HowtocapError

TIE_RULES = ("pessimistic", "optimistic", "mean")
RECALL_AT = (1, 5, 10, 50)

ArrayLike = np.ndarray | torch.Tensor


def _check_ties(ties: str) -> None:
    if ties not in TIE_RULES:
        raise HowtocapError(f"ties must be one of {', '.join(TIE_RULES)}, not {ties!r}")


def _as_tensor(sim: ArrayLike) -> torch.Tensor:
    """A 2-D float tensor sharing memory with ``sim`` where possible (fp16 is widened exactly)."""
    t = sim if isinstance(sim, torch.Tensor) else torch.from_numpy(np.asarray(sim))
    if t.ndim != 2:
        raise HowtocapError(f"a similarity matrix must be 2-D, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        t = t.to(torch.float64)
    elif t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.detach()


def _gt_tensor(gt: ArrayLike | None, n_q: int, n_items: int, device: torch.device
               ) -> torch.Tensor:
    """``gt`` as either a 1-D index tensor or a 2-D boolean mask, validated."""
    if gt is None:
        if n_q > n_items:
            raise HowtocapError(f"default ground truth is the diagonal, but there are {n_q} "
                                f"queries and only {n_items} items")
        return torch.arange(n_q, device=device)
    g = gt if isinstance(gt, torch.Tensor) else torch.from_numpy(np.asarray(gt))
    g = g.to(device)
    if g.ndim == 1:
        if len(g) != n_q:
            raise HowtocapError(f"gt has {len(g)} entries for {n_q} queries")
        g = g.long()
        if n_q and (int(g.min()) < 0 or int(g.max()) >= n_items):
            raise HowtocapError(f"gt indices must lie in [0, {n_items})")
        return g
    if g.ndim == 2:
        if tuple(g.shape) != (n_q, n_items):
            raise HowtocapError(f"gt mask has shape {tuple(g.shape)}, sim has {(n_q, n_items)}")
        g = g.bool()
        if n_q and not bool(g.any(dim=1).all()):
            raise HowtocapError("every query needs at least one correct item in the gt mask")
        return g
    raise HowtocapError("gt must be a 1-D index array or a 2-D boolean mask")


def ranks(sim: ArrayLike, gt: ArrayLike | None = None, *, ties: str = "pessimistic",
          chunk: int | None = None, owner: ArrayLike | None = None) -> np.ndarray:
    """1-based rank of the (best) correct item for every query, as float64 numpy.
    ``sim`` is ``(n_queries, n_items)``; ``gt`` is ``None`` (item ``i`` is correct for query
    ``i``), a 1-D array of correct item indices, or a 2-D boolean mask of correct items.
    Memory is bounded by processing ``chunk`` rows at a time (default: ~64 MB per chunk).
    ``owner`` (instead of ``gt``) is the compact form of a mask: item ``j`` is correct for
    query ``owner[j]`` (video-to-text with several captions per video, without a dense mask)."""
    _check_ties(ties)
    s = _as_tensor(sim)
    n_q, n_items = s.shape
    if owner is not None:
        if gt is not None:
            raise HowtocapError("give either gt or owner, not both")
        own = torch.as_tensor(np.asarray(owner, dtype=np.int64), device=s.device)
        if own.shape != (n_items,):
            raise HowtocapError(f"owner has {own.numel()} entries for {n_items} items")
        if n_items and (int(own.min()) < 0 or int(own.max()) >= n_q):
            raise HowtocapError(f"owner indices must lie in [0, {n_q})")
        if n_q and bool((torch.bincount(own, minlength=n_q) == 0).any()):
            raise HowtocapError("every query needs at least one correct item")
        g = own
    else:
        g = _gt_tensor(gt, n_q, n_items, s.device)
    if chunk is None:
        chunk = max(1, (1 << 24) // max(n_items, 1))
    out = torch.empty(n_q, dtype=torch.float64, device=s.device)
    for a in range(0, n_q, chunk):
        rows = s[a:a + chunk].contiguous()  # a transposed (v2t) view is strided
        # one cheap reduction instead of an isnan pass; the exact check only if it trips
        if not bool(torch.isfinite(rows.sum())) and bool(torch.isnan(rows).any()):
            raise HowtocapError("the similarity matrix contains NaN")
        if owner is None and g.ndim == 1:
            best = rows.gather(1, g[a:a + chunk, None])  # (r, 1)
            correct: torch.Tensor | None = None
        else:
            if owner is not None:
                q = torch.arange(a, a + len(rows), device=s.device)
                correct = g[None, :] == q[:, None]
            else:
                correct = g[a:a + chunk]
            neg_inf = torch.tensor(float("-inf"), dtype=rows.dtype, device=rows.device)
            best = torch.where(correct, rows, neg_inf).amax(1, keepdim=True)
        # no correct item beats the best correct one, so only wrong items are ever "higher";
        # each rule needs one comparison pass over the chunk, ``mean`` needs two
        if ties == "optimistic":
            r = 1.0 + (rows > best).sum(1).double()
        else:
            at_least = (rows >= best) if correct is None else (rows >= best) & ~correct
            pess = at_least.sum(1).double() + (1.0 if correct is not None else 0.0)
            if ties == "pessimistic":
                r = pess
            else:
                r = (pess + 1.0 + (rows > best).sum(1).double()) / 2.0
        out[a:a + chunk] = r
    return out.cpu().numpy()


def metrics_from_ranks(r: np.ndarray, recall_at: tuple[int, ...] = RECALL_AT) -> dict:
    """R@K in percent, median and mean rank, and the number of queries."""
    r = np.asarray(r, dtype=np.float64)
    n = len(r)
    out: dict[str, float | int] = {f"R@{k}": float(100.0 * np.mean(r <= k)) if n
                                   else float("nan") for k in recall_at}
    out["MedR"] = float(np.median(r)) if n else float("nan")
    out["MeanR"] = float(np.mean(r)) if n else float("nan")
    out["n"] = n
    return out


def retrieval_metrics(sim: ArrayLike, gt: ArrayLike | None = None, *,
                      ties: str = "pessimistic", recall_at: tuple[int, ...] = RECALL_AT
                      ) -> dict:
    """R@1/5/10/50 (percent), MedR, MeanR and n for a ``(n_queries, n_items)`` similarity.
    Text-to-video: ``sim = text_emb @ video_emb.T``; video-to-text: pass ``sim.T``. See the
    module docstring for the tie rules and for ``gt`` as a mask (several correct items)."""
    return metrics_from_ranks(ranks(sim, gt, ties=ties), recall_at)


def reference_ranks(sim: ArrayLike, gt: ArrayLike | None = None, *,
                    ties: str = "pessimistic") -> np.ndarray:
    """The same ranks from a full sort of every row (slow; for tests and the benchmark).
    Each row is sorted by descending score with an explicit secondary key that puts correct
    items after (pessimistic) or before (optimistic) equal-scoring wrong ones; the rank is the
    1-based position of the first correct item. ``mean`` averages the two orders."""
    _check_ties(ties)
    s = _as_tensor(sim).cpu().numpy()
    n_q, n_items = s.shape
    g = _gt_tensor(gt, n_q, n_items, torch.device("cpu")).numpy()
    mask = g if g.ndim == 2 else g[:, None] == np.arange(n_items)

    def one_order(correct_last: bool) -> np.ndarray:
        out = np.empty(n_q, dtype=np.float64)
        for i in range(n_q):
            secondary = mask[i] if correct_last else ~mask[i]
            order = np.lexsort((secondary, -s[i]))  # last key is the primary one
            out[i] = 1 + np.flatnonzero(mask[i][order])[0]
        return out

    if ties == "pessimistic":
        return one_order(True)
    if ties == "optimistic":
        return one_order(False)
    return (one_order(True) + one_order(False)) / 2.0


def reference_metrics(sim: ArrayLike, gt: ArrayLike | None = None, *,
                      ties: str = "pessimistic", recall_at: tuple[int, ...] = RECALL_AT
                      ) -> dict:
    """:func:`retrieval_metrics` computed by sorting; must agree with it exactly."""
    return metrics_from_ranks(reference_ranks(sim, gt, ties=ties), recall_at)


def multi_caption_metrics(sim_t2v: ArrayLike, caption_item: ArrayLike, *,
                          ties: str = "pessimistic", recall_at: tuple[int, ...] = RECALL_AT
                          ) -> dict[str, dict]:
    """``{"t2v": …, "v2t": …}`` when an item (video/clip) may have several captions.
    ``sim_t2v`` is ``(n_captions, n_items)``; ``caption_item[j]`` is the item caption ``j``
    describes. Text-to-video: every caption is a query whose one correct item is its video.
    Video-to-text: every item is a query and counts as a hit at K if *any* of its captions is
    ranked within the top K (rank of its best caption among wrong captions). With one caption
    per item this equals :func:`retrieval_metrics` in both directions."""
    s = _as_tensor(sim_t2v)
    ci = np.asarray(caption_item, dtype=np.int64)
    n_items = s.shape[1]
    if len(ci) != s.shape[0]:
        raise HowtocapError(f"caption_item has {len(ci)} entries for {s.shape[0]} captions")
    if len(ci) and (ci.min() < 0 or ci.max() >= n_items):
        raise HowtocapError(f"caption_item indices must lie in [0, {n_items})")
    if len(np.unique(ci)) != n_items:
        raise HowtocapError("every item needs at least one caption")
    t2v = retrieval_metrics(s, ci, ties=ties, recall_at=recall_at)
    v2t = metrics_from_ranks(ranks(s.T, owner=ci, ties=ties), recall_at)
    return {"t2v": t2v, "v2t": v2t}


def crosstask_recall(scores: list[np.ndarray], gt: list[np.ndarray],
                     tasks: list[str] | None = None) -> dict:
    """Step-localisation recall (CrossTask, as in the HowTo100M paper): ``scores[v]`` and
    ``gt[v]`` are ``(n_seconds, n_steps)``; each step of the video is predicted at its best
    second, a hit if ``gt`` is nonzero there. Averaged over each task's steps, then over tasks
    (without ``tasks`` each video is one). The ordered inference is ``evaluate.crosstask``'s."""
    if len(scores) != len(gt):
        raise HowtocapError(f"{len(scores)} score arrays for {len(gt)} ground-truth arrays")
    tasks = list(tasks) if tasks is not None else [str(i) for i in range(len(scores))]
    if len(tasks) != len(scores):
        raise HowtocapError(f"{len(tasks)} task names for {len(scores)} videos")
    for sc, g in zip(scores, gt, strict=True):
        if np.shape(sc) != np.shape(g) or np.ndim(sc) != 2:
            raise HowtocapError(f"scores {np.shape(sc)} and gt {np.shape(g)} must both be "
                                "(n_seconds, n_steps)")
    r = step_recall([np.asarray(sc).argmax(axis=0) for sc in scores],
                    [np.asarray(g) != 0 for g in gt], tasks)
    return {"recall": r["recall"], "per_task": {t: v["recall"] for t, v in r["per_task"].items()},
            "n_steps": sum(v["steps"] for v in r["per_task"].values())}


def step_recall(seconds: list[np.ndarray], gt: list[np.ndarray], tasks: list[str]
                ) -> dict[str, Any]:
    """Recall of predicted step seconds against ``gt`` masks, per task and averaged over tasks.
    ``seconds[v][k]`` is the second predicted for step ``k`` of video ``v``; a step counts as
    annotated when ``gt[v][:, k]`` has any True, and as found when ``gt[v][seconds[v][k], k]``."""
    hits: dict[str, int] = {}
    total: dict[str, int] = {}
    for sec, g, task in zip(seconds, gt, tasks, strict=True):
        g = np.asarray(g, bool)
        k = np.arange(g.shape[1])
        hits[task] = hits.get(task, 0) + int(g[np.asarray(sec), k].sum())
        total[task] = total.get(task, 0) + int(g.any(axis=0).sum())
    per_task = {t: {"recall": 100.0 * hits[t] / total[t], "hits": hits[t], "steps": total[t]}
                for t in sorted(total) if total[t]}
    mean = float(np.mean([v["recall"] for v in per_task.values()])) if per_task else math.nan
    return {"recall": mean, "per_task": per_task}
