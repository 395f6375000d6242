"""Near-duplicate captions within a time window (issue #40).

A small model writes one caption per speech line, and a narrator says a step two or three
times ("add the flour … so the flour goes in … now all the flour is in"): the same step comes
out as several captions seconds apart. A viewer sees one step. A caption is a *repeat* of an
earlier kept one when it starts at most ``window`` seconds later and their content words
overlap by ``MIN_OVERLAP`` or more (Jaccard); the earlier caption stays.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MIN_OVERLAP = 0.5
_WORD = re.compile(r"[a-z]+")
STOP = frozenset([
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "into", "onto", "with", "for",
    "from", "at", "by", "it", "its", "this", "that", "these", "those", "some", "all", "any",
    "more", "then", "now", "up", "down", "out", "off", "over", "about", "until", "is", "are",
    "be"])


def content_words(text: str) -> frozenset[str]:
    """Lower-case words of a caption without function words; a plural's final s dropped."""
    return frozenset(w[:-1] if len(w) > 3 and w.endswith("s") else w
                     for w in _WORD.findall(text.lower()) if w not in STOP)


def repeats(texts: Sequence[str], starts: Sequence[float], window: float) -> list[int]:
    """Indexes of the captions that repeat an earlier non-repeat within ``window`` seconds
    (captions in time order)."""
    words = [content_words(t) for t in texts]
    out: list[int] = []
    kept: list[int] = []
    for i, w in enumerate(words):
        dup = False
        for j in reversed(kept):  # kept in time order: stop at the first beyond the window
            if starts[i] - starts[j] > window:
                break
            union = w | words[j]
            if union and len(w & words[j]) / len(union) >= MIN_OVERLAP:
                dup = True
                break
        if dup:
            out.append(i)
        else:
            kept.append(i)
    return out
