"""What every benchmark shares: best-of-N wall time (other jobs on the machine only ever add
time, so the minimum is the fairest single figure)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_time(fn: Callable[[], T], repeats: int = 1) -> tuple[float, T]:
    """``(fastest seconds of `repeats` calls, the last call's result)``."""
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out  # type: ignore[return-value]
