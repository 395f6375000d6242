"""Readers for the standard text-video retrieval test sets, in their published file formats:
one :class:`EvalSample` per (caption, clip) pair. Videos are found under ``video_root`` by file
stem at any depth, so the usual download layouts (``all/video7579.mp4``,
``validation/113/<id>.mkv``, ``<movie>/<clip>.avi``) all work; a clip whose file is missing
keeps ``video_path=None`` and is reported as skipped by the evaluation.
"""

from __future__ import annotations

import contextlib
import csv
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from howtocap.dvc.data import youcook2_steps
from howtocap.errors import HowtocapError, InputError
from howtocap.evaluate import YOUCOOK2_SUBSET
from howtocap.io import inputs
from howtocap.io.inputs import VIDEO_EXTS, listed_path

KINDS = ("msrvtt", "youcook2", "msvd", "lsmdc", "csv")


@dataclass(frozen=True)
class EvalSample:
    """One caption and the clip it describes; ``start``/``end`` ``None`` = the whole video."""

    video_id: str
    video_path: Path | None
    caption: str
    start: float | None = None
    end: float | None = None

    @property
    def clip_key(self) -> tuple[str, float | None, float | None]:
        """Samples with equal keys describe the same clip (several captions per video)."""
        return (self.video_id, self.start, self.end)


def index_videos(video_root: Path | None) -> dict[str, Path]:
    """Map file stem -> path for every video file under ``video_root`` (first one wins)."""
    if video_root is None:
        return {}
    root = Path(video_root)
    if not root.is_dir():
        raise InputError(root, "video folder does not exist")
    return {p.stem: p for p in sorted(root.rglob("*"), reverse=True)  # the first one wins
            if p.suffix.lower() in VIDEO_EXTS and p.is_file()}


def read_text(path: Path) -> str:
    """A release file's text (BOM tolerated) or one line naming the file."""
    if not path.is_file():
        raise InputError(path, "annotation file does not exist")
    return inputs.read_text(path)


def _csv_rows(path: Path, required: tuple[str, ...], delimiter: str = ",") -> list[dict]:
    """Rows of a headed CSV; a missing required column is an ``InputError`` naming it."""
    text = read_text(path)
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in required if c not in cols]
    if missing:
        raise InputError(path, f"missing column {', '.join(missing)} "
                               f"(found: {', '.join(c for c in cols if c) or 'nothing'})")
    rows = [{(k or "").strip(): (v or "").strip() if isinstance(v, str) else v
             for k, v in row.items()} for row in reader]
    if not rows:
        raise InputError(path, "has a header but no rows")
    return rows


def read_msrvtt(annotation_path: Path, video_root: Path | None) -> list[EvalSample]:
    """MSR-VTT 1k-A: ``MSRVTT_JSFUSION_test.csv`` (key,vid_key,video_id,sentence), 1 caption
    each, of ``<video_id>.mp4`` (e.g. ``video7579.mp4``)."""
    rows = _csv_rows(annotation_path, ("video_id", "sentence"))
    videos = index_videos(video_root)
    out = []
    for i, row in enumerate(rows, start=2):
        vid, text = row["video_id"], row["sentence"]
        if not vid or not text:
            raise InputError(annotation_path, f"line {i}: empty video_id or sentence")
        out.append(EvalSample(vid, videos.get(vid), text))
    return out


def read_youcook2(annotation_path: Path, video_root: Path | None, *,
                  subset: str = YOUCOOK2_SUBSET) -> list[EvalSample]:
    """YouCook2 clips: ``youcookii_annotations_trainval.json``, one clip per annotated segment
    of the raw video ``<youtube id>.{mp4,mkv,webm}``; the standard test is the ``validation``
    subset (~3.3k clips). A ``.csv`` is MIL-NCE's ``validation_youcook.csv`` of the same clips.
    """
    if Path(annotation_path).suffix.lower() == ".csv":
        if subset != "validation":
            raise HowtocapError(f"{annotation_path}: a YouCook2 CSV holds validation clips "
                                f"only; --subset {subset} needs the annotations JSON")
        return _read_youcook2_csv(Path(annotation_path), video_root)
    videos = index_videos(video_root)
    out = []
    for vid, entry in youcook2_steps(Path(annotation_path)).items():
        for j, ann in enumerate(entry.annotations if entry.subset == subset else []):
            start, end = ann.segment
            if end <= start:
                raise InputError(annotation_path, f"database[{vid!r}]['annotations'][{j}]: a "
                                                  f"clip needs end > start, got {ann.segment}")
            out.append(EvalSample(vid, videos.get(vid), ann.sentence, start, end))
    if not out:
        raise InputError(annotation_path, f"no annotated clips in subset {subset!r}")
    return out


def _read_youcook2_csv(path: Path, video_root: Path | None) -> list[EvalSample]:
    """MIL-NCE's ``validation_youcook.csv``: ``end,start,task,text,video_id`` (columns found by
    name, so its end-before-start order does not matter), whole seconds."""
    videos = index_videos(video_root)
    out = []
    for i, row in enumerate(_csv_rows(path, ("video_id", "start", "end", "text")), start=2):
        start = _float_or_none(row["start"], path, i, "start")
        end = _float_or_none(row["end"], path, i, "end")
        if not row["video_id"] or not row["text"] or start is None or end is None \
                or end <= start:
            raise InputError(path, f"line {i}: needs video_id, text, start and end > start")
        out.append(EvalSample(row["video_id"], videos.get(row["video_id"]), row["text"],
                              start, end))
    return out


class _CaptionUnpickler(pickle.Unpickler):
    """``raw-captions.pkl`` holds only dicts, lists and strings: refuse anything else."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_msvd(annotation_path: Path, video_root: Path | None, *,
              captions_path: Path | None = None) -> list[EvalSample]:
    """MSVD test: ``test_list.txt`` (one video id per line; ``annotation_path`` is it or its
    folder) + ``raw-captions.pkl``, a video id (``-4wsuPCjDBc_5_15``) -> its captions, each a
    list of tokens; a video has ~40, and every one of them becomes a query."""
    path = Path(annotation_path)
    list_path = path / "test_list.txt" if path.is_dir() else path
    cap_path = Path(captions_path) if captions_path else list_path.parent / "raw-captions.pkl"
    ids = [ln.strip() for ln in read_text(list_path).splitlines() if ln.strip()]
    if not ids:
        raise InputError(list_path, "lists no video ids")
    if not cap_path.is_file():
        raise InputError(cap_path, "caption file does not exist (MSVD needs raw-captions.pkl "
                                   "next to the list, or captions_path=)")
    try:
        with cap_path.open("rb") as fh:
            caps = _CaptionUnpickler(fh).load()
    except Exception as exc:  # noqa: BLE001 - a damaged pickle raises almost any type
        raise InputError(cap_path, f"is not a caption pickle ({type(exc).__name__}: "
                                   f"{' '.join(str(exc).split())[:80]})") from None
    if not isinstance(caps, dict):
        raise InputError(cap_path, "must hold a dict video_id -> list of captions")
    videos = index_videos(video_root)
    out = []
    for vid in ids:
        if vid not in caps:
            raise InputError(cap_path, f"no captions for video {vid!r} listed in {list_path}")
        if not isinstance(caps[vid], list | tuple):
            raise InputError(cap_path, f"captions of {vid!r} must be a list, got "
                                       f"{type(caps[vid]).__name__}")
        for cap in caps[vid]:
            if isinstance(cap, list | tuple) and not all(isinstance(t, str) for t in cap):
                raise InputError(cap_path, f"a caption of {vid!r} holds a non-word token")
            text = " ".join(cap) if isinstance(cap, list | tuple) else str(cap)
            if text.strip():
                out.append(EvalSample(vid, videos.get(vid), text.strip()))
    return out


def read_lsmdc(annotation_path: Path, video_root: Path | None) -> list[EvalSample]:
    """LSMDC test: ``LSMDC16_challenge_1000_publictect.csv``, tab-separated, no header. Clips
    are already cut: each is a whole video file ``<clip id>.avi`` (under per-movie folders)."""
    out = []
    videos = index_videos(video_root)
    for i, line in enumerate(read_text(annotation_path).splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 6:
            raise InputError(annotation_path,
                             f"line {i}: expected 6 tab-separated columns (clip_id, "
                             f"start_aligned, end_aligned, start_extracted, end_extracted, "
                             f"sentence), found {len(fields)}")
        clip, text = fields[0].strip(), fields[5].strip()
        if not clip or not text:
            raise InputError(annotation_path, f"line {i}: empty clip id or sentence")
        out.append(EvalSample(clip, videos.get(clip), text))
    if not out:
        raise InputError(annotation_path, "has no rows")
    return out


def _float_or_none(value: str | None, path: Path, line: int, col: str) -> float | None:
    if not value:
        return None
    with contextlib.suppress(ValueError):
        if math.isfinite(seconds := float(value)):
            return seconds
    raise InputError(path, f"line {line}: {col} must be seconds, got {value!r}")


def read_csv(annotation_path: Path, video_root: Path | None) -> list[EvalSample]:
    """A user's own set: ``video_id,video_path,caption[,start,end]`` with a header.
    ``video_path`` is relative to ``video_root`` (else the CSV's folder); when empty,
    ``<video_id>.<ext>`` is looked up there. Equal ``video_id,start,end``: one clip."""
    path = Path(annotation_path)
    rows = _csv_rows(path, ("video_id", "video_path", "caption"))
    base = Path(video_root) if video_root is not None else path.parent
    videos: dict[str, Path] | None = None  # indexed when a row first needs it
    out = []
    for i, row in enumerate(rows, start=2):
        vid, vp, text = row["video_id"], row["video_path"], row["caption"]
        if not vid or not text:
            raise InputError(path, f"line {i}: empty video_id or caption")
        start = _float_or_none(row.get("start"), path, i, "start")
        end = _float_or_none(row.get("end"), path, i, "end")
        if (start is None) != (end is None) or (start is not None and end <= start):
            raise InputError(path, f"line {i}: give both start and end (end > start) or neither")
        if vp:
            full = listed_path(path, i, vp, base)
            full = full if full is not None and full.exists() else None
        else:
            videos = videos if videos is not None else index_videos(base)
            full = videos.get(vid)
        out.append(EvalSample(vid, full, text, start, end))
    return out


READERS: dict[str, Callable[..., list[EvalSample]]] = {
    "msrvtt": read_msrvtt, "youcook2": read_youcook2, "msvd": read_msvd,
    "lsmdc": read_lsmdc, "csv": read_csv,
}


def read_benchmark(kind: str, annotation_path: Path | str, video_root: Path | str | None,
                   **kw: object) -> list[EvalSample]:
    """The samples of benchmark ``kind`` (one of :data:`KINDS`); extra options per reader."""
    if kind not in READERS:
        raise HowtocapError(f"unknown benchmark {kind!r}; choose from {', '.join(KINDS)}")
    root = Path(video_root) if video_root is not None else None
    return READERS[kind](Path(annotation_path), root, **kw)
