"""One look for every progress bar, on the same stderr console as error lines (so a failure
printed mid-run never tears a bar)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True, soft_wrap=True)  # one error = one line, however long


def progress_bar(label: str, *extra: ProgressColumn, disable: bool = False,
                 transient: bool = False) -> Progress:
    """``label ━━━━ n/N elapsed remaining [extra…]``."""
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), *extra, console=console, disable=disable,
                    transient=transient)
