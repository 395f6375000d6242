"""Stage 1 of HowToCaption: pick each video's subtitles (or run ASR), then caption with the LLM.

``caption_stage`` is the pure per-video step; ``caption_run`` is the command: it resolves inputs,
loads the models once and hands the per-video step to the runner.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, Field

from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VideoItem, resolve_inputs
from howtocap.pipeline.runner import Shard, StageSummary, run_stage
from howtocap.rundir import RunDir, conform

AsrMode = Literal["auto", "always", "never"]


class LLMOptions(BaseModel):
    """Which LLM answers, and how hard we push it (the CLI's --llm* flags)."""

    name: str = "embedded"
    url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = Field(4, ge=1, le=256)
    timeout: float = 120.0
    max_retries: int = Field(3, ge=0, le=20)


class CaptionRunConfig(BaseModel):
    """Everything ``howtocap caption`` needs; recorded in ``DIR/config/caption.json``."""

    subtitles: str | None = None  # HowTo100M-style source (caption.json, pickle, CSV folder)
    asr: AsrMode = "auto"
    asr_model: str = "default"
    llm: LLMOptions = LLMOptions()
    caption: dict[str, Any] = {}  # fields of howtocap.llm.captioner.CaptionConfig


def _probe_video(path: Path | None) -> None:
    """Fail early, with the file's name, on a video we could not read later anyway."""
    if path is None:
        return
    from howtocap.io.video import probe

    probe(path)


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


def caption_stage(item: VideoItem, *, source: Any | None, asr_mode: AsrMode, asr: Any,
                  llm: Any, cfg: Any) -> dict[str, pd.DataFrame]:
    """One video: subtitles (or ASR) -> LLM captions. Pure apart from the models it is given."""
    from howtocap.io.subtitles import subtitles_for_video
    from howtocap.llm.captioner import caption_video

    _probe_video(item.video_path)
    if asr_mode == "always":
        if item.video_path is None:
            raise InputError(item.video_id, "--asr always needs a video file")
        subs = subtitles_for_video(VideoItem(item.video_id, item.video_path), asr=asr)
    else:
        subs = subtitles_for_video(item, source=source,
                                   asr=asr if asr_mode == "auto" else None)
    if subs.empty:
        sub_file = None if asr_mode == "always" else (item.subtitle_path
                                                       or item.sidecar_subtitle())
        if sub_file is not None:
            raise InputError(sub_file, "subtitles have no text")
        raise InputError(item.video_path or item.video_id,
                         "no speech found (the subtitles or the ASR transcript are empty)")
    captions, _stats = caption_video(item.video_id, subs, llm, cfg)
    return {"subtitles": conform(subs, "subtitles"), "captions": conform(captions, "captions")}


def build_llm(opts: LLMOptions) -> Any:
    from howtocap import llm as llm_mod

    if opts.url:
        return llm_mod.create("openai", url=opts.url, model=opts.model,
                              api_key_env=opts.api_key_env, concurrency=opts.concurrency,
                              timeout=opts.timeout, max_retries=opts.max_retries)
    return llm_mod.create(opts.name)


def caption_run(inputs: list[str | Path], out: str | Path, config: CaptionRunConfig, *,
                force: bool = False, progress: bool = True, llm: Any | None = None,
                shard: Shard | None = None) -> StageSummary:
    """The ``howtocap caption`` command: every input video (of this ``shard``) gets subtitles
    and LLM captions."""
    from howtocap.llm.captioner import CaptionConfig

    items = resolve_inputs(inputs)
    if not items:
        raise HowtocapError(f"no videos found in {', '.join(map(str, inputs))}")
    rundir = RunDir(out)
    rundir.record_videos(items)
    rundir.write_config("caption", config.model_dump())
    if force:
        for it in items:
            rundir.status_path("caption", it.video_id).unlink(missing_ok=True)

    source = None
    if config.subtitles:
        from howtocap.io.subtitles import SubtitleSource

        source = SubtitleSource.open(config.subtitles)
    cap_cfg = CaptionConfig(**config.caption)
    llm = llm or build_llm(config.llm)

    asr = LazyASR(config.asr_model)

    def fn(item: VideoItem) -> dict[str, pd.DataFrame]:
        return caption_stage(item, source=source, asr_mode=config.asr, asr=asr, llm=llm,
                             cfg=cap_cfg)

    # HTTP backends overlap videos so `concurrency` requests stay in flight; llama.cpp is serial.
    workers = config.llm.concurrency if config.llm.url else 1
    summary = run_stage(rundir, items, "caption", fn, main_table="captions", shard=shard,
                        workers=workers, progress=progress)
    rundir.merge("subtitles")
    rundir.merge("captions")
    rundir.status_table()
    return summary
