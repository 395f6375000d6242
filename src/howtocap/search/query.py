"""Answer text queries against ``DIR/index/``: ``by="text"`` compares with the caption
embeddings, ``"video"`` with the clips' pooled frame embeddings, ``"both"`` ranks the union of
each index's top candidates by the mean of the two cosines (0 for a clip without video): both
are cosines in one joint space, so unlike reciprocal-rank fusion the mean keeps a score to show.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd
from pydantic import BaseModel

from howtocap.errors import HowtocapError, InputError
from howtocap.knn import HNSW_EF_SEARCH
from howtocap.search import BY, BY_CHOICES, K
from howtocap.search.index import INDEX_VERSION, index_dir, mismatch_message, read_meta

if TYPE_CHECKING:
    import faiss

    from howtocap.encoders.base import Encoder

class Ranked(NamedTuple):
    """One query's hits as arrays: index rows, scores, and the text / video halves."""

    ids: np.ndarray
    scores: np.ndarray
    text: np.ndarray | None = None
    video: np.ndarray | None = None


class Hit(BaseModel):
    """One clip: aligned ``start``/``end``; ``orig_*`` are the LLM caption's unaligned times.
    (A pydantic model, so the web API's response schema extends it instead of repeating it.)"""

    video_id: str
    start: float
    end: float
    text: str
    score: float
    orig_start: float | None = None
    orig_end: float | None = None
    text_score: float | None = None
    video_score: float | None = None
    row: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {k: None if isinstance(v, float) and not np.isfinite(v) else v  # NaN: not JSON
                for k, v in self.model_dump().items()}


def _read_faiss(path: Path) -> faiss.Index:
    import faiss

    try:
        index = faiss.read_index(str(path))
    except RuntimeError as exc:
        raise InputError(path, f"unreadable FAISS index ({str(exc).splitlines()[0][:200]}): "
                               "rebuild with `howtocap index DIR --rebuild`") from None
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = max(index.hnsw.efSearch, HNSW_EF_SEARCH)
    return index


class Searcher:
    """An opened index plus the encoder that embeds queries (thread-safe for searching)."""

    def __init__(self, root: Path, meta: dict[str, Any], clips: pd.DataFrame,
                 text_index: faiss.Index, video_index: faiss.Index, encoder: Encoder,
                 cache_size: int = 4096) -> None:
        self.root = root
        self.meta = meta
        self.clips = clips.reset_index(drop=True)
        self.text_index = text_index
        self.video_index = video_index
        self.encoder = encoder
        self._has_video = clips["has_video"].to_numpy(bool) if "has_video" in clips else \
            np.ones(len(clips), bool)
        # row i = vector i, as arrays: a server builds its records from these
        self.columns = {c: self.clips[c].to_numpy() for c in
                        ("video_id", "start", "end", "text", "orig_start", "orig_end")}
        # the query's embedding ``(1, dim)``; repeated queries come from a small LRU cache (of a
        # function of the encoder, not a bound method: no cycle keeping the searcher alive)
        self.embed = functools.lru_cache(maxsize=cache_size)(functools.partial(_encode, encoder))

    @classmethod
    def open(cls, run_dir: str | Path, encoder: str | Encoder | None = None, *,
             device: str | None = None) -> Searcher:
        """Open ``DIR/index``; ``encoder`` defaults to the one the index was built with (another
        one is refused: its vectors live in another space)."""
        root = Path(run_dir)
        meta = read_meta(root)
        if meta is None:
            raise InputError(root, "has no index: run `howtocap index DIR` first")
        out = index_dir(root)
        if meta.get("version") != INDEX_VERSION or "encoder" not in meta:
            raise InputError(out, f"index format {meta.get('version')!r} is not the current "
                                  f"{INDEX_VERSION}: rebuild with `howtocap index {root} "
                                  "--rebuild`")
        enc = encoder
        if enc is None or isinstance(enc, str):
            from howtocap.encoders import create

            enc = create(encoder or meta.get("encoder_spec") or meta["encoder"], device=device)
        if enc.name != meta["encoder"]:
            raise HowtocapError(mismatch_message(root, meta["encoder"], enc.name))
        try:
            clips = pd.read_parquet(out / "clips.parquet")
        except (OSError, ValueError) as exc:
            raise InputError(out / "clips.parquet", f"unreadable ({exc}): rebuild the index") \
                from None
        text_index = _read_faiss(out / "text.faiss")
        video_index = _read_faiss(out / "video.faiss")
        if not (text_index.ntotal == video_index.ntotal == len(clips)):
            raise InputError(out, "index files disagree in size (an interrupted build?): "
                                  "rebuild with `howtocap index DIR --rebuild`")
        return cls(root, meta, clips, text_index, video_index, enc)

    def __len__(self) -> int:
        return len(self.clips)

    def search(self, query: str, k: int = K, by: str = BY) -> list[Hit]:
        return self._hits(*self.search_rows(query, k=k, by=by))

    def search_rows(self, query: str, k: int = K, by: str = BY) -> Ranked:
        """Like ``search`` but only row numbers and scores: a server that builds its own
        records skips one pydantic object per hit."""
        query = query.strip()
        if not query:
            raise HowtocapError("empty query")
        return self.rank(self.embed(query), k=k, by=by)

    def rank(self, qvec: np.ndarray, k: int = K, by: str = BY) -> Ranked:
        if by not in BY_CHOICES:
            raise HowtocapError(f"by must be one of {', '.join(BY_CHOICES)}, not {by!r}")
        if k < 1:
            raise HowtocapError("k must be at least 1")
        n = len(self.clips)
        if n == 0:
            return Ranked(np.empty(0, np.int64), np.empty(0, np.float32))
        q = np.ascontiguousarray(qvec.reshape(1, -1), dtype=np.float32)
        k = min(k, n)
        if by == "text":
            scores, ids = self.text_index.search(q, k)
            ok = ids[0] >= 0  # HNSW may return fewer than k
            return Ranked(ids[0][ok], scores[0][ok], text=scores[0][ok])
        if by == "video":
            # ask for extra rows: clips whose video could not be read carry zero vectors
            extra = int((~self._has_video).sum())
            scores, ids = self.video_index.search(q, min(n, k + extra))
            ok = (ids[0] >= 0) & self._has_video[np.maximum(ids[0], 0)]
            ids_, scores_ = ids[0][ok][:k], scores[0][ok][:k]
            return Ranked(ids_.astype(np.int64), scores_, video=scores_)
        pool = min(n, max(4 * k, 50))
        _, t_ids = self.text_index.search(q, pool)
        _, v_ids = self.video_index.search(q, pool)
        cand = np.unique(np.concatenate([t_ids[0], v_ids[0]]))
        cand = cand[cand >= 0].astype(np.int64)
        t_s = self.text_index.reconstruct_batch(cand) @ q[0]
        v_s = self.video_index.reconstruct_batch(cand) @ q[0]
        v_s = np.where(self._has_video[cand], v_s, 0.0)
        both = (t_s + v_s) / 2
        order = np.argsort(-both, kind="stable")[:k]
        return Ranked(cand[order], both[order], text=t_s[order], video=v_s[order])

    def _hits(self, ids: np.ndarray, scores: np.ndarray, text: np.ndarray | None = None,
              video: np.ndarray | None = None) -> list[Hit]:
        c = self.columns
        return [Hit(video_id=str(c["video_id"][i]), start=float(c["start"][i]),
                    end=float(c["end"][i]), text=str(c["text"][i]), score=round(float(s), 6),
                    orig_start=float(c["orig_start"][i]), orig_end=float(c["orig_end"][i]),
                    text_score=None if text is None else round(float(text[j]), 6),
                    video_score=None if video is None else round(float(video[j]), 6),
                    row=int(i))
                for j, (i, s) in enumerate(zip(ids, scores, strict=True)) if i >= 0]


def format_hits(hits: list[Hit], as_json: bool = False) -> str:
    """The CLI's output: one line per hit, or a JSON list."""
    if as_json:
        return json.dumps([h.to_dict() for h in hits], indent=2)
    if not hits:
        return "no results"
    return "\n".join(f"{r:>3}. {h.score:6.3f}  {h.video_id}  {_ts(h.start)}-{_ts(h.end)}  "
                     f"{h.text}" for r, h in enumerate(hits, 1))


def _ts(t: float) -> str:
    m, s = divmod(max(0.0, t), 60)
    return f"{int(m):d}:{s:05.2f}"


def _encode(encoder: Encoder, query: str) -> np.ndarray:
    return np.ascontiguousarray(encoder.encode_texts([query]), dtype=np.float32)
