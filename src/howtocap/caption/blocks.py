"""Pack timestamped ASR sentences into word-limited blocks, the unit the LLM summarises.

Every sentence of a block is written as ``<int start>s: <text>`` on its own line, including
the first one of each block (the reference implementation drops that prefix, which leaves the
LLM guessing the opening timestamp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from howtocap.errors import HowtocapError

if TYPE_CHECKING:
    from howtocap.schemas import Rows


@dataclass(frozen=True)
class Sentence:
    start: float
    end: float
    text: str

    @property
    def n_words(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class Block:
    """A run of consecutive sentences; ``start``/``end`` bound the timestamps it may produce."""

    index: int
    start: float
    end: float
    text: str
    sentences: tuple[Sentence, ...] = field(default_factory=tuple)

    @property
    def n_words(self) -> int:
        return sum(s.n_words for s in self.sentences)


def _floats(values: Any) -> np.ndarray:
    """A column as floats, anything unreadable NaN (a frame's column or a ``Rows`` one)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return values.astype(float, copy=False)
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype=object)
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)


def _sentences(subtitles: pd.DataFrame | Rows) -> list[tuple[Sentence, int]]:
    """Clean sentences in time order, each with its word count (counted once)."""
    missing = [c for c in ("start", "end", "text") if c not in subtitles.columns]
    if missing:
        raise HowtocapError(f"subtitles table lacks columns {missing}")
    # Plain lists, not pandas or numpy scalars: this runs once per video, a million times.
    starts = _floats(subtitles["start"])
    ends = _floats(subtitles["end"])
    ends = np.where(np.isnan(ends), starts, ends).tolist()
    texts = subtitles["text"]
    texts = texts.tolist() if not isinstance(texts, list) else texts
    order = np.argsort(starts, kind="stable").tolist()  # NaN starts sort last, dropped
    starts = starts.tolist()
    out = []
    new = object.__new__
    for i in order:
        start, text = starts[i], texts[i]
        if start != start:
            break
        words = text.split() if isinstance(text, str) else []
        if words:
            # Sentence(max(0.0, start), ...) with its fields set at once: a frozen
            # dataclass's __init__ sets each through object.__setattr__ (~40 a video)
            sent = new(Sentence)
            sent.__dict__.update(start=max(0.0, start), end=max(start, ends[i]),
                                 text=" ".join(words))
            out.append((sent, len(words)))
    return out


def _block(index: int, sents: list[Sentence]) -> Block:
    """A block of sentences in time order (the first starts it: starts are sorted), built
    with its fields set at once, like the sentences (~3 a video)."""
    floor = math.floor
    block = object.__new__(Block)
    block.__dict__.update(index=index, start=sents[0].start,
                          end=max([s.end for s in sents]),
                          text="\n".join([f"{floor(s.start)}s: {s.text}" for s in sents]),
                          sentences=tuple(sents))
    return block


def make_blocks(subtitles: pd.DataFrame | Rows, max_words: int) -> list[Block]:
    """Greedy packing in time order; a sentence longer than ``max_words`` is a block alone
    (``CaptionConfig.block_words``: its default and bound are declared there)."""
    blocks: list[Block] = []
    cur: list[Sentence] = []
    cur_words = 0
    for sent, n_words in _sentences(subtitles):
        if cur and cur_words + n_words > max_words:
            blocks.append(_block(len(blocks), cur))
            cur, cur_words = [], 0
        cur.append(sent)
        cur_words += n_words
    if cur:
        blocks.append(_block(len(blocks), cur))
    return blocks
