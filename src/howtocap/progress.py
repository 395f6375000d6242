"""One look for every progress bar, on the same stderr console as error lines (so a failure
printed mid-run never tears a bar)."""

from __future__ import annotations

import rich.progress as rp
from rich.console import Console

console = Console(stderr=True, soft_wrap=True)  # one error = one line, however long


def progress_bar(label: str, *extra: rp.ProgressColumn, disable: bool = False,
                 transient: bool = False) -> rp.Progress:
    """``label ━━━━ n/N elapsed remaining [extra…]``."""
    return rp.Progress(rp.TextColumn(label), rp.BarColumn(), rp.MofNCompleteColumn(),
                       rp.TimeElapsedColumn(), rp.TimeRemainingColumn(), *extra, console=console,
                       disable=disable, transient=transient)
