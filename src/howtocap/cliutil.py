"""Shared by every command module: one-line user errors, warnings as notes, the consoles."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from howtocap.errors import HowtocapError

err = Console(stderr=True, soft_wrap=True)  # one error = one line, however long
out = Console()
F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """User mistakes become one red line and exit code 2, never a traceback; a library's
    ``UserWarning`` (e.g. "no alignment yet, indexing captions") is shown as a note."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UserWarning)
                result = fn(*args, **kwargs)
            for w in caught:
                if issubclass(w.category, UserWarning):
                    err.print(f"[yellow]note:[/yellow] {w.message}", highlight=False)
            return result
        except HowtocapError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/yellow]: finished videos are saved; "
                      "run the same command again to resume")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
