"""The run's videos (``videos.parquet``) as compact columns, made into ``VideoItem`` s a
window at a time (issue #22): a list of every item was the largest thing align's driver held
that grew with the run (benchmarks/results/align_scale.md). Ids are one sorted Arrow array,
paths a folder code and an Arrow file name, plus each video's row (``// shard_size``: its
shard) and a bool for the align selection.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from howtocap.align import stream
from howtocap.io.inputs import VideoItem

CHUNK = 8_192  # videos made into Python objects at a time (ids, items): a bound on what is
# held at once


def _py(scalar: Any) -> Any:
    """An Arrow scalar as Python, the key ``bisect`` probes the sorted ids by (no list)."""
    return scalar.as_py()


class RunVideos:
    """The run's videos in id order: ``ids`` (Arrow), each one's folder code (``-1``: no
    file known), file name and number (its row of ``videos.parquet``), and ``keep`` (the
    videos align takes, ``select``). ``shard_size``: the run's (``shards`` group by it)."""

    def __init__(self, shard_size: int | None = None) -> None:
        self.folders: list[str] = []
        self._folder_code: dict[str, int] = {}
        self.shard_size = shard_size
        self.ids: Any = pa.array([], pa.string())
        self.names: Any = pa.array([], pa.string())
        self.codes = np.zeros(0, np.int32)
        self.numbers = np.zeros(0, np.int64)
        self.keep = np.ones(0, dtype=bool)

    @classmethod
    def read(cls, path: Path, shard_size: int | None = None) -> RunVideos:
        """``video_id`` and ``video_path`` of ``videos.parquet``, a record batch at a time;
        a video's number is its row."""
        out = cls(shard_size=shard_size)
        if path.exists():
            parts = []
            at = 0
            for rb in stream.open_parquet(path).iter_batches(
                    batch_size=CHUNK, columns=["video_id", "video_path"]):
                parts.append(out._chunk(rb.column(0).to_pylist(), rb.column(1).to_pylist(),
                                        np.arange(at, at + rb.num_rows, dtype=np.int64)))
                at += rb.num_rows
            out._extend(parts)
        out.keep = np.ones(len(out), dtype=bool)
        return out

    def _chunk(self, ids: list[str], paths: list[str | None], numbers: np.ndarray
               ) -> tuple[Any, Any, np.ndarray, np.ndarray]:
        """A chunk's columns: ids, file names, folder codes (a path is ``folder + name``
        exactly, so the ``Path`` made of it is the one made of the whole string), numbers."""
        names: list[str | None] = []
        codes = np.full(len(ids), -1, dtype=np.int32)
        for i, vp in enumerate(paths):
            if not vp:  # None or "": no file known (``VideoItem(vid, None)``)
                names.append(None)
                continue
            cut = vp.rfind("/") + 1
            folder = vp[:cut]
            code = self._folder_code.get(folder)
            if code is None:
                code = self._folder_code[folder] = len(self.folders)
                self.folders.append(folder)
            codes[i] = code
            names.append(vp[cut:])
        return pa.array(ids, pa.string()), pa.array(names, pa.string()), codes, numbers

    def _extend(self, parts: list[tuple[Any, Any, np.ndarray, np.ndarray]]) -> None:
        """Append chunks, then put every column in id order (stable) if it is not."""
        if not parts:
            return
        self.ids = pa.concat_arrays([self.ids, *(p[0] for p in parts)])
        self.names = pa.concat_arrays([self.names, *(p[1] for p in parts)])
        self.codes = np.concatenate([self.codes, *(p[2] for p in parts)])
        self.numbers = np.concatenate([self.numbers, *(p[3] for p in parts)])
        n = len(self.ids)
        if n > 1 and pc.any(pc.less(self.ids.slice(1), self.ids.slice(0, n - 1))).as_py():
            order = pc.sort_indices(self.ids)  # stable: duplicates keep their order
            self.ids, self.names = self.ids.take(order), self.names.take(order)
            idx = order.to_numpy()
            self.codes, self.numbers = self.codes[idx], self.numbers[idx]

    def __len__(self) -> int:
        return len(self.ids)

    def id_list(self, positions: Any = None) -> list[str]:
        """The ids at ``positions`` (every id when None) as Python strings."""
        ids = self.ids if positions is None else \
            self.ids.take(pa.array(np.asarray(positions, dtype=np.int64)))
        return list(ids.to_pylist())

    def items(self, positions: Any) -> list[VideoItem]:
        """The ``VideoItem`` s of the videos at ``positions``: what ``VideoItem(vid,
        Path(path) if path else None)`` gave for each row of the table."""
        pos = pa.array(np.asarray(positions, dtype=np.int64))
        ids = self.ids.take(pos).to_pylist()
        names = self.names.take(pos).to_pylist()
        codes = self.codes[np.asarray(positions, dtype=np.int64)].tolist()
        return [VideoItem(vid, Path(self.folders[c] + name) if c >= 0 else None)
                for vid, name, c in zip(ids, names, codes, strict=True)]

    def positions(self, size: int | None = None, *, kept: bool = True,
                  by_shard: bool = False) -> Iterator[np.ndarray]:
        """The positions of the kept videos (every video unless ``kept``) in id order (with
        ``by_shard``: in run order, ``shards``), ``size`` (``CHUNK``) at a time (the last
        window may hold fewer)."""
        size = size or CHUNK
        if by_shard and self.shard_size:
            groups = [pos for _, pos in self.shards(kept=kept)]
            every = np.concatenate(groups) if groups else np.zeros(0, np.int64)
        else:
            every = np.flatnonzero(self.keep) if kept else np.arange(len(self), dtype=np.int64)
        for lo in range(0, len(every), size):
            yield every[lo:lo + size]

    def shards(self, *, kept: bool = True) -> Iterator[tuple[int, np.ndarray]]:
        """``(shard, positions)`` of the kept videos (every video unless ``kept``) in shard
        order, each shard's in id order: only a shard's rows are in id order once videos were
        appended. Shards unknown (no ``shard_size``): one shard -1."""
        pos = np.flatnonzero(self.keep) if kept else np.arange(len(self), dtype=np.int64)
        if not len(pos):
            return
        nums = self.numbers[pos]
        ks = nums // self.shard_size if self.shard_size else np.full(len(pos), -1, np.int64)
        order = np.argsort(ks, kind="stable")
        ks, pos = ks[order], pos[order]
        cut = np.flatnonzero(ks[1:] != ks[:-1]) + 1
        for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), len(pos)], strict=True):
            yield int(ks[lo]), pos[lo:hi]

    def windows(self, size: int) -> Iterator[list[VideoItem]]:
        """The kept videos as ``VideoItem`` s, ``size`` at a time, in run order (``shards``): a
        window then touches as few of the run's shards as it can."""
        for pos in self.positions(size, by_shard=True):
            yield self.items(pos)

    def select(self, keep: np.ndarray) -> None:
        """Keep only these videos (a bool per video, in id order) for what follows."""
        self.keep = np.asarray(keep, dtype=bool)

    def span(self, lo: str, hi: str) -> Any:
        """The ids (Arrow) from ``lo`` to ``hi``, both included: a slice of the sorted ids."""
        a = bisect.bisect_left(self.ids, lo, key=_py)
        return self.ids.slice(a, bisect.bisect_right(self.ids, hi, lo=a, key=_py) - a)

    def paths_of(self, video_ids: Iterable[str]) -> dict[str, Path | None]:
        """The file of each of a few videos (by binary search)."""
        out: dict[str, Path | None] = {}
        for vid in video_ids:
            i = bisect.bisect_left(self.ids, vid, key=_py)
            if i < len(self.ids) and self.ids[i].as_py() == vid:
                out[vid] = self.items([i])[0].video_path
        return out
