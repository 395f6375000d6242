"""Write a run's captions in other tools' formats (HowToCaption JSON, CSV of pairs, WebDataset
shards of clips for training at scale: ``howtocap.io.webdataset``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from howtocap.atomic import atomic_write_text
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io import WHAT, ExportWhat
from howtocap.io.where import where_rows, with_signals
from howtocap.schemas import kept_captions

ExportFormat = Literal["howtocaption", "csv", "webdataset"]
# ``auto`` takes the first table a run has; training data prefers frame captions to unaligned
# LLM captions, as ``howtocap train DIR`` does.
AUTO_ORDER = ("aligned", "captions", "framecaps")
TRAIN_ORDER = ("aligned", "framecaps", "captions")


def drop_duplicate_rows(rows: pd.DataFrame, rundir: RunDir) -> pd.DataFrame:
    """``rows`` (video_id, start, end, …) without the duplicates ``howtocap duplicates`` found:
    the rows of a video not its group's kept id, and those whose window's middle lies in a
    clip another video repeats (that video keeps the footage)."""
    if not rundir.has_table("duplicates"):
        raise HowtocapError(f"{rundir.root}: no duplicates table; run `howtocap duplicates "
                            f"{rundir.root}` first (--drop-duplicates reads it)")
    dups = rundir.table("duplicates", ["video_id", "kind", "start", "end"])
    vid = rows["video_id"].astype(str)
    drop = vid.isin(set(dups.loc[dups["kind"] == "video", "video_id"].astype(str)))
    clips = dups[dups["kind"] == "clip"]
    if len(clips) and len(rows):
        mid = pd.DataFrame({"row": range(len(rows)), "video_id": vid.to_numpy(),
                            "mid": (rows["start"].to_numpy(float)
                                    + rows["end"].to_numpy(float)) / 2})
        hit = mid.merge(clips.astype({"video_id": str}), on="video_id")
        inside = hit.loc[(hit["mid"] >= hit["start"]) & (hit["mid"] < hit["end"]), "row"]
        drop |= np.isin(np.arange(len(rows)), inside.to_numpy())
    return rows[~drop.to_numpy()].reset_index(drop=True)


def pairs_for_export(rundir: RunDir, what: ExportWhat = WHAT, *, kept_only: bool = True,
                     order: tuple[str, ...] = AUTO_ORDER, drop_duplicates: bool = False,
                     where: str | None = None, carry_signals: bool = False
                     ) -> tuple[pd.DataFrame, str]:
    """Kept aligned pairs when alignment ran (``auto``), else the LLM captions, else the kept
    frame captions; ``what`` names one table instead. Then ``filter_rows``; ``carry_signals``:
    the rows keep the window's signals (for a writer that stores them)."""
    df, kind = _pairs(rundir, what, kept_only=kept_only, order=order)
    return filter_rows(df, rundir, drop_duplicates=drop_duplicates, where=where,
                       carry_signals=carry_signals), kind


def filter_rows(rows: pd.DataFrame, rundir: RunDir, *, drop_duplicates: bool = False,
                where: str | None = None, carry_signals: bool = False) -> pd.DataFrame:
    """The filters ``export`` and ``train`` share: duplicates out, the window's signals in
    (read only when needed), then ``--where``."""
    if drop_duplicates:
        rows = drop_duplicate_rows(rows, rundir)
    has_signals = (where is not None or carry_signals) and rundir.has_table("signals")
    if has_signals:
        rows = with_signals(rows, rundir.table("signals"))
    if where is not None:
        hint = "" if has_signals else \
            f" (no signals yet: `howtocap signals {rundir.root}` adds motion, text_area, ...)"
        rows = where_rows(rows, where, f"{rundir.root}{hint}")
    return rows


_NOT_YET = {"aligned": "no aligned captions yet; run `howtocap align`",
            "framecaps": "no frame captions yet; run `howtocap framecaps`",
            "captions": "no captions yet; run `howtocap caption` first"}


def _pairs(rundir: RunDir, what: str, *, kept_only: bool, order: tuple[str, ...]
           ) -> tuple[pd.DataFrame, str]:
    if what == "auto":
        what = next((t for t in order if rundir.has_table(t)), "captions")
    if what not in _NOT_YET:
        raise HowtocapError(f"unknown --what {what!r}; choose auto, aligned, captions or "
                            "framecaps")
    if not rundir.has_table(what):
        raise HowtocapError(f"{rundir.root}: {_NOT_YET[what]}")
    df = rundir.table(what)
    if what == "captions":
        return kept_captions(df), what
    return (df[df["kept"].astype(bool)] if kept_only else df).reset_index(drop=True), what


def to_howtocaption(df: pd.DataFrame, *, with_scores: bool = False) -> dict[str, dict[str, list]]:
    """The HowToCaption release format: ``{video_id: {"start", "end", "text"}}`` where ``text[i]``
    lists every caption of clip ``[start[i], end[i])`` (several captions can share a clip), as
    ``(text, score)`` pairs in the unfiltered variant (``with_scores``)."""
    out: dict[str, dict[str, list]] = {}
    df = df.sort_values(["video_id", "start", "end"], kind="stable")
    for vid, g in df.groupby("video_id", sort=True):
        starts, ends, texts = [], [], []
        for (start, end), clip in g.groupby(["start", "end"], sort=False):
            starts.append(round(float(start), 3))
            ends.append(round(float(end), 3))
            if with_scores:
                texts.append([(str(t), round(float(sc), 6))
                              for t, sc in zip(clip["text"], clip["score"], strict=True)])
            else:
                texts.append([str(t) for t in clip["text"]])
        out[str(vid)] = {"start": starts, "end": ends, "text": texts}
    return out


def export_run(run_dir: str | Path, *, fmt: ExportFormat = "howtocaption",
               what: ExportWhat = WHAT, out: str | Path | None = None,
               unfiltered: bool = False, drop_duplicates: bool = False,
               where: str | None = None) -> tuple[Path, int]:
    """Write the export file; returns its path and the number of captions in it."""
    rundir = RunDir(run_dir, create=False)
    if not rundir.root.is_dir():
        raise HowtocapError(f"{rundir.root}: not a run directory")
    df, kind = pairs_for_export(rundir, what, kept_only=not unfiltered,
                                drop_duplicates=drop_duplicates, where=where,
                                carry_signals=fmt == "csv")
    if fmt == "webdataset":
        raise HowtocapError("--format webdataset writes a folder of shards: use "
                            "howtocap.io.webdataset.export_webdataset")
    if unfiltered and kind != "aligned":
        raise HowtocapError(f"{rundir.root}: --unfiltered needs aligned captions (with scores)")
    if fmt == "howtocaption":
        name = f"{kind}{'_unfiltered' if unfiltered else ''}_howtocaption.json"
        path = Path(out) if out else rundir.root / name
        atomic_write_text(path, json.dumps(to_howtocaption(df, with_scores=unfiltered)))
    elif fmt == "csv":
        path = Path(out) if out else rundir.root / f"{kind}_pairs.csv"
        videos = rundir.table("videos")[["video_id", "video_path"]]
        cols = ["video_id", "video_path", "caption", "start", "end"]
        if unfiltered:  # as promised by --unfiltered: every pair with its score and verdict
            cols += ["score", "kept"]
        cols += list(df.attrs.get("signals", []))
        merged = df.merge(videos, on="video_id", how="left").rename(columns={"text": "caption"})
        atomic_write_text(path, merged[cols].to_csv(index=False))
    else:
        raise HowtocapError(f"unknown export format {fmt!r}; choose howtocaption, csv or "
                            "webdataset")
    return path, len(df)
