"""A video's narration: its subtitle file, a ``--subtitles`` collection, or Whisper ASR, as the
``--asr`` mode says (``subtitles.policy.choose_subtitles`` is the one place that decides)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.subtitles.policy import ASR_MODE, AsrMode, LazyASR


class SubtitlesStage(BaseStage):
    name = "subtitles"
    reads = ()
    writes = ("subtitles",)
    resources = Resources(kind="asr", models=True)

    def __init__(self, asr_mode: AsrMode = ASR_MODE, asr_model: str = "default", *,
                 source: Any | None = None) -> None:
        """``source``: the ``--subtitles`` collection (a ``SubtitleSource``: it travels to
        workers as its settings and reopens its converted file there)."""
        self.asr_mode = asr_mode
        self.asr_model = asr_model
        self.source = source

    def load(self) -> None:
        self._asr = LazyASR(self.asr_model)

    def fingerprint(self) -> dict[str, Any]:
        """The ASR mode and model (a local model folder by its weights' hash) and the
        ``--subtitles`` collection (path and size: a multi-GB dump is not re-hashed)."""
        from howtocap.bundled import files_hash

        asr: dict[str, Any] = {"mode": self.asr_mode, "model": self.asr_model}
        folder = Path(self.asr_model)
        if folder.is_dir():
            asr["weights"] = files_hash([p for p in folder.iterdir() if p.is_file()])
        p = Path(self.source.path) if getattr(self.source, "path", None) is not None else None
        source = None if p is None else {"path": str(p.resolve()),
                                         "size": p.stat().st_size if p.is_file() else None}
        return {**super().fingerprint(), "asr": asr, "subtitles": source}

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.subtitles.policy import choose_subtitles

        if video.item.video_path is not None:  # fail early, naming the file we cannot read
            from howtocap.io.video import probe

            probe(video.item.video_path)
        subs = choose_subtitles(video.item, self.asr_mode, self.source, self._asr)
        audio = float(max(subs["end"])) if len(subs) else 0.0
        return StageOutput({"subtitles": subs},
                           metrics={"audio_seconds": audio, "lines": float(len(subs))})
