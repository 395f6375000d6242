"""Text-video retrieval evaluation: metrics, benchmark readers, clip embeddings, ``evaluate``.

Metrics and readers import eagerly (numpy/torch only); ``evaluate`` and ``video_embeddings``
load the video decoder on first use, so training can import the metrics cheaply.
"""

from __future__ import annotations

from typing import Any

from howtocap.evaluate.benchmarks import KINDS, EvalSample, read_benchmark
from howtocap.evaluate.metrics import (
    TIE_RULES,
    crosstask_recall,
    metrics_from_ranks,
    multi_caption_metrics,
    ranks,
    reference_metrics,
    retrieval_metrics,
)

__all__ = ["KINDS", "TIE_RULES", "EvalSample", "read_benchmark", "ranks", "retrieval_metrics",
           "reference_metrics", "multi_caption_metrics", "metrics_from_ranks",
           "crosstask_recall", "evaluate", "video_embeddings", "score"]


def __getattr__(name: str) -> Any:
    if name in ("evaluate", "score"):
        from howtocap.evaluate import run

        return getattr(run, name)
    if name == "video_embeddings":
        from howtocap.evaluate.embed import video_embeddings

        return video_embeddings
    raise AttributeError(name)
