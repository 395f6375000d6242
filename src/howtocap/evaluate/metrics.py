"""Retrieval and step-localisation metrics for evaluation: the maths lives in
:mod:`howtocap.metrics` (pure, at the bottom of the package, so training uses it too); this
module keeps the documented ``howtocap.evaluate.metrics`` names."""

from __future__ import annotations

from howtocap.metrics import (
    RECALL_AT,
    TIE_RULES,
    caption_mask,
    crosstask_recall,
    metrics_from_ranks,
    multi_caption_metrics,
    ranks,
    reference_metrics,
    reference_ranks,
    retrieval_metrics,
)

__all__ = ["RECALL_AT", "TIE_RULES", "caption_mask", "crosstask_recall", "metrics_from_ranks",
           "multi_caption_metrics", "ranks", "reference_metrics", "reference_ranks",
           "retrieval_metrics"]
