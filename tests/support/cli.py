"""The real `howtocap` command in a subprocess, and the small inputs the CLI tests give it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HOWTOCAP = [sys.executable, "-m", "howtocap.cli"]


def vtt(cues: list[tuple[float, float, str]]) -> str:
    def ts(t: float) -> str:
        return f"00:{int(t // 60):02d}:{t % 60:06.3f}"

    return "WEBVTT\n\n" + "\n\n".join(f"{ts(a)} --> {ts(b)}\n{t}" for a, b, t in cues) + "\n"


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*HOWTOCAP, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def add_video(folder: Path, name: str, base: Path, subtitle: str | None = None,
              ext: str = ".vtt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.mp4"
    path.write_bytes(base.read_bytes())
    if subtitle is not None:
        (folder / f"{name}{ext}").write_text(subtitle)
    return path


GOOD = vtt([(0.5, 2.0, "first we take two eggs and crack them into the bowl"),
            (2.5, 3.8, "then we whisk the eggs with a fork until smooth")])
