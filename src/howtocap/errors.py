"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations


class HowtocapError(Exception):
    """A user-facing problem (bad input, missing model, bad option): printed as one line."""


class InputError(HowtocapError):
    """A file the user gave us is unreadable or malformed; the message names the file."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
