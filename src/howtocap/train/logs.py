"""``train_log.csv`` (one row per epoch; epoch 0 = before training) and ``train_log.png``."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from howtocap.atomic import atomic_write_text

LOG_COLUMNS = ["epoch", "steps", "loss", "loss_main", "reg", "logit_scale", "lr", "seconds",
               "pairs_per_s", "R@1", "R@5", "R@10", "R@50", "MedR", "MeanR"]


def write_logs(out: Path, history: list[dict[str, Any]]) -> None:
    """``train_log.csv`` (one row per epoch; epoch 0 = before training) and ``train_log.png``."""
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, LOG_COLUMNS, restval="", extrasaction="ignore")
    w.writeheader()
    w.writerows(history)
    atomic_write_text(out / "train_log.csv", buf.getvalue())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    tr = [r for r in history if r["epoch"] > 0]
    a.plot([r["epoch"] for r in tr], [r["loss"] for r in tr], "o-", label="train loss")
    a.set(xlabel="epoch", ylabel="loss")
    a.legend()
    for k in ("R@1", "R@5", "R@10"):
        pts = [(r["epoch"], r[k]) for r in history if k in r]
        if pts:
            b.plot(*zip(*pts, strict=True), "o-", label=k)
    b.set(xlabel="epoch (0 = before training)", ylabel="held-out text→video recall (%)")
    if b.lines:
        b.legend()
    fig.tight_layout()
    fig.savefig(out / ".train_log.png.tmp.png", dpi=100)
    plt.close(fig)
    (out / ".train_log.png.tmp.png").replace(out / "train_log.png")
