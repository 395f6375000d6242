"""The captioning stage for one video: ASR sentences -> blocks -> LLM -> parsed captions.

Pure: it reads the video's subtitle rows and returns caption rows plus counts; where it runs
and where the rows go is the runner's business.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from typing import Any, TypeVar

import pandas as pd

from howtocap.caption.blocks import Block, make_blocks
from howtocap.caption.chatter import is_chatter, may_hold_chatter
from howtocap.caption.config import CaptionConfig
from howtocap.caption.imperative import judge_captions
from howtocap.caption.merge import repeats
from howtocap.caption.parse import CaptionRow, ParseResult, parse_rows
from howtocap.caption.prompt import build_messages
from howtocap.errors import HowtocapError, ServiceUnavailable
from howtocap.llm.base import LLM, Messages, ask, drop_cut_line, is_blocking, run_inline, run_sync
from howtocap.schemas import Rows, empty_rows, rows

__all__ = ["CaptionConfig", "CaptionError", "CaptionStats"]  # CaptionConfig: caption.config
T = TypeVar("T")


@dataclass
class CaptionStats:
    blocks: int = 0
    replies: int = 0
    captions: int = 0
    lines_without_timestamp: int = 0
    out_of_range: int = 0
    empty: int = 0
    duplicates: int = 0
    chatter: int = 0  # captions dropped as channel chatter
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> captions (caption.filler)
    truncated_replies: int = 0  # hit max_tokens; their cut-off last line was dropped
    retried_blocks: int = 0
    failed_blocks: list[tuple[int, str]] = field(default_factory=list)  # (block, why)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def failure_summary(self) -> str:
        """One line: how many blocks failed, which, and the first reason."""
        ids = ", ".join(str(b) for b, _ in self.failed_blocks[:10])
        more = ", …" if len(self.failed_blocks) > 10 else ""
        return (f"{len(self.failed_blocks)} of {self.blocks} LLM blocks gave no caption "
                f"(block {ids}{more}: {self.failed_blocks[0][1]})")


class CaptionError(HowtocapError):
    """No block of the video gave a caption; ``stats`` says which blocks failed and why."""

    def __init__(self, message: str, stats: CaptionStats) -> None:
        super().__init__(message)
        self.stats = stats


def _block_rows(block: Block, reply: str, cfg: CaptionConfig,
                stats: CaptionStats) -> tuple[list[CaptionRow] | None, str]:
    """Caption rows of one reply, or None and why the reply failed. A reply that only held
    channel chatter succeeded with no rows: asking again would not find an action."""
    text, cut = drop_cut_line(reply)
    stats.truncated_replies += int(cut)
    res = ParseResult()
    found = parse_rows(text, block, res, cfg.clip_seconds, cfg.range_slack)
    stats.lines_without_timestamp += res.n_no_timestamp
    stats.out_of_range += res.n_out_of_range
    stats.empty += res.n_empty
    stats.duplicates += res.n_duplicates
    out = found
    if found and cfg.drop_chatter and may_hold_chatter(text):
        out = [r for r in found if not is_chatter(r[3])]
        stats.chatter += len(found) - len(out)
    if found:
        return out, ""
    if res.n_out_of_range:
        return None, f"{res.n_out_of_range} captions outside the block's time range"
    if cut:
        return None, f"reply cut at --max-tokens {cfg.generation.max_tokens}"
    return None, "reply had no timestamped caption line"


async def _blocking(inline: bool, fn: Callable[[], T]) -> T:
    """``fn()`` on another thread, so the event loop goes on; in place when ``inline``."""
    return fn() if inline else await asyncio.to_thread(fn)


_by_time = itemgetter(0, 1)  # a row's start, then its block


def mark_repeats(texts: list[str], rejected: list[str] | str, starts: list[float],
                 seconds: float) -> list[str] | str:
    """``rejected`` with the kept near-duplicates of an earlier kept caption within
    ``seconds`` marked "repeat" (issue #40; 0: none marked)."""
    reasons = rejected if isinstance(rejected, list) else [rejected] * len(texts)
    keep = [i for i, why in enumerate(reasons) if not why]
    if not seconds or not keep:
        return rejected
    reasons = list(reasons)
    for i in repeats([texts[i] for i in keep], [starts[i] for i in keep], seconds):
        reasons[keep[i]] = "repeat"
    return reasons


def _judged(texts: list[str], starts: list[float], cfg: CaptionConfig, nlp: Any | None
            ) -> tuple[list[str], list[str] | str]:
    """The captions' texts and reasons for rejection: filler verdicts and the imperative
    rewrite of the kept ones from one parse, then the repeats; without the filler test every
    reason is "" (one value for the column)."""
    rejected: list[str] | str = ""
    if cfg.reject_fillers or cfg.imperative:
        why, texts = judge_captions(texts, nlp, reject_fillers=cfg.reject_fillers,
                                    imperative=cfg.imperative)
        rejected = why if cfg.reject_fillers else ""
    return texts, mark_repeats(texts, rejected, starts, cfg.merge_seconds)


def caption_video(video_id: str, subtitles: pd.DataFrame | Rows, llm: LLM,
                  cfg: CaptionConfig | None = None, *,
                  attach: Callable[[Block, Messages], Messages] | None = None,
                  nlp: Any | None = None
                  ) -> tuple[pd.DataFrame, CaptionStats]:
    """Caption rows (``SCHEMAS['captions']``) for one video, de-duplicated (the earliest of
    identical texts up to case/spacing/end punctuation) and time-sorted.

    A block whose reply gives no caption is asked again (``cfg.retries`` times, another seed);
    one that still fails is listed in ``stats.failed_blocks``. ``CaptionError`` only when no
    block gave a caption and some failed (pure chatter is no error). ``attach``: a block's
    messages as sent (frames for a VLM), once per block. With ``cfg.reject_fillers`` a caption
    that shows nothing keeps its row with its reason in ``rejected`` (``nlp``: the parser)."""
    out, stats = caption_rows(video_id, subtitles, llm, cfg, attach=attach, nlp=nlp)
    return out.to_pandas(), stats


def caption_rows(video_id: str, subtitles: pd.DataFrame | Rows, llm: LLM,
                 cfg: CaptionConfig | None = None, *,
                 attach: Callable[[Block, Messages], Messages] | None = None,
                 nlp: Any | None = None) -> tuple[Rows, CaptionStats]:
    """``caption_video`` as plain columns (``schemas.Rows``), what the stage commits: no
    pandas frame per video on a million-video run. A blocking model is called in place, on
    this thread, with no event loop."""
    inline = is_blocking(llm)
    coro = acaption_rows(video_id, subtitles, llm, cfg, attach=attach, nlp=nlp, inline=inline)
    return run_inline(coro) if inline else run_sync(coro)


async def acaption_rows(video_id: str, subtitles: pd.DataFrame | Rows, llm: LLM,
                        cfg: CaptionConfig | None = None, *,
                        attach: Callable[[Block, Messages], Messages] | None = None,
                        nlp: Any | None = None, inline: bool = False
                        ) -> tuple[Rows, CaptionStats]:
    """``caption_rows`` as a coroutine: each round's blocks are asked at once; what blocks the
    thread (frames, the parse) runs on another one so the loop keeps other videos' requests
    going (``inline``: all in place, no loop)."""
    cfg = cfg or CaptionConfig()
    template = cfg.resolved_template()
    gen = cfg.resolved_generation()
    stats = CaptionStats()
    blocks = make_blocks(subtitles, cfg.block_words)
    stats.blocks = len(blocks)
    if not blocks:
        return empty_rows("captions"), stats
    got: dict[int, list[CaptionRow] | None] = {}
    why: dict[int, str] = {}
    prompts = {b.index: build_messages(b, template) for b in blocks}
    if attach is not None:
        prompts = await _blocking(inline, lambda: {b.index: attach(b, prompts[b.index])
                                                   for b in blocks})
    todo = list(blocks)
    failed: list[int] = []  # the backend raised: its client already retried, so we do not
    for attempt in range(cfg.retries + 1):
        replies = await ask(llm, [prompts[b.index] for b in todo], gen, inline=inline)
        down = next((r for r in replies if isinstance(r, ServiceUnavailable)), None)
        if down is not None:  # the server is gone: no block failed, the run stops
            raise down
        for block, reply in zip(todo, replies, strict=True):
            if isinstance(reply, Exception):
                msg = str(reply) if isinstance(reply, HowtocapError) else \
                    f"LLM {llm.name} failed: {reply}"
                why[block.index] = " ".join(msg.split())
                failed.append(block.index)
                continue
            stats.replies += 1
            got[block.index], why[block.index] = _block_rows(block, reply, cfg, stats)
        todo = [b for b in todo if got.get(b.index) is None and b.index not in failed]
        if not todo or attempt == cfg.retries:
            break
        stats.retried_blocks += len(todo)
        gen = gen.retry()
    lost = sorted({b.index for b in todo} | set(failed))
    stats.failed_blocks = [(i, why[i]) for i in lost]
    flat = [r for b in blocks for r in got.get(b.index) or []]
    if not flat:
        if lost:
            raise CaptionError(stats.failure_summary(), stats)
        return empty_rows("captions"), stats
    # Plain lists, one frame built in schema order: per-video pandas (sorting, inserts, dtype
    # fixes) was most of the driver's own cost on a text-only run of a million videos.
    flat.sort(key=_by_time)  # stable: a block's order stays
    first: dict[str, CaptionRow] = {}
    for r in flat:
        first.setdefault(r[4], r)  # r[4]: norm_text(text), from the parser
    kept = list(first.values())
    stats.duplicates += len(flat) - len(kept)
    texts = [str(r[3]) for r in kept]
    starts = [r[0] for r in kept]
    parse = cfg.reject_fillers or cfg.imperative  # the parse: off the event loop
    texts, rejected = await _blocking(inline or not parse,
                                      lambda: _judged(texts, starts, cfg, nlp))
    out = rows("captions", len(kept), video_id=video_id,
               start=[r[0] for r in kept], end=[r[2] for r in kept],
               text=texts, source="llm", block=[r[1] for r in kept],
               model=llm.name, config_id="", rejected=rejected)
    if isinstance(rejected, list):
        stats.rejected = dict(Counter(why_not for why_not in rejected if why_not))
    stats.captions = len(out)
    return out, stats
