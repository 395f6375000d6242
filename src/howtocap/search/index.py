"""Build ``DIR/index/``: FAISS indexes over the kept clips and what each vector is (layout in
docs/search.md; row ``i`` of ``clips.parquet`` is vector ``i`` of both indexes). Embeddings are
kept per video in ``parts/``, so only new videos are embedded; the indexes are always rebuilt
from the parts: that is cheap, removed videos drop out and nothing is ever half-updated."""

from __future__ import annotations

import io
import json
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from howtocap.atomic import atomic_write_bytes, atomic_write_parquet, atomic_write_text
from howtocap.encoders.defaults import ENCODER
from howtocap.engine.fingerprint import config_id, describe_change
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text, safe_name
from howtocap.knn import INDEX_TYPE, make_faiss
from howtocap.progress import progress_bar
from howtocap.schemas import kept_captions

if TYPE_CHECKING:
    from howtocap.encoders.base import Encoder

INDEX_VERSION = 1
CLIP_COLUMNS = ["video_id", "start", "end", "text", "orig_start", "orig_end", "score"]


@dataclass
class IndexInfo:
    """What ``build_index`` did (printed by the CLI)."""

    path: Path
    encoder: str
    dim: int
    n: int
    index_type: str
    source: str  # "aligned" | "captions"
    embedded: list[str] = field(default_factory=list)  # videos (re)embedded in this run
    reused: list[str] = field(default_factory=list)  # videos whose parts were still valid
    removed: list[str] = field(default_factory=list)  # videos no longer in the run
    no_video: list[str] = field(default_factory=list)  # videos without a readable video file
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def index_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "index"  # (``RunDir`` leaves it to this module)


def load_clips(rd: RunDir) -> tuple[pd.DataFrame, str]:
    """The clips to index: kept rows of ``aligned``, else every caption (no alignment was run)."""
    if rd.has_table("aligned"):
        df = rd.table("aligned")
        df = df[df["kept"].astype(bool)]
        source = "aligned"
    elif rd.has_table("captions"):
        df = kept_captions(rd.table("captions"))
        df = df.assign(orig_start=df["start"], orig_end=df["end"], score=np.nan)
        source = "captions"
    else:
        raise InputError(rd.root, "nothing to index: no aligned/ or captions/ table "
                                  "(run `howtocap caption` and `howtocap align` first)")
    df = df[CLIP_COLUMNS].astype({c: "float64" for c in CLIP_COLUMNS[1:] if c != "text"})
    df = df.assign(video_id=df["video_id"].astype(str), text=df["text"].fillna("").astype(str))
    df = df[df["text"].str.strip() != ""]
    df = df.sort_values(["video_id", "start", "end", "text"], kind="stable")
    return df.reset_index(drop=True), source


def _video_key(encoder: Encoder, fps: float, rows: pd.DataFrame, video_path: Path | None) -> str:
    """Changes whenever anything that went into a video's vectors changes (a pooling other than
    the mean is named, so mean-pooled parts keep their old keys)."""
    stat = ""
    if video_path is not None and video_path.is_file():
        st = video_path.stat()
        stat = f"{video_path}|{st.st_size}|{st.st_mtime_ns}"
    name = encoder.name if encoder.pooling == "mean" else f"{encoder.name}|{encoder.pooling}"
    payload = json.dumps([INDEX_VERSION, name, fps, stat,
                          rows[["start", "end", "text"]].values.tolist()])
    return format(hash_text(payload), "016x")


def frame_matrix(video_path: Path, encoder: Encoder, *, fps: float,
                 cache_dir: Path) -> np.ndarray:
    """``(n_seconds, dim)`` float32 rows of ``encoder.frame_encoder`` from the run's frame cache
    (shared with ``align``, so an aligned run decodes nothing here)."""
    from howtocap.encoders.cache import frame_embeddings

    fe = frame_embeddings(video_path, encoder.frame_encoder, fps=fps, cache_dir=cache_dir)
    return np.asarray(fe.emb, dtype=np.float32)


def clip_vectors(encoder: Encoder, frames: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 fps: float) -> np.ndarray:
    """Unit clip vectors pooled by the encoder from the frame rows in ``[start, end)``, as
    ``align`` and eval pool them (a clip shorter than a frame interval: its middle frame)."""
    from howtocap.encoders.windows import rows_covering

    if len(frames) == 0:
        return np.zeros((len(starts), encoder.dim), np.float32)
    lo, hi = rows_covering(starts, ends, len(frames), fps)
    return encoder.pool_clips(frames, lo, hi, renormalize=True).astype(np.float32)


def _write_part(path: Path, key: str, part: dict[str, Any]) -> None:
    buf = io.BytesIO()
    np.savez(buf, key=np.array(key), text=part["text"].astype(np.float32),
             video=part["video"].astype(np.float32), has_video=np.array(part["has_video"]))
    atomic_write_bytes(path, buf.getvalue())


def _read_part(path: Path) -> dict[str, Any] | None:
    try:
        with np.load(path) as z:
            return {"key": str(z["key"]), "text": z["text"], "video": z["video"],
                    "has_video": bool(z["has_video"])}
    except (OSError, ValueError, KeyError):
        return None  # torn or foreign file: re-embed


def write_index_files(out: Path, clips: pd.DataFrame, text: np.ndarray, video: np.ndarray,
                      meta: dict[str, Any], index_type: str = INDEX_TYPE) -> str:
    """Write the two FAISS indexes, ``clips.parquet`` and ``meta.json`` (meta last: it commits)."""
    import faiss

    out.mkdir(parents=True, exist_ok=True)
    kind = index_type
    for name, vectors in (("text", text), ("video", video)):  # video: of the text index's kind
        index, kind = make_faiss(vectors, kind)
        atomic_write_bytes(out / f"{name}.faiss", faiss.serialize_index(index).tobytes())
        del index
    atomic_write_parquet(clips.reset_index(drop=True), out / "clips.parquet")
    meta = {**meta, "n": int(len(clips)), "dim": int(text.shape[1]), "index_type": kind,
            "version": INDEX_VERSION, "built_at": time.time()}
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))
    return kind


def read_meta(run_dir: str | Path) -> dict[str, Any] | None:
    path = index_dir(run_dir) / "meta.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise InputError(path, "not valid JSON: rebuild with `howtocap index DIR --rebuild`") \
            from None


def mismatch_message(run_dir: str | Path, built_with: str, now: str) -> str:
    return (f"index in {run_dir} was built with encoder {built_with!r}; this run uses {now!r}: "
            f"rebuild with `howtocap index {run_dir} --rebuild` (or pass --encoder "
            f"{built_with!r})")


def index_fingerprint(encoder: Encoder, spec: str | None, fps: float) -> dict[str, Any]:
    """What the vectors depend on: the encoder (by weights when built from a name), the frame
    rate and the index format; a re-run with another one is refused, as for the stages."""
    from howtocap.encoders.identity import encoder_identity

    enc = {**(encoder_identity(spec) if spec else {}), "name": encoder.name}
    return {"encoder": enc, "fps": fps, "version": INDEX_VERSION}


def build_index(run_dir: str | Path, encoder_name: str = ENCODER, *,
                encoder: Encoder | None = None, device: str | None = None,
                rebuild: bool = False, index_type: str = INDEX_TYPE, fps: float = 1.0,
                progress: bool = True) -> IndexInfo:
    """Index the kept clips of a run, re-embedding only videos whose clips or file changed.
    ``encoder`` (created already) wins over ``encoder_name``; an index of another encoder is
    refused unless ``rebuild``: two encoders' vectors live in different spaces."""
    t0 = time.time()
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "run directory does not exist")
    rd = RunDir(root, create=False)
    clips, source = load_clips(rd)
    if source == "captions":
        warnings.warn(f"{root}: no aligned/ table, indexing the unaligned LLM captions "
                      "(run `howtocap align` for video-aligned times)", stacklevel=2)
    spec = encoder_name if encoder is None else encoder.name  # how `search` re-creates it
    if encoder is None:
        from howtocap.encoders import create

        encoder = create(encoder_name, device=device)
    out = index_dir(root)
    parts_dir = out / "parts"
    old = read_meta(root)
    fingerprint = index_fingerprint(encoder, spec if encoder_name == spec else None, fps)
    if old is not None and not rebuild:
        if old.get("encoder") != encoder.name:
            raise HowtocapError(mismatch_message(root, old.get("encoder", "?"), encoder.name))
        if old.get("fingerprint") and old["fingerprint"] != fingerprint:
            raise HowtocapError(
                f"index in {root} was built with other settings "
                f"({describe_change(old['fingerprint'], fingerprint)}): add --rebuild to "
                f"re-embed every video, or index with the old settings")
    if rebuild and parts_dir.exists():
        shutil.rmtree(parts_dir)

    paths = {str(r.video_id): Path(r.video_path) if r.video_path else None
             for r in rd.table("videos").itertuples()}
    groups = {vid: g for vid, g in clips.groupby("video_id", sort=True)}
    info = IndexInfo(out, encoder.name, int(encoder.dim), len(clips), "", source)
    parts: list[dict[str, Any]] = []
    keys: dict[str, str] = {}

    with progress_bar("{task.description}", disable=not progress, transient=True) as bar:
        task = bar.add_task("indexing videos", total=len(groups))
        for vid, rows in groups.items():
            vpath = paths.get(vid)
            keys[vid] = key = _video_key(encoder, fps, rows, vpath)
            part_path = parts_dir / f"{safe_name(vid)}.npz"
            part = _read_part(part_path) if part_path.exists() else None
            if part is not None and part["key"] == key and len(part["text"]) == len(rows):
                info.reused.append(vid)
            else:
                part = _embed_video(rows, vpath, encoder, fps, rd.cache_dir)
                _write_part(part_path, key, part)
                info.embedded.append(vid)
            if not part["has_video"]:
                info.no_video.append(vid)
            parts.append(part)
            bar.advance(task)

    wanted = {f"{safe_name(v)}.npz" for v in groups}
    for p in parts_dir.glob("*.npz"):
        if p.name not in wanted:
            p.unlink()
    info.removed = sorted(set((old or {}).get("videos", {})) - set(groups))

    text_m, video_m = (np.concatenate([p[m] for p in parts]) if parts
                       else np.zeros((0, int(encoder.dim)), np.float32) for m in ("text", "video"))
    clips = clips.assign(has_video=np.concatenate([np.full(len(p["text"]), p["has_video"])
                                                   for p in parts]) if parts else np.zeros(0, bool))
    meta = {"encoder": encoder.name, "encoder_spec": spec, "source": source,
            "fps": fps, "videos": keys, "fingerprint": fingerprint,
            "config_id": config_id(fingerprint)}
    info.index_type = write_index_files(out, clips, text_m, video_m, meta, index_type)
    info.seconds = round(time.time() - t0, 3)
    return info


def _embed_video(rows: pd.DataFrame, video_path: Path | None, encoder: Encoder, fps: float,
                 cache_dir: Path) -> dict[str, Any]:
    text = encoder.encode_texts(rows["text"].tolist()).astype(np.float32)
    video = np.zeros_like(text)
    ok = False
    if video_path is not None and video_path.is_file():
        try:
            frames = frame_matrix(video_path, encoder, fps=fps, cache_dir=cache_dir)
        except HowtocapError as exc:
            warnings.warn(f"{video_path}: no video embeddings ({exc})", stacklevel=2)
        else:
            if len(frames):
                video = clip_vectors(encoder, frames, rows["start"].to_numpy(),
                                     rows["end"].to_numpy(), fps)
                ok = True
    return {"text": text, "video": video, "has_video": ok}
