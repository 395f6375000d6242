"""``howtocap duplicates DIR`` -> ``DIR/duplicates.parquet``: a reduce over every video's cached
per-second frame embeddings (steps: docs/duplicates.md). Only keyframe vectors stay in memory;
a pair's per-second rows are read back from the cache when it is checked (a small LRU)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.atomic import atomic_write_parquet
from howtocap.duplicates.config import DuplicatesConfig
from howtocap.duplicates.match import (
    Segment,
    groups,
    kept_rank,
    keyframes,
    match_segments,
    mean_similarity,
    offset_coverage,
    unit_rows,
)
from howtocap.encoders.defaults import ENCODER, FPS
from howtocap.engine.fingerprint import config_id
from howtocap.engine.rundir import RunDir
from howtocap.errors import InputError
from howtocap.knn import INDEX_TYPE, make_faiss
from howtocap.progress import console, progress_bar
from howtocap.schemas import conform

VERSION = 2  # 2: video coverage counts seconds along the matched offsets
QUERY_BATCH = 4096  # keyframes searched per FAISS call
LRU_VIDEOS = 256  # per-second matrices kept while checking pairs


@dataclass
class DuplicatesResult:
    """What ``duplicates_run`` found (printed by the CLI)."""

    path: Path
    n_videos: int
    duplicate_videos: int  # rows of kind video: videos that are not their group's kept id
    groups: int
    clips: int  # rows of kind clip
    candidate_pairs: int
    skipped: dict[str, str] = field(default_factory=dict)  # video_id -> why


def candidate_pairs(keys: Sequence[np.ndarray], cfg: DuplicatesConfig
                    ) -> dict[tuple[int, int], int]:
    """``(i, j) -> hits`` (i < j): keyframes of video i among the k nearest of a keyframe of
    video j (or back), at cosine >= ``cfg.threshold``; a video's own keyframes are skipped."""
    if sum(len(k) for k in keys) < 2:
        return {}
    owner = np.concatenate([np.full(len(k), i, dtype=np.int64) for i, k in enumerate(keys)])
    vectors = np.concatenate(keys).astype(np.float32)
    index, _ = make_faiss(vectors, INDEX_TYPE)
    k = min(cfg.neighbours + 1, len(owner))  # +1: the query itself comes back first
    hits: Counter[tuple[int, int]] = Counter()
    for lo in range(0, len(owner), QUERY_BATCH):
        sims, nbrs = index.search(vectors[lo:lo + QUERY_BATCH], k)
        q_owner = owner[lo:lo + QUERY_BATCH, None]
        ok = (nbrs >= 0) & (sims >= cfg.threshold)
        other = owner[np.where(nbrs >= 0, nbrs, 0)]
        ok &= other != q_owner
        qi, col = np.nonzero(ok)
        a, b = q_owner[qi, 0], other[qi, col]
        hits.update(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), strict=True))
    return dict(hits)


def _span(segs: list[Segment], side: str, fps: float) -> tuple[float, float]:
    lo = min(getattr(s, f"{side}0") for s in segs)
    hi = max(getattr(s, f"{side}1") for s in segs)
    return round(lo / fps, 3), round((hi + 1) / fps, 3)


def find_duplicates(ids: Sequence[str], keys: Sequence[np.ndarray],
                    load: Callable[[int], np.ndarray], durations: Sequence[float],
                    pixels: Callable[[int], int], cfg: DuplicatesConfig, *, fps: float = FPS,
                    progress: bool = False, cands: dict[tuple[int, int], int] | None = None
                    ) -> tuple[pd.DataFrame, int]:
    """The duplicates table (without ``config_id``) and the number of candidate pairs.
    ``pixels(i)`` is asked only of videos in a group or a repeated clip."""
    if cands is None:
        cands = candidate_pairs(keys, cfg)
    rows = lru_cache(maxsize=LRU_VIDEOS)(lambda i: unit_rows(load(i)))
    video_pairs: dict[tuple[int, int], list[Segment]] = {}
    clip_pairs: dict[tuple[int, int], list[Segment]] = {}
    with progress_bar("checking pairs", transient=True, disable=not progress) as prog:
        bar = prog.add_task("pairs", total=len(cands))
        for i, j in sorted(cands):
            ea, eb = rows(i), rows(j)
            segs = match_segments(ea, eb, threshold=cfg.threshold,
                                  min_seconds=cfg.min_seconds, gap=cfg.gap)
            if segs:  # the whole video when its seconds match along the offsets, else clips
                whole = offset_coverage(ea, eb, segs, threshold=cfg.cover_threshold)
                (video_pairs if whole >= cfg.video_cover else clip_pairs)[(i, j)] = segs
            prog.advance(bar)
    size = cache(pixels)

    def rank(i: int) -> tuple[float, int, str]:
        return kept_rank(durations[i], size(i), ids[i])

    out: list[dict[str, Any]] = []
    dropped: set[int] = set()
    for group in groups(len(ids), list(video_pairs)):
        kept = min(group, key=rank)
        for m in group:
            if m == kept:
                continue
            dropped.add(m)
            pair = (min(m, kept), max(m, kept))
            row: dict[str, Any] = {"video_id": ids[m], "duplicate_of": ids[kept],
                                   "kind": "video"}
            if pair in video_pairs:  # matched directly: its windows in both videos
                segs = video_pairs[pair]
                mine, theirs = ("a", "b") if m < kept else ("b", "a")
                (row["start"], row["end"]) = _span(segs, mine, fps)
                (row["dup_start"], row["dup_end"]) = _span(segs, theirs, fps)
                row["similarity"] = mean_similarity(segs)
                row["seconds"] = sum(s.seconds for s in segs)
            else:  # in the group through another copy: its best match there
                best = max(mean_similarity(s) for (a, b), s in video_pairs.items()
                           if m in (a, b) and a in group and b in group)
                row.update(similarity=best, seconds=0, start=np.nan, end=np.nan,
                           dup_start=np.nan, dup_end=np.nan)
            out.append(row)
    for (i, j), segs in sorted(clip_pairs.items()):
        if i in dropped or j in dropped:
            continue  # a dropped video's footage goes with it; its source's pairs remain
        lose, win = (j, i) if rank(i) < rank(j) else (i, j)
        mine, theirs = ("a", "b") if lose == i else ("b", "a")
        for s in segs:
            (start, end), (d0, d1) = _span([s], mine, fps), _span([s], theirs, fps)
            out.append({"video_id": ids[lose], "duplicate_of": ids[win], "kind": "clip",
                        "similarity": s.similarity, "seconds": s.seconds, "start": start,
                        "end": end, "dup_start": d0, "dup_end": d1})
    df = pd.DataFrame(out, columns=["video_id", "duplicate_of", "kind", "similarity", "seconds",
                                    "start", "end", "dup_start", "dup_end"])
    return df.sort_values(["kind", "video_id", "start"], kind="stable",
                          ignore_index=True), len(cands)


def duplicates_run(run_dir: str | Path, cfg: DuplicatesConfig | None = None, *,
                   encoder: str = ENCODER, fps: float = FPS, device: str | None = None,
                   progress: bool = True) -> DuplicatesResult:
    """Find the run's duplicates and write ``DIR/duplicates.parquet`` (whole: a reduce over
    every video); a video without embeddings that does not decode is one line, left out."""
    from howtocap.encoders import create
    from howtocap.encoders.cache import cache_path as frames_path
    from howtocap.encoders.cache import frame_embeddings, load
    from howtocap.encoders.identity import encoder_identity
    from howtocap.io.video import probe

    cfg = cfg or DuplicatesConfig()
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "not a run directory (run `howtocap run` or `howtocap frames` "
                               "first)")
    rd = RunDir(root, create=False)
    videos = rd.table("videos")
    videos = videos[videos["video_path"].fillna("").astype(str) != ""]
    if videos.empty:
        raise InputError(rd.table_path("videos"), "no videos with a video file in this run "
                                                  "(run `howtocap run` or `howtocap frames`)")
    enc = create(encoder, device=device).frame_encoder
    ids: list[str] = []
    keys: list[np.ndarray] = []
    durations: list[float] = []
    files: list[tuple[Path, Path, str]] = []  # the video, its cache file and cache key
    skipped: dict[str, str] = {}
    with progress_bar("frame embeddings", transient=True, disable=not progress) as prog:
        bar = prog.add_task("videos", total=len(videos))
        for vid, path in zip(videos["video_id"].astype(str), videos["video_path"], strict=True):
            try:
                fe = frame_embeddings(Path(path), enc, fps=fps, cache_dir=rd.cache_dir)
            except InputError as exc:
                skipped[vid] = str(exc)
                console.print(f"[yellow]skip[/] {vid}: {exc}", highlight=False)
            else:
                rows = unit_rows(fe.emb)
                ids.append(vid)
                keys.append(rows[keyframes(rows, cfg.keyframe_same)].astype(np.float16))
                durations.append(fe.duration)
                files.append((Path(path), frames_path(rd.cache_dir, enc.name, fe.key, fps),
                              fe.key))
            prog.advance(bar)
    if not ids:
        raise InputError(root, "no video has frame embeddings or decodes: nothing to compare")

    def load_rows(i: int) -> np.ndarray:
        video, cached, key = files[i]
        fe = load(cached, encoder=enc.name, key=key, fps=fps)
        if fe is None:  # removed or corrupt since it was read: through the cache again
            fe = frame_embeddings(video, enc, fps=fps, cache_dir=rd.cache_dir)
        return fe.emb

    def pixels(i: int) -> int:
        try:
            info = probe(files[i][0])
        except InputError:
            return 0
        return info.width * info.height

    df, n_cands = find_duplicates(ids, keys, load_rows,
                                  durations, pixels, cfg, fps=fps, progress=progress)
    df["config_id"] = config_id({"stage": "duplicates", "version": VERSION,
                                 "encoder": encoder_identity(encoder), "fps": fps,
                                 **cfg.model_dump()})
    out = rd.table_path("duplicates")
    atomic_write_parquet(conform(df, "duplicates"), out)
    rd.configs.write("duplicates", {"encoder": encoder, "fps": fps, **cfg.model_dump()})
    n_video = int((df["kind"] == "video").sum())
    return DuplicatesResult(out, len(ids), n_video,
                            int(df.loc[df["kind"] == "video", "duplicate_of"].nunique()),
                            int((df["kind"] == "clip").sum()), n_cands, skipped)
