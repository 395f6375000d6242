"""The maths of the duplicates step (pure numpy): which seconds of two videos show the same
footage, in temporal order. Why not one vector per video: a trimmed copy, or a video repeating
a minute of another, has a mean vector unlike the other's, but its seconds match the other's at
one constant offset; a run of matching seconds along one offset (a diagonal of the similarity
matrix) is one piece of shared footage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """Rows ``a0..a1`` of A show what rows ``b0..b1`` of B show (inclusive); ``seconds`` rows
    matched, at mean cosine ``similarity``."""

    a0: int
    a1: int
    b0: int
    b1: int
    seconds: int
    similarity: float

    @property
    def a_len(self) -> int:
        return self.a1 - self.a0 + 1

    @property
    def b_len(self) -> int:
        return self.b1 - self.b0 + 1


def unit_rows(emb: np.ndarray) -> np.ndarray:
    """Float32 rows of unit length (the cache stores them unit before rounding to float16)."""
    x = np.asarray(emb, dtype=np.float32)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def keyframes(emb: np.ndarray, same: float) -> np.ndarray:
    """Indices of the rows that start a new scene: a row is kept when its cosine with the last
    kept row is below ``same``. A static stretch becomes one vector, so a video's own seconds do
    not fill every k-NN slot of its queries (and the index is smaller)."""
    if len(emb) == 0:
        return np.zeros(0, dtype=np.int64)
    keep, last = [0], emb[0]
    for i in range(1, len(emb)):
        if float(emb[i] @ last) < same:
            keep.append(i)
            last = emb[i]
    return np.asarray(keep, dtype=np.int64)


def _band(sim: np.ndarray) -> np.ndarray:
    """Each cell the best of its row's cells one column either side: at 1 fps two copies sample
    the same content up to half a second apart, so the matching second may be a neighbour."""
    out = sim.copy()
    if sim.shape[1] > 1:
        np.maximum(out[:, 1:], sim[:, :-1], out=out[:, 1:])
        np.maximum(out[:, :-1], sim[:, 1:], out=out[:, :-1])
    return out


def _best_shift(raw: np.ndarray, a0: int, a1: int, off: int) -> int:
    """The offset among ``off - 1 .. off + 1`` whose own cells (not the band's) match rows
    ``a0..a1`` best: the band finds a run, this puts its window in B on the right second."""
    rows = np.arange(a0, a1 + 1)
    best, best_mean = off, -np.inf
    for shift in (off, off - 1, off + 1):
        cols = rows + shift
        if cols[0] < 0 or cols[-1] >= raw.shape[1]:
            continue  # the window would leave B
        mean = float(raw[rows, cols].mean())
        if mean > best_mean + 1e-6:
            best, best_mean = shift, mean
    return best


def match_segments(ea: np.ndarray, eb: np.ndarray, *, threshold: float, min_seconds: int,
                   gap: int = 1) -> list[Segment]:
    """Non-overlapping pieces of shared footage of two videos (unit rows ``ea``, ``eb``).

    For every offset (B row minus A row) the seconds whose cosine is at least ``threshold``
    (or whose neighbour one second either side is: ``_band``) form runs (``gap`` unmatched
    seconds may interrupt a run: a keyframe flash, a transition); each run is put on its best
    offset (``_best_shift``) and counts the seconds that match there; runs of at least
    ``min_seconds`` of them are kept, longest first, skipping any that overlaps a kept one in
    A or in B (a static shot matches along several offsets)."""
    na, nb = len(ea), len(eb)
    if na == 0 or nb == 0:
        return []
    raw = ea @ eb.T
    sim = _band(raw)
    runs: list[Segment] = []
    for off in range(-(na - 1), nb):
        diag = np.diagonal(sim, offset=off)
        hit = np.flatnonzero(diag >= threshold)
        if len(hit) < min_seconds:
            continue
        i0 = max(0, -off)  # A row of the diagonal's first cell
        cuts = np.flatnonzero(np.diff(hit) > gap + 1) + 1
        for group in np.split(hit, cuts):
            if len(group) < min_seconds:
                continue
            a0, a1 = i0 + int(group[0]), i0 + int(group[-1])
            shift = _best_shift(raw, a0, a1, off)
            # counted on that offset's own cells: the band lengthens a run by a second at
            # each end (a shared 2-s shot would look like 4 matched seconds)
            rows = np.arange(a0, a1 + 1)
            own = raw[rows, rows + shift]
            good = np.flatnonzero(own >= threshold)
            if len(good) < min_seconds:
                continue
            a0, a1 = int(rows[good[0]]), int(rows[good[-1]])
            runs.append(Segment(a0, a1, a0 + shift, a1 + shift, len(good),
                                float(own[good].mean())))
    runs.sort(key=lambda s: (-s.seconds, -s.similarity, s.a0, s.b0))
    kept: list[Segment] = []
    for s in runs:
        if any((s.a0 <= k.a1 and k.a0 <= s.a1) or (s.b0 <= k.b1 and k.b0 <= s.b1)
               for k in kept):
            continue
        kept.append(s)
    return sorted(kept, key=lambda s: s.a0)


def offset_coverage(ea: np.ndarray, eb: np.ndarray, segments: list[Segment], *,
                    threshold: float) -> float:
    """The share of the shorter video's seconds that match the other's at the offset of one
    of ``segments`` (or a second either side: ``_band``) at cosine >= ``threshold``.

    Why not the segments' spans: a re-encoded, scaled copy keeps its offset but loses seconds
    here and there (a cosine that dips for a few seconds breaks a run into pieces too short to
    count), so every second along the matched offsets is counted, at a lower cosine than a
    segment needs. Why only along those offsets, not each second's best match anywhere: a
    still photo, a black frame or an intro the two videos share matches at many offsets, but
    along one offset it covers only its own length; and two distinct videos that show the
    same things in another order do not line up."""
    if not segments or len(ea) == 0 or len(eb) == 0:
        return 0.0
    offsets = {s.b0 - s.a0 for s in segments}
    if len(ea) > len(eb):  # rows of the shorter video
        ea, eb, offsets = eb, ea, {-o for o in offsets}
    sim = _band(ea @ eb.T)
    hit = np.zeros(len(ea), dtype=bool)
    for off in offsets:
        rows = np.arange(max(0, -off), min(len(ea), len(eb) - off))
        hit[rows] |= sim[rows, rows + off] >= threshold
    return float(hit.mean())


def mean_similarity(segments: list[Segment]) -> float:
    """Mean cosine over every matched second of the segments."""
    n = sum(s.seconds for s in segments)
    return float(sum(s.similarity * s.seconds for s in segments) / n) if n else 0.0


def groups(n: int, pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Connected components of ``pairs`` over ``0..n-1`` by smallest member, singletons left
    out: a re-upload of a re-upload is in its original's group."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    ends = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    graph = coo_array((np.ones(len(ends)), (ends[:, 0], ends[:, 1])), shape=(n, n))
    comps: dict[int, list[int]] = {}
    for i, label in enumerate(connected_components(graph, directed=False)[1].tolist()):
        comps.setdefault(label, []).append(i)
    return [c for c in comps.values() if len(c) > 1]


def kept_rank(duration: float, pixels: int, video_id: str) -> tuple[float, int, str]:
    """The kept-id rule as a sort key (smallest is kept): the longest video (a trimmed copy
    loses to its source), then the most pixels (a downscaled or cropped copy loses), then the
    smallest video id (re-encodes at the same size: a stable, documented choice). Durations
    count to the second (the embeddings' resolution), so a re-encode a frame longer ties."""
    return (-round(duration), -int(pixels), video_id)
