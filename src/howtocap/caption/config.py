"""The caption step's typed settings: which videos, ``--asr``, the LLM, the caption settings
and an optional VLM; validated before any file is written, recorded in
``DIR/config/caption.json``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.vlm import VLMOptions
from howtocap.llm import LLMOptions
from howtocap.subtitles.policy import AsrMode


class CaptionRunConfig(BaseModel):
    """Everything ``howtocap caption`` needs; recorded in ``DIR/config/caption.json``."""

    model_config = ConfigDict(extra="forbid")

    subtitles: str | None = None  # HowTo100M-style source (caption.json, pickle, CSV folder)
    ids: str | list[str] | None = None  # --ids: a file of video ids (or the ids) to caption
    limit: int | None = Field(None, ge=1)  # --limit: the first N videos
    asr: AsrMode = "auto"
    asr_model: str = "default"
    llm: LLMOptions = Field(default_factory=LLMOptions)
    caption: CaptionConfig = Field(default_factory=CaptionConfig)
    vlm: VLMOptions | None = None  # --vlm-url: a multimodal server captions blocks + frames
    # --parse-workers: processes for the filler test's parse (None: one per core, up to 8, with
    # --llm-url; none with an LLM in this process); changes speed, never a verdict
    parse_workers: int | None = Field(None, ge=0)
