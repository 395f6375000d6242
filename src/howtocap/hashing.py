"""Stable hashes and file-safe names: the same in every process and on every host (Python's
``hash`` is salted per process). Bottom layer: imports nothing of the package."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

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


SAME_HASH_ROWS = 1 << 19  # items ``SameHashes`` holds before it writes them out by part
SAME_HASH_PARTS = 64  # parts (by the hash's top bits) items written out go to, each sorted alone


class SameHashes:
    """Which of many items (numbered in the order they are added) share their 32-bit hash
    with another: a merge tells a million videos' records apart this way, checking only
    those items' ids. Past ``SAME_HASH_ROWS`` items (and with a ``spill`` folder) the items
    go to ``SAME_HASH_PARTS`` files by their hash's top bits, in a folder of their own under
    ``spill`` (removed by ``close``), each sorted alone at the end: 8 bytes an item of a
    part in memory, not of them all (the whole sort grew ~20 MB a million records)."""

    def __init__(self, spill: Path | None = None, rows: int | None = None) -> None:
        self.spill, self.rows = spill, rows or SAME_HASH_ROWS
        self.items = 0
        self._held: list[np.ndarray] = []
        self._held_rows = 0
        self._folder: Path | None = None  # the part files' (None: every item is held)

    def add(self, hashes: np.ndarray) -> None:
        """The 32-bit hashes of the next items."""
        if self.items + len(hashes) > 2**32:  # an item's number is the key's low half
            raise ValueError("more than 2**32 items to tell apart by hash")
        key = hashes.astype(np.uint64) << np.uint64(32)
        key |= np.arange(self.items, self.items + len(hashes), dtype=np.uint64)
        self._held.append(key)
        self.items += len(key)
        self._held_rows += len(key)
        if self._held_rows >= self.rows and self.spill is not None:
            self._write()

    def _write(self) -> None:
        key = np.concatenate(self._held) if self._held else np.zeros(0, np.uint64)
        self._held, self._held_rows = [], 0
        if self._folder is None:
            import tempfile

            self.spill.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
            self._folder = Path(tempfile.mkdtemp(prefix="same-hashes-", dir=self.spill))
        key.sort()  # by hash: a part (the hash's top bits) is one slice
        part = key >> np.uint64(64 - (SAME_HASH_PARTS.bit_length() - 1))
        cut = np.searchsorted(part, np.arange(SAME_HASH_PARTS + 1, dtype=np.uint64))
        for p in range(SAME_HASH_PARTS):
            if cut[p + 1] > cut[p]:
                with open(self._part_path(p), "ab") as f:  # not tofile: it loses ENOSPC
                    f.write(key[cut[p]:cut[p + 1]].data)

    def _part_path(self, p: int) -> Path:
        return self._folder / f"part-{p:03d}.u64"  # type: ignore[operator]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(hash, item) of every item whose hash another item has, by hash, then item."""
        if self._folder is None:
            keys = [np.concatenate(self._held)] if self._held else []
            self._held = []
        else:
            if self._held:
                self._write()
            keys = (np.fromfile(self._part_path(p), dtype=np.uint64)
                    if self._part_path(p).exists() else np.zeros(0, np.uint64)
                    for p in range(SAME_HASH_PARTS))
        hs, items = [np.zeros(0, np.uint32)], [np.zeros(0, np.int64)]
        for key in keys:
            key.sort()
            h = key >> np.uint64(32)
            same = np.flatnonzero(h[1:] == h[:-1])
            if len(same):
                pos = np.unique(np.concatenate([same, same + 1]))
                hs.append(h[pos].astype(np.uint32))
                items.append((key[pos] & np.uint64(0xFFFFFFFF)).astype(np.int64))
            del key, h
        return np.concatenate(hs), np.concatenate(items)

    def close(self) -> None:
        """Remove the part files, if any were written."""
        if self._folder is not None:
            import shutil

            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
