"""``DIR/report.html``: one self-contained page (plots are base64 PNGs) drawn from stats.json.

It reads only the stats dict, so a saved ``stats.json`` can be re-rendered without the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from howtocap.io.html import esc, figure, page, png, whole_numbers

LABELS = {"subtitles": "Subtitles", "captions": "LLM captions", "kept": "Kept captions",
          "dropped": "Dropped by the filter"}
COLORS = {"subtitles": "#7f7f7f", "captions": "#1f77b4", "kept": "#2ca02c", "dropped": "#d62728"}
STYLES = {"subtitles": "-", "captions": "-", "kept": "--"}  # kept often equals captions
BAD = " class='bad'"

CSS = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2330;
 max-width:1100px;margin:2rem auto;padding:0 1.2rem;background:#fafbfc}
h1{font-size:1.7rem;margin:.2rem 0}h2{font-size:1.25rem;margin:2rem 0 .6rem;
 border-bottom:2px solid #e3e7ee;padding-bottom:.3rem}
.meta{color:#5b6475;font-size:.9rem}.note{background:#fff7e0;border-left:4px solid #f0b400;
 padding:.5rem .8rem;margin:.6rem 0;border-radius:4px}
.cards{display:flex;flex-wrap:wrap;gap:.8rem;margin:.8rem 0}
.card{background:#fff;border:1px solid #e3e7ee;border-radius:8px;padding:.7rem 1rem;min-width:150px}
.card b{display:block;font-size:1.5rem}.card span{color:#5b6475;font-size:.85rem}
table{border-collapse:collapse;background:#fff;width:100%;margin:.5rem 0;
 border:1px solid #e3e7ee}
th,td{padding:.4rem .7rem;border-bottom:1px solid #eef1f5;text-align:right}
th:first-child,td:first-child{text-align:left}thead th{background:#f1f4f8}
td.msg{text-align:left;font-family:ui-monospace,monospace;font-size:.85rem}
tr.group td{background:#f7f9fb;font-weight:600;text-align:left}
.bad{color:#c0392b;font-weight:600}.plots{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
.plots figure{margin:0;background:#fff;border:1px solid #e3e7ee;border-radius:8px;padding:.5rem}
.plots img{width:100%}figcaption{color:#5b6475;font-size:.85rem}
.thumbs{display:flex;flex-wrap:wrap;gap:.4rem;margin:.3rem 0 1rem}
.thumbs figure{margin:0;width:192px}.thumbs img{width:192px;border-radius:4px}
.thumbs .none{width:192px;height:108px;background:#eef1f5;display:flex;align-items:center;
 justify-content:center;color:#5b6475;font-size:.8rem}
dl{background:#fff;border:1px solid #e3e7ee;border-radius:8px;padding:.6rem 1rem}
dt{font-weight:600;margin-top:.4rem}dd{margin-left:1rem;color:#3a4252}
"""


def _num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def _ms(d: dict[str, Any] | None, digits: int = 1) -> str:
    if not d or d.get("mean") is None:
        return "–"
    return f"{d['mean']:.{digits}f} ± {d['std']:.{digits}f}"


def _secs(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


def _hist_plot(h: dict[str, Any], title: str, xlabel: str, *, percent: bool,
               stacked: bool = False, integer: bool = False) -> str | None:
    """One overlaid (or stacked) histogram from pre-binned counts, as base64 PNG."""
    if not h or not h.get("edges") or not h.get("series"):
        return None
    edges = np.asarray(h["edges"], float)
    fig, ax = plt.subplots(figsize=(5.6, 3.3))
    bottom = np.zeros(len(edges) - 1)
    for name, counts in h["series"].items():
        c = np.asarray(counts, float)
        if percent:
            c = 100 * c / max(c.sum(), 1)
        if stacked:
            ax.bar(edges[:-1], c, width=np.diff(edges), bottom=bottom, align="edge",
                   color=COLORS.get(name), alpha=.85, label=LABELS.get(name, name))
            bottom += c
        else:
            ax.stairs(c, edges, color=COLORS.get(name), linewidth=2,
                      linestyle=STYLES.get(name, "-"),
                      label=f"{LABELS.get(name, name)} (n={int(np.sum(counts)):,})")
    if h.get("clipped_at") is not None:
        xlabel += f" (last bin: ≥ {h['clipped_at']})"
    ax.set(title=title, xlabel=xlabel, ylabel="% of items" if percent else "count")
    if not percent:  # counts in whole numbers (matplotlib ticks a few items in quarters)
        whole_numbers(ax.yaxis)
    if integer:
        whole_numbers(ax.xaxis)
    ax.grid(alpha=.3)
    ax.legend(fontsize=8)
    return png(fig, dpi=90)


def _table(head: str, rows: Iterable[str]) -> str:
    """A table from the HTML of its header cells and of its rows (a line each)."""
    return "\n".join([f"<table><thead><tr>{head}</tr></thead><tbody>", *rows, "</tbody></table>"])


def _summary_html(stats: dict[str, Any]) -> str:
    s = stats["summary"]
    kept = (f"{_num(s['captions_kept'])} <span>({s['kept_pct']:.0f}%)</span>"
            if s.get("kept_pct") is not None else _num(s.get("captions_kept")))
    cards = [("videos", _num(s["videos"])),
             ("videos with a failed stage", f"<em class='{'bad' if s['videos_failed'] else ''}'>"
                                            f"{_num(s['videos_failed'])}</em>"),
             ("subtitle lines", _num(s.get("subtitles"))),
             ("captions generated", _num(s.get("captions_generated"))),
             ("captions aligned", _num(s.get("captions_aligned"))),
             ("captions kept", kept)]
    out = ["<div class='cards'>", *(f"<div class='card'><b>{v}</b><span>{esc(k)}</span></div>"
                                     for k, v in cards), "</div>"]
    if s.get("subtitle_sources"):
        out.append("<p class='meta'>Subtitle sources: " + ", ".join(
            f"{esc(k)}: {v:,}" for k, v in s["subtitle_sources"].items()) + "</p>")
    if s["stages"]:
        out.append(_table(
            "<th>stage</th><th>videos ok</th><th>failed</th><th>total time</th>"
            "<th>mean time / video</th>",
            (f"<tr><td>{esc(st['stage'])}</td><td>{st['ok']:,}</td>"
             f"<td{BAD if st['failed'] else ''}>{st['failed']:,}</td>"
             f"<td>{_secs(st['seconds_total'])}</td>"
             f"<td>{_secs(st['seconds_mean'])}</td></tr>" for st in s["stages"])))
    else:
        out.append("<p class='note'>No status records: per-stage counts and times are unknown."
                   "</p>")
    if s["failures"]:
        out.append("<h3>Most common failures</h3>" + _table(
            "<th>stage</th><th>videos</th><th style='text-align:left'>message</th>"
            "<th>example video</th>",
            (f"<tr><td>{esc(f['stage'])}</td><td>{f['count']:,}</td><td class='msg'>"
             f"{esc(f['message'])}</td><td>{esc(f['example_video'])}</td></tr>"
             for f in s["failures"])))
    return "\n".join(out)


ROWS: list[tuple[str, str, Any]] = [
    ("Size", "", None),
    ("texts", "texts", _num),
    ("videos with text", "videos", _num),
    ("videos used (sample)", "videos_used", _num),
    ("texts used (sample)", "texts_used", _num),
    ("Words", "", None),
    ("vocabulary (distinct words)", "vocabulary", _num),
    ("words per caption (mean ± std)", "words_per_caption", _ms),
    ("words per video (mean ± std)", "words_per_video", _ms),
    ("captions per video (mean ± std)", "captions_per_video", _ms),
    *[(f"unique word {n}-grams %", ("word_ngram_unique_pct", n), _num) for n in "123"],
    ("Verbs (lemmatised)", "", None),
    ("verb occurrences", "verbs", _num),
    ("distinct verbs", "verb_vocabulary", _num),
    ("diverse verbs % (outside the 5 most frequent)", "diverse_verbs_pct", _num),
    *[(f"unique verb {n}-grams %", ("verb_ngram_unique_pct", n), _num) for n in "123"],
    ("most frequent verbs", "top_verbs", None),
]


def _cell(corpus: dict[str, Any] | None, key: Any, fmt: Any) -> str:
    if corpus is None:
        return "–"
    if key == "top_verbs":
        return esc(", ".join(f"{v} ({c})" for v, c in corpus.get("top_verbs", [])[:5]) or "–")
    val = corpus.get(key[0], {}).get(key[1]) if isinstance(key, tuple) else corpus.get(key)
    return fmt(val) if fmt is not None else esc(val)


def _comparison_html(stats: dict[str, Any]) -> str:
    text = stats["text"]
    cols = [c for c in ("subtitles", "captions", "kept") if c in text]
    style = {"top_verbs": " style='text-align:left;font-size:.85rem'"}
    out = [_table("<th>statistic</th>" + "".join(f"<th>{esc(LABELS[c])}</th>" for c in cols), (
        f"<tr><td>{esc(label)}</td>" + "".join(
            f"<td{style.get(key, '')}>{_cell(text.get(c), key, fmt)}</td>" for c in cols) + "</tr>"
        if key else f"<tr class='group'><td colspan='{len(cols) + 1}'>{esc(label)}</td></tr>"
        for label, key, fmt in ROWS))]
    if al := stats.get("alignment"):
        out.append("<h3>Alignment</h3>" + _table(
            "<th></th><th>rows</th><th>offset mean ± std (s)</th><th>median offset (s)</th>"
            "<th>mean |offset| (s)</th><th>score mean ± std</th>",
            (f"<tr><td>{part}</td><td>{b['rows']:,}</td><td>{_ms(b['offset'], 2)}</td>"
             f"<td>{_num(b['offset']['median'])}</td><td>{_num(b['offset']['abs_mean'])}</td>"
             f"<td>{_ms(b['score'], 3)}</td></tr>" for part, b in al.items())))
    return "\n".join(out)


DEFINITIONS = [
    ("word", "a token of spaCy's English tokenizer that is not punctuation or whitespace, "
             "lower-cased (don't is two words: do, n't)."),
    ("vocabulary", "number of distinct words in the corpus (on the sampled videos)."),
    ("words per caption / per video", "mean and population standard deviation of the word "
     "count of one text, or of all texts of one video (on the sampled videos)."),
    ("verbs", "tokens spaCy tags as VERB (auxiliaries such as is/have/can excluded), counted by "
              "their lower-cased lemma."),
    ("diverse verbs %", "share of verb occurrences whose lemma is not among the corpus's 5 most "
                        "frequent verb lemmas (ties broken alphabetically)."),
    ("unique word n-grams %", "100 x distinct n-grams of consecutive words / all n-grams; "
     "n-grams never cross from one text to the next. Higher means less repetitive. "
     "The share falls as a corpus grows, so compare corpora of similar size."),
    ("unique verb n-grams %", "the same over the sequence of verb lemmas of each text "
                              "(e.g. 'cut the onion and add salt' gives cut, add)."),
]


# what each signal measures, for its chart's caption (docs/signals.md has the details)
SIGNAL_TEXT = {
    "motion": "frame-to-frame change (0: still)",
    "text_area": "share of the frame inside detected text",
    "face_area": "share of the frame the largest face covers",
    "brightness": "mean luma (0: black)",
    "sharpness": "variance of the Laplacian (near 0: blurred or flat)",
    "aesthetic": "the aesthetic head's score",
}


def _signals_html(sig: dict[str, Any] | None) -> str:
    """Each signal's distribution over the run's shots, with the clips at both ends of it:
    what a `--where` bar would keep and drop."""
    if not sig:
        return ("<p>No signals yet: <code>howtocap signals DIR</code> scores each shot's "
                "motion, text, faces, brightness and sharpness.</p>")
    parts = [f"<p>{sig['rows']:,} shots or windows of {sig['videos']:,} videos"
             + (f"; {sig['static']:.0%} flagged static (slides, stills, black)"
                if sig.get("static") is not None else "") + ".</p>"]
    for col, h in sig["histograms"].items():
        what = SIGNAL_TEXT.get(col, col)
        img = _hist_plot(h, col, what, percent=False)
        if img:
            cap = f"{col}: {what}, one count per shot or window ({sig['rows']:,} in all)."
            parts.append(f"<div class='plots'><figure><img alt='{esc(cap)}' "
                         f"src='data:image/png;base64,{img}'><figcaption>{esc(cap)}"
                         "</figcaption></figure></div>")
        for end, label in (("high", "highest"), ("low", "lowest")):
            clips = sig["extremes"].get(col, {}).get(end, [])
            cells = "".join(
                f"<figure>{_thumb_img(c)}<figcaption>{esc(c['video_id'])} "
                f"{c['start']:.1f}–{c['end']:.1f} s: {_num(c['value'], 4)}</figcaption>"
                "</figure>" for c in clips)
            parts.append(f"<p>The {len(clips)} {label} {esc(col)}:</p>"
                         f"<div class='thumbs'>{cells}</div>")
    return "".join(parts)


def _thumb_img(clip: dict[str, Any]) -> str:
    if not clip.get("jpg"):
        return "<div class='none'>video not readable</div>"
    return f"<img alt='{esc(clip['video_id'])}' src='data:image/jpeg;base64,{clip['jpg']}'>"


def render_html(stats: dict[str, Any]) -> str:
    """The report page: run summary, ASR-vs-captions table, histograms, definitions."""
    hints = {"aligned": "no alignment yet: kept-caption statistics, offsets and scores need "
                        "`howtocap align`.",
             "captions": "no captions yet: run `howtocap caption`.",
             "subtitles": "no subtitles table."}
    notes = [hints[m] for m in stats.get("missing", []) if m in hints]
    smp = stats.get("sample", {})
    if smp.get("sampled"):
        notes.append(f"Text statistics use the texts of {smp['videos_used']:,} of the "
                     f"{smp['videos_total']:,} videos, drawn at random (seed {smp['seed']}), "
                     "the same videos for every corpus, as the paper's 5,000-video sample.")
    h = stats.get("histograms", {})
    plots = [
        (_hist_plot(h.get("words_per_caption", {}), "Caption length", "words per caption",
                    percent=True, integer=True), "Words per text, as % of each corpus."),
        (_hist_plot(h.get("captions_per_video", {}), "Captions per video", "texts per video",
                    percent=True, integer=True), "Texts per video, as % of videos with text."),
        (_hist_plot(h.get("offset", {}), "Alignment offsets", "offset (s)", percent=False,
                    stacked=True),
         "The offset column of the aligned table: how far alignment moved each caption "
         "from the LLM's timestamp."),
        (_hist_plot(h.get("score", {}), "Alignment scores", "video–text score", percent=False,
                    stacked=True), "Score of each caption at its aligned position."),
    ]
    figs = "".join(figure(img, cap) for img, cap in plots if img)
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in DEFINITIONS)
    return page(f"howtocap report – {stats['run_dir']}", CSS, f"""<h1>howtocap dataset report</h1>
<p class="meta">{esc(stats['run_dir'])} · generated {esc(stats['generated_at'])} ·
howtocap {esc(stats['howtocap_version'])} · spaCy model {esc(stats['spacy_model'])}</p>
{"".join(f"<p class='note'>{esc(n)}</p>" for n in notes)}
<h2>Run summary</h2>
{_summary_html(stats)}
<h2>Subtitles vs captions</h2>
{_comparison_html(stats)}
<h2>Distributions</h2>
<div class="plots">{figs or "<p>No data to plot.</p>"}</div>
<h2>Visual signals</h2>
{_signals_html(stats.get("signals"))}
<h2>Definitions</h2>
<dl>{defs}</dl>""")
