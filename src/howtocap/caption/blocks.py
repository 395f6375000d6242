"""Pack timestamped ASR sentences into word-limited blocks, the unit the LLM summarises.

Every sentence of a block is written as ``<int start>s: <text>`` on its own line, including
the first one of each block (the reference implementation drops that prefix, which leaves the
LLM guessing the opening timestamp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from howtocap.errors import HowtocapError


@dataclass(frozen=True)
class Sentence:
    start: float
    end: float
    text: str

    @property
    def n_words(self) -> int:
        return len(self.text.split())

    def line(self) -> str:
        return f"{math.floor(self.start)}s: {self.text}"


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


def _sentences(subtitles: pd.DataFrame) -> list[Sentence]:
    missing = [c for c in ("start", "end", "text") if c not in subtitles.columns]
    if missing:
        raise HowtocapError(f"subtitles table lacks columns {missing}")
    # Plain arrays, not pandas row access: this runs once per video, a million times.
    starts = pd.to_numeric(subtitles["start"], errors="coerce").to_numpy(dtype=float)
    ends = pd.to_numeric(subtitles["end"], errors="coerce").to_numpy(dtype=float)
    ends = np.where(np.isnan(ends), starts, ends)
    texts = subtitles["text"].tolist()
    out = []
    for i in np.argsort(starts, kind="stable"):  # NaN starts sort last and are dropped
        start, text = float(starts[i]), texts[i]
        if start != start:
            break
        clean = " ".join(text.split()) if isinstance(text, str) else ""
        if clean:
            out.append(Sentence(max(0.0, start), max(start, float(ends[i])), clean))
    return out


def _block(index: int, sents: list[Sentence]) -> Block:
    return Block(index=index, start=min(s.start for s in sents), end=max(s.end for s in sents),
                 text="\n".join(s.line() for s in sents), sentences=tuple(sents))


def make_blocks(subtitles: pd.DataFrame, max_words: int = 200) -> list[Block]:
    """Greedy packing in time order; a sentence longer than ``max_words`` is a block alone."""
    if max_words < 1:
        raise HowtocapError(f"--block-words must be at least 1, got {max_words}")
    blocks: list[Block] = []
    cur: list[Sentence] = []
    cur_words = 0
    for sent in _sentences(subtitles):
        if cur and cur_words + sent.n_words > max_words:
            blocks.append(_block(len(blocks), cur))
            cur, cur_words = [], 0
        cur.append(sent)
        cur_words += sent.n_words
    if cur:
        blocks.append(_block(len(blocks), cur))
    return blocks
