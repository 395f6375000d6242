"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

M = TypeVar("M")


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


def flag_of(name: str, extra: Mapping[str, Any]) -> str:
    """A settings field's CLI flag: the ``flag`` of its extra keys, else ``--field-name``."""
    return extra.get("flag") or "--" + name.replace("_", "-")


def validated(model: Callable[..., M], values: dict[str, Any],
              flags: Mapping[tuple[str, ...], str] | None = None) -> M:
    """``model(**values)``; pydantic's report becomes one line, a problem per option in the
    CLI's words (``flags``: a field's flag by its path, by default each top-level field's
    ``flag_of``; a rule over several fields is its own sentence). The one formatter of a
    settings model's errors (CLI, library, YAML)."""
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        if flags is None:
            flags = {(name,): flag_of(name, f.json_schema_extra
                                       if isinstance(f.json_schema_extra, dict) else {})
                     for name, f in getattr(model, "model_fields", {}).items()}
        raise HowtocapError("; ".join(_problem(e, flags) for e in exc.errors())) from None


def _problem(error: Any, flags: Mapping[tuple[str, ...], str]) -> str:
    loc = tuple(str(p) for p in error["loc"])
    msg = str(error["msg"]).removeprefix("Value error, ")
    where = loc
    while where and where not in flags:
        where = where[:-1]
    if error["type"] == "extra_forbidden":
        return f"{'.'.join(loc)!r} is not an option"
    if not where:
        return msg
    if error["type"] == "literal_error":  # --model must be dual or mee, not 'x'
        return (f"{flags[where]} must be {error['ctx']['expected'].replace(chr(39), '')}, "
                f"not {error['input']!r}")
    return f"{flags[where]}: {msg}"
