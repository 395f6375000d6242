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


class ServiceUnavailable(HowtocapError):
    """A service every video needs (the LLM server) is down: no video can succeed, so the run
    stops at once and marks nothing failed; the message says to re-run to resume."""


class ModelOutputError(HowtocapError):
    """A model answered, but nothing usable came out for this video (e.g. no LLM block gave a
    caption): the video fails with cause "model output"."""


class ServiceError(HowtocapError):
    """A service (the LLM server) failed this video's requests after retries: cause
    "service"; a plain re-run retries such videos, since their input is fine."""


def short_reason(exc: BaseException, limit: int = 200) -> str:
    """A library's exception as one short line for a status message (the caller names the
    file or server): an OS error's own words, else its text with whitespace collapsed."""
    text = getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(text).split())[:limit] or type(exc).__name__
