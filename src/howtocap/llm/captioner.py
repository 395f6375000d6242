"""The captioning stage for one video: ASR sentences -> blocks -> LLM -> parsed captions.

Pure: it reads the video's subtitle rows and returns caption rows plus counts; where it runs
and where the rows go is the runner's business.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from howtocap.errors import HowtocapError
from howtocap.llm.base import LLM, GenerationConfig, drop_cut_line
from howtocap.llm.blocks import make_blocks
from howtocap.llm.parse import norm_text, parse_reply
from howtocap.llm.prompt import DEFAULT_TEMPLATE, Template, build_messages, resolve_template
from howtocap.rundir import conform, empty_table


class CaptionConfig(BaseModel):
    """Stage settings with the paper's defaults (200-word blocks, 8-second clips)."""

    model_config = ConfigDict(extra="forbid")

    block_words: int = Field(200, ge=1)
    clip_seconds: float = Field(8.0, gt=0)
    # Template text (with {asr} or <block>) or a path to a .txt/.yaml template file.
    template: str = DEFAULT_TEMPLATE
    range_slack: float = Field(0.0, ge=0)  # seconds allowed outside a block's time range
    generation: GenerationConfig = Field(default_factory=GenerationConfig)

    def resolved_template(self) -> Template:
        """Text holding a placeholder is the template; anything else is read as a file path."""
        return resolve_template(self.template)


@dataclass
class CaptionStats:
    blocks: int = 0
    replies: int = 0
    captions: int = 0
    lines_without_timestamp: int = 0
    out_of_range: int = 0
    empty: int = 0
    duplicates: int = 0
    truncated_replies: int = 0  # hit max_tokens; their cut-off last line was dropped

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def caption_video(video_id: str, subtitles: pd.DataFrame, llm: LLM,
                  cfg: CaptionConfig | None = None) -> tuple[pd.DataFrame, CaptionStats]:
    """Caption rows (``SCHEMAS['captions']``) for one video, de-duplicated and time-sorted.

    Identical captions (same text up to case/spacing/end punctuation) keep the earliest one.
    Raises ``HowtocapError`` when the backend fails or no reply has a usable caption line.
    """
    cfg = cfg or CaptionConfig()
    template = cfg.resolved_template()
    stats = CaptionStats()
    blocks = make_blocks(subtitles, cfg.block_words)
    stats.blocks = len(blocks)
    if not blocks:
        return empty_table("captions"), stats
    replies = llm.chat_many([build_messages(b, template) for b in blocks], cfg.generation)
    for reply in replies:
        if isinstance(reply, Exception):
            if isinstance(reply, HowtocapError):
                raise reply
            raise HowtocapError(f"LLM {llm.name} failed: {' '.join(str(reply).split())}") \
                from reply
    stats.replies = len(replies)
    rows: list[dict[str, object]] = []
    for block, reply in zip(blocks, replies, strict=True):
        text, cut = drop_cut_line(reply)
        stats.truncated_replies += int(cut)
        res = parse_reply(text, block, cfg.clip_seconds, cfg.range_slack)
        stats.lines_without_timestamp += res.n_no_timestamp
        stats.out_of_range += res.n_out_of_range
        stats.empty += res.n_empty
        stats.duplicates += res.n_duplicates
        rows += [{"start": c.start, "end": c.end, "text": c.text, "block": block.index}
                 for c in res.captions]
    if not rows:
        if stats.out_of_range:
            raise HowtocapError(f"LLM replies had no caption inside the blocks' time ranges "
                                f"({stats.blocks} blocks, {stats.out_of_range} out of range)")
        hint = (f"; {stats.truncated_replies} cut at --max-tokens "
                f"{cfg.generation.max_tokens}" if stats.truncated_replies else "")
        raise HowtocapError(f"LLM reply had no parseable caption line ({stats.blocks} blocks"
                            f"{hint})")
    df = pd.DataFrame(rows).sort_values(["start", "block"], kind="stable")
    keys = df["text"].map(norm_text)
    dup = keys.duplicated(keep="first")
    stats.duplicates += int(dup.sum())
    df = df[~dup].reset_index(drop=True)
    df.insert(0, "video_id", video_id)
    df["source"] = "llm"
    df["model"] = llm.name
    stats.captions = len(df)
    return conform(df, "captions"), stats
