"""Caption–clip pairs as every consumer reads them: training, WebDataset shards, eval.
A *clip* is one ``(video, start, end)`` span; it may carry several captions (aligned captions
often repeat a span). Reading pairs (a run directory, its ``aligned/`` or ``framecaps/``
table, a Parquet file or a CSV) and grouping them into clips lives here, below both the
trainer and the shard writer, so neither imports the other."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from howtocap.engine.rundir import RunDir
from howtocap.errors import InputError
from howtocap.io.inputs import listed_path
from howtocap.io.video import probe, segment_times
from howtocap.progress import console

CSV_COLUMNS = ("video_id", "video_path", "caption", "start", "end")


@dataclass
class Clip:
    video_id: str
    video_path: Path
    start: float
    end: float
    captions: list[str]
    duration: float = 0.0  # of the whole video (0 when unknown)


@dataclass
class PairSet:
    clips: list[Clip]
    n_pairs: int
    skipped: dict[str, str] = field(default_factory=dict)  # video_id -> why
    skipped_pairs: int = 0


# -- reading pairs ---------------------------------------------------------------------------
def is_table_dir(path: Path) -> bool:
    """A run directory's table folder (``DIR/aligned/``: shard files beside
    ``DIR/videos.parquet``)."""
    return path.is_dir() and (path.parent / "videos.parquet").exists() \
        and next(path.glob("shard-*.parquet"), None) is not None


def run_root(source: str | Path) -> Path:
    """The run directory a pairs source belongs to: itself, or the run of its table folder or
    Parquet file (``DIR/aligned/``, ``DIR/aligned/shard-00000.parquet``, ``DIR/x.parquet``)."""
    src = Path(source)
    if src.is_dir():
        return src.parent if is_table_dir(src) else src
    return src.parent.parent if is_table_dir(src.parent) else src.parent


def read_pairs(source: str | Path) -> pd.DataFrame:
    """``video_id, video_path, start, end, text`` from a run directory (its aligned captions,
    else its frame captions), one of its tables or their shard files, a Parquet file or a CSV
    ``video_id,video_path,caption,start,end`` (paths relative to its folder). Only ``kept``
    rows; video paths come from the run's ``videos.parquet``."""
    src = Path(source)
    if not src.exists():
        raise InputError(src, "does not exist (expected a run directory, its aligned/ table, "
                              "a Parquet file or a CSV of pairs)")
    if src.is_dir() or src.suffix == ".parquet":
        whole_run = src.is_dir() and not is_table_dir(src)
        rd = RunDir(run_root(src), create=False)
        name = next((t for t in ("aligned", "framecaps") if rd.has_table(t)), None)
        if whole_run and name is None:
            raise InputError(src, "has no aligned or framecaps table: run "
                                  "`howtocap align` or `howtocap framecaps` first, or pass a "
                                  "CSV of pairs")
        table = rd.root / name if whole_run and name else src
        try:
            df = rd.table(name) if whole_run and name else pd.read_parquet(src)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise InputError(table, f"not a readable Parquet table ({exc})") from None
        need = {"video_id", "start", "end", "text"}
        if not need <= set(df.columns):
            raise InputError(table, f"needs columns {sorted(need)}; found {list(df.columns)}")
        if "kept" in df.columns:
            df = df[df["kept"].astype(bool)]
        videos = rd.table("videos")
        paths = dict(zip(videos["video_id"], videos["video_path"], strict=True))
        df = df.assign(video_path=[paths.get(v, "") for v in df["video_id"]])
        return df[["video_id", "video_path", "start", "end", "text"]].reset_index(drop=True)
    return _read_csv(src)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            cols = set(reader.fieldnames or [])
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason})") from None
    if "caption" not in cols and "text" in cols:
        for r in rows:
            r["caption"] = r["text"]
        cols.add("caption")
    missing = [c for c in CSV_COLUMNS if c not in cols]
    if missing:
        raise InputError(path, f"CSV of pairs needs columns {','.join(CSV_COLUMNS)}; "
                               f"missing {','.join(missing)}")
    out = []
    for i, r in enumerate(rows, start=2):
        vid = (r["video_id"] or "").strip()
        if not vid:  # (eval's CSV reader says the same)
            raise InputError(path, f"line {i}: empty video_id")
        try:
            start, end = float(r["start"]), float(r["end"])
            if not (math.isfinite(start) and math.isfinite(end)):
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(path, f"line {i}: start/end must be numbers of seconds "
                                   f"(got {r['start']!r}, {r['end']!r})") from None
        vp = listed_path(path, i, (r["video_path"] or "").strip(), path.parent)
        out.append({"video_id": vid,
                    "video_path": str(vp) if vp else "",
                    "start": start, "end": end, "text": (r["caption"] or "").strip()})
    return pd.DataFrame(out, columns=["video_id", "video_path", "start", "end", "text"])


# -- clips -----------------------------------------------------------------------------------
def build_clips(pairs: pd.DataFrame, *, check: Callable[[Path], float] | None = None,
                log: Console | None = console) -> PairSet:
    """Group pairs into clips; drop pairs whose video is missing or unreadable (one line each).
    ``check(path) -> duration`` raises ``InputError`` for a bad video (default: a PyAV probe)."""
    pairs = pairs[(pairs["text"].astype(str).str.strip() != "")
                  & (pairs["end"].astype(float) > pairs["start"].astype(float))]
    durations: dict[str, float] = {}
    skipped: dict[str, str] = {}
    for vid, path in pairs.groupby("video_id", sort=True)["video_path"].first().items():
        if not path:
            skipped[vid] = "no video file known for this video id"
            continue
        try:
            durations[vid] = float(check(Path(path)) if check else probe(Path(path)).duration)
        except InputError as exc:
            skipped[vid] = str(exc)
    skipped_pairs = int(pairs["video_id"].isin(list(skipped)).sum())
    if log is not None:
        for vid, why in skipped.items():
            log.print(f"[yellow]skip[/] {vid}: {why}", highlight=False)
        if skipped:
            log.print(f"skipped {len(skipped)} video(s), {skipped_pairs} pair(s) "
                      "(missing or unreadable)", highlight=False)
    good = pairs[pairs["video_id"].isin(list(durations))]
    clips = [Clip(str(vid), Path(grp["video_path"].iloc[0]), float(start), float(end),
                  [str(t) for t in grp["text"]], durations[vid])
             for (vid, start, end), grp in good.groupby(["video_id", "start", "end"], sort=True)]
    return PairSet(clips, int(len(good)), skipped, skipped_pairs)


def frame_times(clip: Clip, k: int, rng: np.random.Generator | None) -> tuple[float, ...]:
    """``k`` times in the clip: one random time per equal segment (training) or the centres."""
    end = min(clip.end, clip.duration) if clip.duration > 0 else clip.end
    start = min(clip.start, max(end - 1e-3, 0.0))
    return tuple(float(t) for t in segment_times(start, end, k, rng))

