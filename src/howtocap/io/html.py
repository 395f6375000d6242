"""The pieces of the self-contained HTML reports (``DIR/align_report.html``, ``DIR/report.html``):
the page shell, escaping, key–value rows and matplotlib figures embedded as base64 PNG, so a
report is one file that can be mailed or archived."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def esc(x: Any) -> str:
    return html.escape(str(x))


def png(fig: Any, dpi: int = 100) -> str:
    """The figure as base64 PNG (and closed: a report draws many)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def whole_numbers(axis: Any) -> None:
    """A count axis in whole numbers: matplotlib's default ticks a small count in quarters."""
    axis.set_major_locator(MaxNLocator(integer=True))


def figure(image: str, caption: str) -> str:
    """A base64 PNG with its caption (also its alt text)."""
    return (f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{image}"/>'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def kv_rows(items: Mapping[Any, Any]) -> str:
    return "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items.items())


def page(title: str, css: str, body: str) -> str:
    """A whole page: ``body`` is HTML, ``title`` text."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{css}</style></head>
<body>
{body}
</body></html>
"""
