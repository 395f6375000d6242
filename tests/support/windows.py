"""An instant in-process LLM and a seeded caption.json for caption runs taken a window at a time."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.run import CaptionRunConfig
from howtocap.errors import ServiceUnavailable

REPLY_TIME = re.compile(r"^(\d+)s: ", re.M)


WORDS = ["crack", "the", "eggs", "into", "a", "bowl", "whisk", "until", "smooth", "heat",
         "pan", "pour", "flip", "serve", "salt"]


class QuickLLM:
    """Answers at once with one caption per block; ``down_after`` calls, it is 'down'."""

    name = "quick"

    def __init__(self, down_after: int | None = None) -> None:
        self.calls = 0
        self.down_after = down_after

    def chat(self, messages: list[dict[str, str]], gen: Any) -> str:
        self.calls += 1
        if self.down_after is not None and self.calls > self.down_after:
            raise ServiceUnavailable("the LLM server went away")
        m = REPLY_TIME.search(messages[-1]["content"])
        t = m.group(1) if m else "0"
        return f"{t}s: Do step {t} of the recipe."

    def chat_many(self, batch: list[list[dict[str, str]]], gen: Any) -> list[Any]:
        out: list[Any] = []
        for messages in batch:
            try:
                out.append(self.chat(messages, gen))
            except ServiceUnavailable as exc:
                out.append(exc)
        return out


def write_source(path: Path, n: int, seed: int = 3) -> list[str]:
    """``{video_id: {start, end, text}}`` with ids in no sorted order; one video has no
    lines at all (reported, not fatal)."""
    rng = random.Random(seed)
    ids = [f"{rng.getrandbits(32):08x}-{i}" for i in range(n)]
    data: dict[str, Any] = {}
    for k, vid in enumerate(ids):
        t, start, end, text = 0.0, [], [], []
        for _ in range(0 if k == 5 else rng.randint(4, 9)):
            d = rng.uniform(1.5, 4.0)
            start.append(round(t, 2))
            end.append(round(t + d, 2))
            text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10))))
            t += d + 0.5
        data[vid] = {"start": start, "end": end, "text": text}
    path.write_text(json.dumps(data))
    return ids


def config(src: Path) -> CaptionRunConfig:
    return CaptionRunConfig(subtitles=str(src), caption=CaptionConfig(reject_fillers=False))
