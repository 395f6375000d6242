"""Text-video retrieval evaluation: metrics, benchmark readers, clip embeddings, ``evaluate``.

Every name loads on first use (metrics need torch, ``evaluate`` the video decoder), so the CLI
importing ``evaluate.cli`` stays cheap and training can import the metrics alone.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "KINDS": "benchmarks", "EvalSample": "benchmarks", "read_benchmark": "benchmarks",
    "TIE_RULES": "metrics", "crosstask_recall": "metrics", "metrics_from_ranks": "metrics",
    "multi_caption_metrics": "metrics", "ranks": "metrics", "reference_metrics": "metrics",
    "retrieval_metrics": "metrics", "evaluate": "run", "score": "run",
    "video_embeddings": "embed",
    "evaluate_crosstask": "crosstask", "read_release": "crosstask", "dp_inference": "crosstask",
    "step_recall": "crosstask", "write_crosstask_release": "crosstask_samples",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"howtocap.evaluate.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
