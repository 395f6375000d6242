"""Stable hashes and file-safe names: the same in every process and on every host (Python's
``hash`` is salted per process). Bottom layer: imports nothing of the package."""

from __future__ import annotations

import hashlib
import re
import sys

import numpy as np


def safe_name(video_id: str) -> str:
    """A file name for a video id that cannot escape its folder and stays unique."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", video_id)[:120]
    if clean != video_id:
        clean += "-" + format(abs(hash_text(video_id)) % 16**8, "08x")
    return clean


def hash_text(text: str) -> int:
    """A stable (process-independent) 64-bit hash."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def sort_by_hash(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort 32-bit hashes held in the low halves of ``key`` (uint64, filled by the caller)
    and say where each came from: each hash goes above its item number and ``key`` is sorted
    in place, so equal hashes stay in item order. Returns views of its halves (the sorted
    hashes, each one's item number): 8 bytes an item, where a hash array, its argsort and
    the sorted copy take 16 (a million-video index or merge sorts millions)."""
    if len(key) > 2**32:  # an item's number is the key's low half
        raise ValueError(f"{len(key):,} items: more than 2**32 to sort by hash")
    key <<= np.uint64(32)
    step = 1 << 20  # item numbers added a million at a time: no arange of them all
    for lo in range(0, len(key), step):
        key[lo:lo + step] |= np.arange(lo, min(lo + step, len(key)), dtype=np.uint64)
    key.sort()
    halves = key.view(np.uint32)
    return (halves[1::2], halves[0::2]) if sys.byteorder == "little" else \
        (halves[0::2], halves[1::2])
