"""Where a benchmark's figures go: ``results/<name>.json`` (what the docs render from) and
``results/<name>.md`` (what a person reads), written together so they never disagree."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores"


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def write_results(name: str, result: dict[str, Any], lines: list[str]) -> None:
    """Both files of one benchmark, and the report on stdout."""
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
