"""``DIR/align_report.html``: is the filter keeping the right pairs, and how far did they move?

One self-contained HTML file (plots embedded as base64 PNG) so it can be mailed or archived.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from howtocap.atomic import atomic_write_text


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _score_plot(df: pd.DataFrame, thr: float) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    scores = df["score"].to_numpy(dtype=float)
    kept = df["kept"].to_numpy(dtype=bool)
    bins: Any = 10
    if len(scores):
        bins = np.histogram_bin_edges(scores, bins=min(50, max(5, len(scores) // 4)))
        if math.isfinite(thr) and bins[0] < thr < bins[-1]:
            bins = np.union1d(bins, [thr])  # no bar straddles the threshold
    ax.hist([scores[kept], scores[~kept]], bins=bins, stacked=True,
            color=["tab:green", "tab:gray"], label=["kept", "dropped"])
    if math.isfinite(thr):
        ax.axvline(thr, color="tab:red", linestyle="--", label=f"threshold {thr:.4f}")
    ax.set_xlabel("best score (text · mean frame embedding)")
    ax.set_ylabel("captions")
    ax.set_title("Score of each caption at its best offset")
    ax.legend(loc="upper left")
    return _png(fig)


def _offset_plot(df: pd.DataFrame) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    off = df["offset"].to_numpy(dtype=float)
    kept = df["kept"].to_numpy(dtype=bool)
    if len(off):
        lo, hi = math.floor(off.min()), math.ceil(off.max())
        # one bin per second for the usual ±T range; far clamps (captions past the end) widen it
        bins = np.arange(lo - 0.5, hi + 1.5, 1.0) if hi - lo <= 80 else 80
        ax.hist([off[kept], off[~kept]], bins=bins, stacked=True,
                color=["tab:green", "tab:gray"], label=["kept", "dropped"])
        ax.legend(loc="upper left")
    ax.set_xlabel("applied offset (s): aligned start − original start")
    ax.set_ylabel("captions")
    ax.set_title("Chosen offsets")
    return _png(fig)


def _null_z_plot(df: pd.DataFrame, bar: float) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    z = df["null_z"].to_numpy(dtype=float)
    kept = df["kept"].to_numpy(dtype=bool)
    # the text test's drops get their own colour: they may stand above the bar
    chat = df["chatter"].to_numpy(dtype=bool) & ~kept if "chatter" in df \
        else np.zeros(len(df), dtype=bool)
    ok = np.isfinite(z)
    if ok.any():
        ax.hist([z[ok & kept], z[ok & ~kept & ~chat], z[ok & chat]],
                bins=min(50, max(5, int(ok.sum()) // 4)), stacked=True,
                color=["tab:green", "tab:gray", "tab:orange"],
                label=["kept", "dropped", "dropped: channel chatter (text)"])
    ax.axvline(bar, color="tab:red", linestyle="--", label=f"default bar z = {bar:g}")
    ax.set_xlabel("null z: mean of z vs other videos' captions on the clip and vs other "
                  "videos' clips")
    ax.set_ylabel("captions")
    ax.set_title("The default filter's test")
    ax.legend(loc="upper left")
    return _png(fig)


def _per_video_plot(df: pd.DataFrame) -> str:
    frac = df.groupby("video_id")["kept"].mean().sort_values() if len(df) else pd.Series()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if len(frac) <= 40:
        ax.barh(range(len(frac)), frac.to_numpy(), color="tab:blue")
        ax.set_yticks(range(len(frac)), [str(v)[:30] for v in frac.index], fontsize=7)
        ax.set_xlabel("kept fraction")
        ax.set_xlim(0, 1)
    else:
        ax.hist(frac.to_numpy(), bins=np.linspace(0, 1, 21), color="tab:blue")
        ax.set_xlabel("kept fraction of a video")
        ax.set_ylabel("videos")
    ax.set_title("Kept fraction per video")
    return _png(fig)


def summary_numbers(df: pd.DataFrame, thr: float, outside: int = 0,
                    rule: str | None = None, chatter: int = 0,
                    chatter_only: int = 0) -> dict[str, Any]:
    """The headline numbers shown in the report's table (``outside``: captions the guard
    dropped because no window within ±T lies inside the video; ``chatter``: captions the
    default filter's text test dropped, ``chatter_only`` of them the null z bar alone would
    have kept)."""
    n = len(df)
    kept = int(df["kept"].sum()) if n else 0
    off = df["offset"].to_numpy(dtype=float) if n else np.zeros(0)
    partial = int(df.loc[df["partial"], "video_id"].nunique()) if n and "partial" in df else 0
    return {
        "videos with captions": int(df["video_id"].nunique()) if n else 0,
        "caption–clip pairs": n,
        "kept": kept,
        "kept fraction": round(kept / n, 4) if n else 0.0,
        "filter": rule or ("score threshold" if math.isfinite(thr) else "none"),
        "threshold": round(thr, 6) if math.isfinite(thr) else "none (no score threshold)",
        "dropped: window outside the video (±T)": outside,
        "dropped: channel chatter (text test)":
            f"{chatter} ({chatter_only} of them above the null z bar)" if chatter else 0,
        "mean score": round(float(df["score"].mean()), 6) if n else float("nan"),
        "moved (offset ≠ 0)": int((np.abs(off) > 1e-9).sum()),
        "mean |offset| (s)": round(float(np.abs(off).mean()), 3) if n else 0.0,
        "videos decoded only partly": partial,
    }


def write_align_report(aligned: pd.DataFrame, threshold: float, config: Mapping[str, Any],
                       path: Path, outside: pd.DataFrame | None = None) -> Path:
    """Write the report; ``config`` is what ``DIR/config/align.json`` records; ``outside``
    the captions the guard dropped (counted, and the first 20 listed)."""
    outside = outside if outside is not None else pd.DataFrame()
    nums = summary_numbers(aligned, threshold, len(outside), config.get("filter"),
                           int(config.get("chatter_dropped", 0)),
                           int(config.get("chatter_dropped_only_by_text", 0)))
    rows = _kv_rows(nums)
    cfg_rows = _kv_rows(config)
    imgs = [("Scores", _score_plot(aligned, threshold)), ("Offsets", _offset_plot(aligned)),
            ("Per video", _per_video_plot(aligned))]
    if str(config.get("filter", "")).startswith("default filter") and "null_z" in aligned:
        bar = config.get("null_z")
        imgs.append(("Default filter", _null_z_plot(aligned, float(
            bar if bar is not None else _default_bar()))))
    dropped = ""
    if len(outside):
        dropped = _dropped_table(
            "window outside the video", outside,
            "No clip within ±T of these captions lies inside the (decoded) video, so they were "
            "not moved further than T but dropped, as the reference does.", with_z=False)
    if config.get("chatter_dropped") and "chatter" in aligned:
        dropped += _dropped_table(
            "channel chatter", aligned[aligned["chatter"] & ~aligned["kept"]],
            "The default filter also drops captions the LLM stage's chatter patterns flag "
            "(subscribing, sponsors, greetings; column <code>chatter</code>); "
            "<code>--keep-chatter</code> keeps them when their null z passes.", with_z=True)
    figs = "".join(f'<figure><img alt="{t}" src="data:image/png;base64,{b}"/>'
                   f"<figcaption>{t}</figcaption></figure>" for t, b in imgs)
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>howtocap: filter &amp; align</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse;margin:1em 0}}th,td{{border:1px solid #ccc;padding:4px 8px;
text-align:left}}figure{{display:inline-block;margin:0 1em 1em 0}}</style></head>
<body><h1>Filter &amp; align</h1>
<h2>Summary</h2><table>{rows}</table>
{figs}
{dropped}
<h2>Configuration</h2><table>{cfg_rows}</table>
</body></html>
"""
    atomic_write_text(path, doc)
    return path


def _kv_rows(items: dict) -> str:
    return "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in items.items())


def _dropped_table(why: str, rows: pd.DataFrame, explain: str, with_z: bool) -> str:
    """One section listing (up to 20 of) the captions a rule dropped, so users can audit it."""
    z_head = "<th>null z</th>" if with_z else ""
    cells = "".join(
        f"<tr><td>{html.escape(str(r.video_id))}</td><td>{float(r.orig_start):.1f}</td>"
        + (f"<td>{float(getattr(r, 'null_z', math.nan)):.2f}</td>" if with_z else "")
        + f"<td>{html.escape(str(r.text))}</td></tr>" for r in rows.head(20).itertuples())
    return (f"<h2>Dropped: {why} ({len(rows)})</h2><p>{explain}</p><table><tr><th>video</th>"
            f"<th>start (s)</th>{z_head}<th>text</th></tr>{cells}</table>")


def _default_bar() -> float:
    from howtocap.align.filter import DEFAULT_NULL_Z

    return DEFAULT_NULL_Z
