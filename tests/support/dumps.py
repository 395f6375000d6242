"""HowTo100M-style subtitle dumps (caption.json, pickle, records, CSV folder) from a seed."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import pandas as pd

WORDS = ["first", "we", "take", "the", "eggs", "and", "crack", "them", "into", "a", "bowl",
         "then", "whisk", "with", "fork", "until", "smooth", "add", "salt", "pepper", "heat",
         "pan", "pour", "slowly", "flip", "it", "over", "serve"]


def video_entry(rng: random.Random, lines: int) -> dict[str, list[Any]]:
    """HowTo100M's shape: parallel start/end/text lists, times in seconds."""
    t, start, end, text = 0.0, [], [], []
    for _ in range(lines):
        d = rng.uniform(1.5, 4.0)
        start.append(round(t, 2))
        end.append(round(t + d, 2))
        text.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))))
        t += d + 0.5
    return {"start": start, "end": end, "text": text}


def write_caption_json(path: Path, n_videos: int, lines: int = 6, seed: int = 0) -> list[str]:
    """``{vid: {start, end, text}}`` written one video at a time (the test must not be the hog)."""
    rng = random.Random(seed)
    ids = [f"vid{i:06d}" for i in range(n_videos)]
    with path.open("w") as fh:
        fh.write("{")
        for i, vid in enumerate(ids):
            fh.write(("," if i else "") + json.dumps(vid) + ":"
                     + json.dumps(video_entry(rng, lines)))
        fh.write("}")
    return ids


def write_source(kind: str, folder: Path, data: dict[str, dict[str, list[Any]]]) -> Path:
    """The same videos as each HowTo100M-style source a user may hold."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "caption.json":
        path = folder / "caption.json"
        path.write_text(json.dumps(data))
    elif kind == "pickle":
        path = folder / "caption.pickle"
        path.write_bytes(pickle.dumps(data))
    elif kind == "records":  # sentencified: a list of records
        path = folder / "sentencified.json"
        path.write_text(json.dumps([{"video_id": v, "start": s, "end": e, "text": t}
                                    for v, d in data.items()
                                    for s, e, t in zip(d["start"], d["end"], d["text"],
                                                       strict=True)]))
    else:  # HowTo100M raw_caption/: one CSV per video
        path = folder / "raw_caption"
        path.mkdir()
        for v, d in data.items():
            pd.DataFrame(d).to_csv(path / f"{v}.csv", index=False)
    return path


def small_dump(n: int = 3, lines: int = 6) -> dict[str, dict[str, list[Any]]]:
    rng = random.Random(1)
    return {f"htm{i}": video_entry(rng, lines) for i in range(n)}
