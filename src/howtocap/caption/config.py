"""The caption step's typed settings: which videos, ``--asr``, the LLM, the caption settings
(``CaptionConfig``, the captioner's) and an optional VLM; validated before any file is
written, recorded in ``DIR/config/caption.json``.

Each field with a ``description`` is a flag of ``howtocap caption`` and ``run`` (its name,
default, bounds and help are read from here by ``cli.options``); the nested models declared in
other modules get their flags from the ``flags`` table of the field that holds them, their
defaults and bounds from their own fields.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from howtocap.caption.constrain import CAPTION_GBNF, CAPTION_REGEX, STEP_GBNF, STEP_REGEX
from howtocap.caption.prompt import (
    DEFAULT_TEMPLATE_NAME,
    TEMPLATE_NAMES,
    Template,
    resolve_template,
)
from howtocap.caption.vlm import VLMOptions
from howtocap.llm import LLMOptions
from howtocap.llm.base import GenerationConfig
from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY
from howtocap.subtitles.policy import ASR_MODE, AsrMode

LLM_FLAGS: dict[str, Any] = {
    "name": {"flag": "--llm", "help": f"embedded (= {EMBEDDED_DEFAULT}), "
                                      f"{', '.join(REGISTRY)}, or a .gguf path."},
    "url": {"flag": "--llm-url", "help": (
        "OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1. Several times (or a file of "
        "URLs, one a line): replicas of one model, each request to the least busy; a dead one "
        "is dropped and its work re-sent.")},
    "model": {"flag": "--llm-model", "help": "Model name sent to --llm-url."},
    "api_key_env": {"help": "Env variable holding the API key."},
    "concurrency": {"help": "Requests in flight per server (--llm-url)."},
    "timeout": {"flag": "--llm-timeout", "help": "Seconds per request."},
    "max_retries": {"flag": "--llm-retries", "help": "Retries on 429/5xx/timeouts."},
}
GENERATION_FLAGS: dict[str, Any] = {
    "temperature": {"help": "Sampling temperature (0: greedy, the same captions on a re-run)."},
    "max_tokens": {"help": "Longest reply per block (a cut-off last line is dropped)."},
    "stop": {"help": "Stop string (repeatable)."},
    "seed": {"flag": "--llm-seed", "help": "The LLM's sampling seed (with --temperature > 0)."},
}
VLM_FLAGS: dict[str, Any] = {
    "url": {"flag": "--vlm-url", "help": (
        "OpenAI-compatible multimodal server (e.g. vLLM serving Qwen2-VL): each block is sent "
        "with --vlm-frames frames of its time span; needs the video files.")},
    "model": {"flag": "--vlm-model", "help": "Model name sent to --vlm-url."},
    "frames": {"flag": "--vlm-frames", "help": "Frames per block sent to --vlm-url."},
}


class CaptionConfig(BaseModel):
    """Stage settings with the paper's defaults (200-word blocks, 8-second clips)."""

    model_config = ConfigDict(extra="forbid")

    block_words: int = Field(200, ge=1, description="Words per LLM block.")
    clip_seconds: float = Field(8.0, gt=0, description=(
        "Caption end = start + this (`run`: also align's clip length)."))
    # A built-in template name, template text holding {asr} or <block>, or a path to a
    # .txt/.yaml/.json template file.
    template: str = Field(DEFAULT_TEMPLATE_NAME, description=(
        f"Prompt: {', '.join(TEMPLATE_NAMES)}, or a .txt/.yaml/.json template file."))
    range_slack: float = Field(0.0, ge=0)  # seconds allowed outside a block's time range
    # Grammar-constrained decoding (backends that support it). Off by default: chosen by
    # benchmarks/quality/bench_captions.py (results/captions.md), a tie on F broken by fillers.
    constrain: bool = Field(False, description=(
        "Constrain decoding to '<n>s: caption' lines (grammar; servers that reject it are "
        "asked without). Off by default (benchmarks/results/captions.md)."))
    grammar: Literal["lines", "steps"] = Field("lines", json_schema_extra={"text": True},
                                               description=(
        "The language --constrain allows: 'lines' (any '<n>s: caption' line) or 'steps' (no "
        "line opens with I, we, you, so, and, but or if)."))
    drop_chatter: bool = Field(True, json_schema_extra={"flag": "--keep-chatter",
                                                        "invert": True}, description=(
        "Keep captions such as 'Subscribe to the channel.' (`run`: in the align filter "
        "too)."))
    reject_fillers: bool = Field(True, json_schema_extra={"flag": "--keep-fillers",
                                                          "invert": True}, description=(
        "Keep captions that show nothing ('So yeah, let's see.', 'Take your time.') as "
        "training text; by default they are marked in the captions table's `rejected` column "
        "and not aligned."))
    retries: int = Field(1, ge=0, le=5)  # extra tries for a block whose reply gave nothing
    # on by default: chosen by benchmarks/quality/bench_real_captions.py (real_captions.md)
    imperative: bool = Field(True, description=(
        "Rewrite kept captions into the imperative ('So now I'm going to add salt' -> "
        "'Add salt.')."))
    # caption.merge; 30 s: chosen with the template, as above
    merge_seconds: float = Field(30.0, ge=0, le=600, description=(
        "Mark a kept caption 'repeat' when an earlier kept one within this many seconds "
        "says nearly the same; 0 = off."))
    generation: GenerationConfig = Field(default_factory=GenerationConfig,
                                         json_schema_extra={"flags": GENERATION_FLAGS})

    def resolved_template(self) -> Template:
        return resolve_template(self.template)

    def resolved_generation(self) -> GenerationConfig:
        """The generation settings with the caption grammar attached when constraining."""
        if not self.constrain:
            return self.generation
        gbnf, regex = (STEP_GBNF, STEP_REGEX) if self.grammar == "steps" else \
            (CAPTION_GBNF, CAPTION_REGEX)
        return self.generation.model_copy(update={"grammar": gbnf, "regex": regex})


class CaptionRunConfig(BaseModel):
    """Everything ``howtocap caption`` needs; recorded in ``DIR/config/caption.json``."""

    model_config = ConfigDict(extra="forbid")

    subtitles: str | None = Field(None, json_schema_extra={"path": True}, description=(
        "HowTo100M-style subtitles: caption.json, a pickle of it, sentencified JSON, a "
        ".parquet, or a folder of <id>.csv. Without INPUTS: caption every video in it (text "
        "only)."))
    ids: str | list[str] | None = Field(
        None, json_schema_extra={"multiple": False, "path": True},
        description="Caption only these videos: a text file, one video id a line (# comments).")
    limit: int | None = Field(None, ge=1, description="Caption only the first N videos (of "
                                                      "--subtitles, or of INPUTS).")
    asr: AsrMode = Field(ASR_MODE, description=(
        "auto: Whisper only for videos without subtitles; always: Whisper on every video "
        "file, ignoring all subtitles; never: no Whisper (no subtitles = error)."))
    asr_model: str = Field("default", description="default (bundled tiny.en), base, a "
                                                  "CTranslate2 folder, or a faster-whisper "
                                                  "model name.")
    llm: LLMOptions = Field(default_factory=LLMOptions, json_schema_extra={"flags": LLM_FLAGS})
    caption: CaptionConfig = Field(default_factory=CaptionConfig)
    vlm: VLMOptions | None = Field(None, json_schema_extra={"flags": VLM_FLAGS})
    # changes speed, never a verdict
    parse_workers: int | None = Field(None, ge=0, description=(
        "Processes that parse captions for the filler test and the imperative rewrite "
        "(default: with --llm-url one per core, up to 8; none with an LLM in this process; 0: "
        "in this process)."))

    @model_validator(mode="after")
    def _one_writer(self) -> CaptionRunConfig:
        if self.vlm is not None and self.llm.url:
            raise ValueError("give --llm-url or --vlm-url, not both: the VLM writes the "
                             "captions")
        return self
