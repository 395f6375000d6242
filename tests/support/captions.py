"""A scripted LLM and the labelled caption texts of benchmarks/data the caption tests share."""

from __future__ import annotations

import json
from pathlib import Path

from howtocap.llm.base import GenerationConfig


class Scripted:
    """An LLM that answers every block with the same caption lines."""

    name = "scripted"

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def chat(self, messages: list, gen: GenerationConfig) -> str:
        return self.reply

    def chat_many(self, batch: list, gen: GenerationConfig) -> list:
        return [self.chat(m, gen) for m in batch]


DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def labelled_texts() -> list[str]:
    """Every caption of filler_captions.json and every narration line of
    spoken_youcook2.json: the texts the rules were tuned and judged on."""
    caps = json.loads((DATA / "filler_captions.json").read_text())["captions"]
    spoken = json.loads((DATA / "spoken_youcook2.json").read_text())["videos"]
    return [str(c[0]) for c in caps] + [str(ln["text"]) for v in spoken for ln in v["lines"]]
