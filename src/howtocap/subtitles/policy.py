"""The ``--asr`` policy: where a video's narration comes from (its subtitle file, a
``--subtitles`` collection, or Whisper). ``choose_subtitles`` is the one place that decides;
``io.subtitles`` only reads the formats."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from howtocap.errors import InputError
from howtocap.io.inputs import VideoItem

if TYPE_CHECKING:  # the CLI reads ASR_MODES at start-up; pandas loads when a stage runs
    import pandas as pd

    from howtocap.io.subtitles import ASR, SubtitleSource
    from howtocap.schemas import Rows

AsrMode = Literal["auto", "always", "never"]
ASR_MODES: tuple[str, ...] = ("auto", "always", "never")
ASR_MODE: AsrMode = "auto"  # every command's and function's default


class LazyASR:
    """Loads Whisper on the first video that has no subtitles (most runs never need it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._asr: Any = None
        self._lock = threading.Lock()

    def transcribe(self, path: Path) -> pd.DataFrame:
        with self._lock:
            if self._asr is None:
                from howtocap import asr

                self._asr = asr.create(self.name)
        return self._asr.transcribe(path)


def choose_subtitles(item: VideoItem, mode: str, source: SubtitleSource | None = None,
                     asr: ASR | None = None) -> Rows:
    """Where a video's narration comes from, as plain columns (``schemas.Rows``). ``always``:
    Whisper on the video file, ignoring manifest, sidecar and ``--subtitles`` text; ``auto``:
    subtitles in ``subtitles_for_video`` order, Whisper only when there are none; ``never``:
    subtitles only. Empty text is an error naming its origin: the LLM is never sent nothing."""
    from howtocap.io.subtitles import subtitles_and_origin

    if mode not in ("always", "auto", "never"):
        raise ValueError(f"unknown --asr mode {mode!r}")
    if mode == "always":
        if item.video_path is None:
            raise InputError(item.video_id, "--asr always needs a video file")
        if asr is None:
            raise InputError(item.video_path, "--asr always needs a speech recognizer")
        subs, origin = subtitles_and_origin(VideoItem(item.video_id, item.video_path),
                                             asr=asr, sidecars=False)
    else:
        subs, origin = subtitles_and_origin(item, source=source,
                                             asr=asr if mode == "auto" else None)
    if subs.empty:
        if isinstance(origin, Path):
            raise InputError(origin, "subtitles have no text")
        if origin == "htm" and source is not None:
            raise InputError(source.path, f"video {item.video_id!r}: subtitles have no text")
        raise InputError(item.video_path or item.video_id,
                         "no speech found (the subtitles or the ASR transcript are empty)")
    return subs
