"""Stable hashes and file-safe names: the same in every process and on every host (Python's
``hash`` is salted per process). Bottom layer: imports nothing of the package."""

from __future__ import annotations

import hashlib
import re


def safe_name(video_id: str) -> str:
    """A file name for a video id that cannot escape its folder and stays unique."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", video_id)[:120]
    if clean != video_id:
        clean += "-" + format(abs(hash_text(video_id)) % 16**8, "08x")
    return clean


def hash_text(text: str) -> int:
    """A stable (process-independent) 64-bit hash."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")

