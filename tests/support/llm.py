"""LLM clients with short retries, a closed port, and the run-directory helpers the LLM
tests share."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd

from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.llm.base import GenerationConfig
from howtocap.llm.openai import OpenAIChatLLM
from howtocap.llm.pool import ServerPool
from tests.support.stages import record_table, write_rows

MSG = [{"role": "user", "content": "3s: crack the eggs into a bowl"}]


GEN = GenerationConfig(max_tokens=32)


CLEAN = "Sure! Here is the summary:\n3s: Crack the eggs into a."


def client(url: str, **kw: object) -> OpenAIChatLLM:
    opts: dict = {"backoff": 0.01, "backoff_max": 0.05, "timeout": 0.5, **kw}
    return OpenAIChatLLM(url, **opts)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: nothing listens there


def subtitle_parts(rd: RunDir, n: int) -> list[VideoItem]:
    write_rows(rd, "subtitles", pd.concat([pd.DataFrame({
        "video_id": f"v{i}", "start": [0.0, 5.0], "end": [4.0, 9.0],
        "text": [f"crack egg {i}", f"whisk egg {i}"], "source": "vtt"}) for i in range(n)],
        ignore_index=True))
    return [VideoItem(video_id=f"v{i}", video_path=None, subtitle_path=None) for i in range(n)]


def statuses(rd: RunDir) -> pd.DataFrame:
    """Every stage's records, those of unfinished shards too (a stopped run's)."""
    frames = [record_table(rd, s).to_pandas() for s in sorted(rd.stages_with_results())]
    return pd.concat(frames, ignore_index=True) if frames else \
        pd.DataFrame(columns=["video_id", "stage", "status"])


def write_caption_json(path: Path, n: int) -> None:
    import json

    path.write_text(json.dumps({f"vid{i:03d}": {"start": [0.0, 4.0], "end": [3.5, 8.0],
                                                "text": [f"stir pot {i}", f"add salt {i}"]}
                                for i in range(n)}))


def pool(urls: list[str], **kw: object) -> ServerPool:
    opts: dict = {"backoff": 0.01, "backoff_max": 0.05, "timeout": 5.0, "max_retries": 2,
                  "breaker_after": 2, **kw}
    return ServerPool([OpenAIChatLLM(u, **opts) for u in urls])
