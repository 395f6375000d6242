"""Write a run's captions in other tools' formats (HowToCaption JSON, CSV of pairs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import pandas as pd

from howtocap.errors import HowtocapError
from howtocap.rundir import RunDir, atomic_write_text

ExportFormat = Literal["howtocaption", "csv"]
ExportWhat = Literal["auto", "captions", "aligned"]


def pairs_for_export(rundir: RunDir, what: ExportWhat = "auto") -> tuple[pd.DataFrame, str]:
    """Kept aligned pairs when alignment ran (``auto``), else the LLM captions."""
    has_aligned = rundir.table_path("aligned").exists() or rundir.part_dir("aligned").exists()
    if what == "aligned" or (what == "auto" and has_aligned):
        if not has_aligned:
            raise HowtocapError(f"{rundir.root}: no aligned captions yet; run `howtocap align`")
        df = rundir.read_table("aligned")
        return df[df["kept"]].reset_index(drop=True), "aligned"
    if not (rundir.table_path("captions").exists() or rundir.part_dir("captions").exists()):
        raise HowtocapError(f"{rundir.root}: no captions yet; run `howtocap caption` first")
    return rundir.read_table("captions"), "captions"


def to_howtocaption(df: pd.DataFrame) -> dict[str, dict[str, list]]:
    """``{video_id: {"start": [...], "end": [...], "text": [...]}}`` as the HowToCaption release."""
    out: dict[str, dict[str, list]] = {}
    for vid, g in df.sort_values(["video_id", "start"], kind="stable").groupby("video_id",
                                                                                sort=True):
        out[str(vid)] = {"start": [round(float(x), 3) for x in g["start"]],
                         "end": [round(float(x), 3) for x in g["end"]],
                         "text": [str(t) for t in g["text"]]}
    return out


def export_run(run_dir: str | Path, *, fmt: ExportFormat = "howtocaption",
               what: ExportWhat = "auto", out: str | Path | None = None) -> tuple[Path, int]:
    """Write the export file; returns its path and the number of captions in it."""
    rundir = RunDir(run_dir, create=False)
    if not rundir.root.is_dir():
        raise HowtocapError(f"{rundir.root}: not a run directory")
    df, kind = pairs_for_export(rundir, what)
    if fmt == "howtocaption":
        path = Path(out) if out else rundir.root / f"{kind}_howtocaption.json"
        atomic_write_text(path, json.dumps(to_howtocaption(df)))
    elif fmt == "csv":
        path = Path(out) if out else rundir.root / f"{kind}_pairs.csv"
        videos = rundir.videos()[["video_id", "video_path"]]
        cols = ["video_id", "video_path", "text", "start", "end"]
        merged = df.merge(videos, on="video_id", how="left").rename(columns={"text": "caption"})
        atomic_write_text(path, merged[[c if c != "text" else "caption" for c in cols]]
                          .to_csv(index=False))
    else:
        raise HowtocapError(f"unknown export format {fmt!r}; choose howtocaption or csv")
    return path, len(df)
