"""``DIR/align_report.html``: is the filter keeping the right pairs, and how far did they move?

One self-contained HTML file (plots embedded as base64 PNG) so it can be mailed or archived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from howtocap.align.config import DEFAULT_NULL_Z
from howtocap.atomic import atomic_write_text
from howtocap.io.html import esc, figure, kv_rows, page, whole_numbers
from howtocap.io.html import png as _png  # by this name: tests skip the rasterising


def _finish(fig: Any, ax: Any, title: str, ylabel: str = "captions", legend: bool = True
            ) -> str:
    """The plots' common last steps: whole-number y ticks, title, legend, PNG."""
    ax.set_ylabel(ylabel)
    whole_numbers(ax.yaxis)
    ax.set_title(title)
    if legend:
        ax.legend(loc="upper left")
    return _png(fig)


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
    return _finish(fig, ax, "Score of each caption at its best offset")


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
    ax.set_xlabel("applied offset (s): aligned start − original start")
    return _finish(fig, ax, "Chosen offsets", legend=bool(len(off)))


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
    return _finish(fig, ax, "The default filter's test")


PLOT_ROWS = 200_000  # rows the plots draw at most: a random sample of them beyond
LISTED = 20  # dropped captions a section lists


class ReportStats:
    """What the report shows, gathered a window of whole videos at a time (``add``), so a
    run of millions of captions is never held: its numbers are exact sums and counts; its
    plots draw every row up to ``PLOT_ROWS`` and a uniform random sample of that many beyond
    (the report says so), and the per-video plot is an exact histogram."""

    def __init__(self, seed: int = 0) -> None:
        self.rows = self.kept = self.videos = self.partial_videos = self.moved = 0
        self.score_n = self.outside = self.chatter = 0  # outside, chatter: the rules' drops
        self.score_sums: list[float] = []
        self.abs_offset_sums: list[float] = []
        self.has_null_z = self.has_chatter = self.sampled = False
        self.fractions: list[tuple[str, float]] = []  # per video, while there are <= 40
        self.fraction_counts = np.zeros(20, dtype=np.int64)
        self.frac_edges = np.linspace(0, 1, 21)
        self._rng = np.random.default_rng(seed)
        self._sample: pd.DataFrame | None = None  # rows with their random keys
        self.outside_rows: list[pd.DataFrame] = []  # the first ``LISTED`` of each
        self.chatter_rows: list[pd.DataFrame] = []

    def add(self, df: pd.DataFrame) -> None:
        """One window of the filtered table (whole videos: per-video counts are exact)."""
        n = len(df)
        if not n:
            return
        self.rows += n
        kept = df["kept"].to_numpy(dtype=bool)
        self.kept += int(kept.sum())
        self.videos += int(df["video_id"].nunique())
        if "partial" in df:
            self.partial_videos += int(df.loc[df["partial"], "video_id"].nunique())
        score = df["score"].to_numpy(dtype=float)
        ok = ~np.isnan(score)
        self.score_sums.append(float(score[ok].sum()))
        self.score_n += int(ok.sum())
        off = df["offset"].to_numpy(dtype=float)
        self.moved += int((np.abs(off) > 1e-9).sum())
        self.abs_offset_sums.append(float(np.abs(off).sum()))
        frac = df.groupby("video_id")["kept"].mean()
        self.fraction_counts += np.histogram(frac.to_numpy(), bins=self.frac_edges)[0]
        if self.videos <= 40:  # few videos: the plot names each
            self.fractions += list(zip(frac.index, frac.to_numpy(dtype=float), strict=True))
        self.has_null_z |= "null_z" in df
        self.has_chatter |= "chatter" in df
        if "chatter" in df:
            drop = df["chatter"].to_numpy(dtype=bool) & ~kept
            self.chatter += int(drop.sum())
            self._keep_first(self.chatter_rows, df[drop])
        cols = [c for c in ("score", "offset", "kept", "null_z", "chatter") if c in df]
        part = df[cols].assign(_key=self._rng.random(n))
        self._sample = part if self._sample is None else pd.concat(
            [self._sample, part], ignore_index=True)
        if len(self._sample) > PLOT_ROWS:
            self.sampled = True
            keys = self._sample["_key"].to_numpy()
            self._sample = self._sample.iloc[np.sort(np.argpartition(keys, PLOT_ROWS)
                                                     [:PLOT_ROWS])].reset_index(drop=True)

    def add_outside(self, df: pd.DataFrame) -> None:
        """Captions the guard dropped (counted, the first ``LISTED`` listed)."""
        self.outside += len(df)
        self._keep_first(self.outside_rows, df)

    @staticmethod
    def _keep_first(into: list[pd.DataFrame], df: pd.DataFrame) -> None:
        have = sum(len(f) for f in into)
        if have < LISTED and len(df):
            into.append(df.head(LISTED - have))

    def plot_rows(self) -> pd.DataFrame:
        """The rows the plots draw (all of them, or the sample)."""
        if self._sample is None:
            return pd.DataFrame({"score": [], "offset": [], "kept": []}).astype(
                {"kept": bool})
        return self._sample.drop(columns="_key")

    def numbers(self, thr: float, config: Mapping[str, Any]) -> dict[str, Any]:
        n, kept = self.rows, self.kept
        rule = config.get("filter")
        chatter = int(config.get("chatter_dropped", 0))
        chatter_only = int(config.get("chatter_dropped_only_by_text", 0))
        return {
            "videos with captions": self.videos,
            "caption–clip pairs": n,
            "kept": kept,
            "kept fraction": round(kept / n, 4) if n else 0.0,
            "filter": rule or ("score threshold" if math.isfinite(thr) else "none"),
            "threshold": round(thr, 6) if math.isfinite(thr) else "none (no score threshold)",
            "dropped: window outside the video (±T)": self.outside,
            "dropped: channel chatter (text test)":
                f"{chatter} ({chatter_only} of them above the null z bar)" if chatter else 0,
            "mean score": (round(math.fsum(self.score_sums) / self.score_n, 6)
                           if n and self.score_n else float("nan")),
            "moved (offset ≠ 0)": self.moved,
            "mean |offset| (s)": round(math.fsum(self.abs_offset_sums) / n, 3) if n else 0.0,
            "videos decoded only partly": self.partial_videos,
        }


def _per_video_stats_plot(stats: ReportStats) -> str:
    """Each video's kept fraction, named (up to 40 videos), else their exact histogram."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if stats.videos <= 40:
        frac = pd.Series(dict(stats.fractions), dtype=float).sort_values() \
            if stats.fractions else pd.Series(dtype=float)
        ax.barh(range(len(frac)), frac.to_numpy(), color="tab:blue")
        ax.set_yticks(range(len(frac)), [str(v)[:30] for v in frac.index], fontsize=7)
        ax.set_xlabel("kept fraction")
        ax.set_xlim(0, 1)
        ax.set_title("Kept fraction per video")
        return _png(fig)
    edges = stats.frac_edges
    ax.hist(edges[:-1], bins=edges, weights=stats.fraction_counts, color="tab:blue")
    ax.set_xlabel("kept fraction of a video")
    return _finish(fig, ax, "Kept fraction per video", "videos", legend=False)


def write_align_report(aligned: pd.DataFrame, threshold: float, config: Mapping[str, Any],
                       path: Path) -> Path:
    """Write the report of one filtered frame; ``config`` is what ``config/align.json`` holds."""
    stats = ReportStats()
    stats.add(aligned)
    return write_report_from(stats, threshold, config, path)


def write_report_from(stats: ReportStats, threshold: float, config: Mapping[str, Any],
                      path: Path) -> Path:
    """The report from ``stats`` gathered over the filtered table (``finish_align`` streams
    it; ``write_align_report`` gathers one frame)."""
    plotted = stats.plot_rows()
    figs = _figures(stats, plotted, threshold, config)
    dropped = ""
    if stats.outside:
        dropped = _dropped_table(
            "window outside the video", stats.outside_rows, stats.outside,
            "No clip within ±T of these captions lies inside the (decoded) video, so they were "
            "not moved further than T but dropped, as the reference does.", with_z=False)
    if config.get("chatter_dropped") and stats.has_chatter:
        dropped += _dropped_table(
            "channel chatter", stats.chatter_rows, stats.chatter,
            "The default filter also drops captions the LLM stage's chatter patterns flag "
            "(subscribing, sponsors, greetings; column <code>chatter</code>); "
            "<code>--keep-chatter</code> keeps them when their null z passes.", with_z=True)
    sample = (f"<p>The score, offset and null z plots draw a uniform random sample of "
              f"{len(plotted):,} of the {stats.rows:,} pairs (the numbers above count every "
              "pair).</p>" if stats.sampled else "")
    body = f"""<h1>Filter &amp; align</h1>
<h2>Summary</h2><table>{kv_rows(stats.numbers(threshold, config))}</table>
{sample}{figs}
{dropped}
<h2>Configuration</h2><table>{kv_rows(config)}</table>"""
    atomic_write_text(path, page("howtocap: filter & align", CSS, body))
    return path


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;
text-align:left}figure{display:inline-block;margin:0 1em 1em 0}"""


def _figures(stats: ReportStats, plotted: pd.DataFrame, threshold: float,
             config: Mapping[str, Any]) -> str:
    """Each chart with a caption that says what it shows, or a sentence where a chart would
    be empty or say nothing (no pairs; one video's kept fraction is one bar)."""
    if not stats.rows:
        return "<p>No caption–clip pairs were scored, so there is nothing to plot.</p>"
    n, kept = stats.rows, stats.kept
    thr = f"{threshold:.4f}" if math.isfinite(threshold) else "none"
    items = [
        (_score_plot(plotted, threshold),
         f"Each caption's score at its best offset: {kept:,} of {n:,} kept (green) above the "
         f"threshold ({thr}, dashed), the rest dropped (grey)."),
        (_offset_plot(plotted),
         "How far each caption was moved: its aligned start minus the start the LLM gave, "
         "one bar a second; a pile at the edges means ±T was too small.")]
    if stats.videos == 1:
        only = stats.fractions[0] if stats.fractions else ("the video", kept / n)
        items.append((None, f"One video ({esc(only[0])}): {kept:,} of its "
                            f"{n:,} captions kept ({only[1]:.0%})."))
    else:
        items.append((_per_video_stats_plot(stats),
                      f"The share of each video's captions kept, over {stats.videos:,} "
                      "videos: a video near 0 is one the encoder finds no match in (off-topic "
                      "talk, or footage unlike its words)."))
    if str(config.get("filter", "")).startswith("default filter") and stats.has_null_z:
        bar = config.get("null_z")
        items.append((_null_z_plot(plotted, float(bar if bar is not None else DEFAULT_NULL_Z)),
                      "The default filter's test: how far a caption's score stands above "
                      "other videos' captions on its clip and its own caption on other "
                      "videos' clips (z); captions left of the bar are dropped."))
    return "".join(figure(image, cap) if image is not None else f"<p>{cap}</p>"
                   for image, cap in items)


def _dropped_table(why: str, frames: list[pd.DataFrame], count: int, explain: str,
                   with_z: bool) -> str:
    """A section listing the first captions (``LISTED``) of the ``count`` a rule dropped, so
    users can audit it."""
    z_head = "<th>null z</th>" if with_z else ""
    cells = "".join(
        f"<tr><td>{esc(r.video_id)}</td><td>{float(r.orig_start):.1f}</td>"
        + (f"<td>{float(getattr(r, 'null_z', math.nan)):.2f}</td>" if with_z else "")
        + f"<td>{esc(r.text)}</td></tr>" for f in frames for r in f.itertuples())
    return (f"<h2>Dropped: {why} ({count})</h2><p>{explain}</p><table><tr><th>video</th>"
            f"<th>start (s)</th>{z_head}<th>text</th></tr>{cells}</table>")

