"""The tables a run writes: column order and dtypes (``SCHEMAS``), and making a frame conform.
Bottom layer: imports nothing of the package, so readers, stages and the run directory share
one definition of every table."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

# Column order of every table the pipeline writes; see docs/architecture.md.
SCHEMAS: dict[str, dict[str, str]] = {
    # What the run was given: one row per video (written by the caption stage).
    "videos": {"video_id": "str", "video_path": "str", "subtitle_path": "str"},
    # Remote inputs fetched by the download stage: where each came from (url, subtitle_url),
    # where it is now in DIR/cache/media (video_path, subtitle_path: what later stages read),
    # its size and how (fsspec | yt-dlp)
    "downloads": {"video_id": "str", "url": "str", "video_path": "str", "bytes": "int64",
                  "subtitle_url": "str", "subtitle_path": "str", "method": "str",
                  "config_id": "str"},
    # config_id: the fingerprint of the stage run that made the row (DIR/parts/fingerprints/)
    "subtitles": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "source": "str", "config_id": "str"},
    # rejected: "" = kept, else why the caption shows nothing (caption.filler); align, export and
    # index read only kept rows (``kept_captions``)
    "captions": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                 "source": "str", "block": "int64", "model": "str", "config_id": "str",
                 "rejected": "str"},
    "aligned": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                "orig_start": "float64", "orig_end": "float64", "offset": "float64",
                "score": "float64", "kept": "bool", "encoders": "str", "source": "str",
                "block": "int64", "model": "str", "config_id": "str"},
    # TDR frame features (``howtocap tdr``): a frame every few seconds, its transcript words and
    # the image and text embeddings (lists of floats)
    "tdr_frames": {"video_id": "str", "time": "float64", "transcript": "str", "image": "object",
                   "text": "object"},
    # Frame captions as labels (Ventura et al.): one row per caption of one sampled frame.
    "framecaps": {"video_id": "str", "start": "float64", "end": "float64", "text": "str",
                  "captioner": "str", "frame_time": "float64", "clipscore": "float64",
                  "kept": "bool", "config_id": "str"},
    # Shots (``howtocap shots``, PySceneDetect): one row per shot, consecutive, covering the
    # whole video (a video without a cut is one shot); read by ``shots.bounds.shots_by_video``
    "shots": {"video_id": "str", "start": "float64", "end": "float64", "config_id": "str"},
    # Visual signals (``howtocap signals``): one row per shot, or per fixed window when the
    # video has no shots. motion: mean absolute luma difference of consecutive sampled frames
    # (0..1, NaN in a window too short for two); static: motion under the set bar; text_area,
    # face_area (the largest face): fractions of the frame; brightness: mean luma 0..1;
    # sharpness: variance of the Laplacian of luma (0..1) at a fixed working size; aesthetic:
    # a LAION-style head's score (NaN unless --aesthetic)
    "signals": {"video_id": "str", "start": "float64", "end": "float64", "motion": "float64",
                "static": "bool", "text_area": "float64", "face_area": "float64",
                "brightness": "float64", "sharpness": "float64", "aesthetic": "float64",
                "config_id": "str"},
    # Near-duplicate videos and repeated clips (``howtocap duplicates``): kind "video" = video_id
    # is a copy of duplicate_of (its group's kept id); kind "clip" = [start, end) of video_id
    # shows [dup_start, dup_end) of duplicate_of. similarity: mean cosine of the matched
    # seconds; seconds: how many matched (0: grouped through another copy, windows NaN)
    "duplicates": {"video_id": "str", "duplicate_of": "str", "kind": "str",
                   "similarity": "float64", "seconds": "int64", "start": "float64",
                   "end": "float64", "dup_start": "float64", "dup_end": "float64",
                   "config_id": "str"},
    # message: the error, or the warnings of an ``ok`` video (``warnings`` counts them);
    # cause of an error: bad input | model output | service | internal; attempts so far
    "status": {"video_id": "str", "stage": "str", "status": "str", "message": "str",
               "seconds": "float64", "finished_at": "float64", "warnings": "int64",
               "cause": "str", "attempts": "int64", "config_id": "str"},
}
# The align stage's per-video scores (``DIR/parts/align_scores/``): aligned's columns, then the
# scoring extras (partial, null_z, z_text, z_clip, outside); ``kept`` is set by the reduce step
# (the global filter) that turns them into ``aligned``.
SCHEMAS["align_scores"] = dict(SCHEMAS["aligned"])
# Columns older tables (or a stage's raw output) may lack, filled by ``conform``.
# (captions without ``rejected`` were made before the filler test: all kept)
DEFAULTS: dict[str, Any] = {"config_id": "", "cause": "", "attempts": 1, "rejected": ""}


def kept_captions(captions: pd.DataFrame) -> pd.DataFrame:
    """The captions that are training text: rows not rejected as showing nothing, without the
    ``rejected`` column (a table from before the column exists is kept whole)."""
    if "rejected" not in captions.columns:
        return captions
    keep = captions["rejected"].fillna("").astype(str) == ""
    return captions[keep].drop(columns="rejected").reset_index(drop=True)


def empty_table(name: str) -> pd.DataFrame:
    """An empty frame with the table's columns and dtypes (so concat keeps the schema)."""
    return pd.DataFrame({c: pd.Series(dtype=t if t != "str" else object)
                         for c, t in SCHEMAS[name].items()})


class Rows:
    """One video's rows of a table as plain columns (a list or array, or one value for every
    row): what text-only stages hand the engine, which builds one Arrow table per batch from
    them. A pandas frame per video costs more than the driver's whole per-video budget on a
    million-video run; ``to_pandas`` gives the frame when a caller wants one."""

    __slots__ = ("cols", "n", "table")

    def __init__(self, table: str, n: int, cols: dict[str, Any]) -> None:
        self.table, self.n, self.cols = table, n, cols

    def __len__(self) -> int:
        return self.n

    @property
    def empty(self) -> bool:
        return self.n == 0

    @property
    def columns(self) -> list[str]:
        return list(SCHEMAS[self.table])

    def __getitem__(self, col: str) -> Any:
        """The column as a list or array of ``n`` values (a shared value repeated)."""
        value = self.cols[col] if col in self.cols else DEFAULTS[col]
        return value if isinstance(value, (list, np.ndarray)) else [value] * self.n

    def to_pandas(self) -> pd.DataFrame:
        return rows_table(self.table, self.n, **self.cols)


def rows(name: str, n: int, **columns: Any) -> Rows:
    """``Rows`` of table ``name``, checked like ``rows_table`` (names and lengths)."""
    schema = SCHEMAS[name]
    for col, value in columns.items():
        if col not in schema:
            raise ValueError(f"{name} table has no column {col!r}")
        if isinstance(value, (list, tuple, np.ndarray)):
            if len(value) != n:
                raise ValueError(f"{name}.{col}: {len(value)} values for {n} rows")
            if isinstance(value, tuple):
                columns[col] = list(value)
    return Rows(name, n, columns)


def empty_rows(name: str) -> Rows:
    """``Rows`` of table ``name`` with no row (``empty_table`` as plain columns)."""
    return rows(name, 0, **{c: [] for c in SCHEMAS[name]})


_ARROW_TYPES = {"str": "string", "float64": "float64", "int64": "int64", "bool": "bool_"}


# Columns of free text (a caption, a subtitle line): almost every value distinct.
FREE_TEXT = frozenset({"text"})


def parquet_dictionary(schema: Any) -> list[str]:
    """The columns worth a Parquet dictionary (``use_dictionary``): ids, sources, models,
    reasons. Not free text or floats: their dictionary outgrows its page and is dropped after
    it was built (a large share of writing a batch of subtitles, for a file no smaller)."""
    import pyarrow as pa

    return [f.name for f in schema if f.name not in FREE_TEXT
            and not pa.types.is_floating(f.type)]


@functools.cache
def arrow_schema(name: str) -> Any:
    """The Arrow schema pandas writes for table ``name`` (its metadata included), so a batch
    built from ``Rows`` and one written from a frame are the same file to every reader."""
    import pyarrow as pa

    fields = [pa.field(c, getattr(pa, _ARROW_TYPES[t])()) for c, t in SCHEMAS[name].items()
              if t in _ARROW_TYPES]
    if len(fields) < len(SCHEMAS[name]):
        raise ValueError(f"{name}: a table with object columns has no fixed Arrow schema")
    dummy = {"str": "", "float64": 0.0, "int64": 0, "bool": False}
    sample = rows_table(name, 1, **{c: dummy[t] for c, t in SCHEMAS[name].items()})
    meta = pa.Table.from_pandas(sample, preserve_index=False).schema.metadata
    return pa.schema(fields, metadata=meta)


def rows_to_arrow(name: str, parts: Iterable[Rows]) -> Any:
    """One Arrow table of every part's rows, in order, with the schema's types: a batch's
    file built once, column by column, instead of a frame per video concatenated."""
    import pyarrow as pa

    schema = arrow_schema(name)
    parts = list(parts)
    arrays = []
    repeat: Any = None  # each part's row positions, for columns of one value a part
    for f in schema:
        vs = [part.cols[f.name] if f.name in part.cols else DEFAULTS[f.name] for part in parts]
        if parts and not any(isinstance(v, (list, np.ndarray)) for v in vs):
            # one value a part (the video id, the model): those few values, repeated in C
            # rather than a Python object a row
            if repeat is None:
                repeat = pa.array(np.repeat(np.arange(len(parts), dtype=np.int64),
                                            [part.n for part in parts]))
            arrays.append(pa.array(vs, type=f.type).take(repeat))
            continue
        values = chain.from_iterable(v.tolist() if isinstance(v, np.ndarray) else v
                                     if isinstance(v, list) else [v] * part.n
                                     for part, v in zip(parts, vs, strict=True))
        arrays.append(pa.array(list(values), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def rows_table(name: str, n: int, **columns: Any) -> pd.DataFrame:
    """A conforming table of ``n`` rows from plain columns (a list, or one value for every
    row), built once with the schema's dtypes: what ``conform`` would return, without pandas
    assembling and converting a frame per video."""
    schema = SCHEMAS[name]
    unknown = set(columns) - set(schema)
    if unknown:
        raise ValueError(f"{name} table has no columns {sorted(unknown)}")
    idx = pd.RangeIndex(n)
    data = {}
    for col, dtype in schema.items():
        value = columns[col] if col in columns else DEFAULTS[col]
        kind = object if dtype == "str" else dtype
        if isinstance(value, (list, tuple, np.ndarray)):
            if len(value) != n:
                raise ValueError(f"{name}.{col}: {len(value)} values for {n} rows")
            arr = np.asarray(value, dtype=kind) if kind is not object else \
                np.array(value, dtype=object) if len(value) else np.empty(0, dtype=object)
        else:
            arr = np.full(n, value, dtype=kind)
        data[col] = pd.Series(arr, index=idx, name=col, dtype=kind, copy=False)
    return pd.DataFrame(data, index=idx, copy=False)


def conform(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """Columns in schema order with schema dtypes; extra columns are kept after them."""
    schema = SCHEMAS[name]
    missing = [c for c in schema if c not in df.columns]
    if missing and all(c in DEFAULTS for c in missing):
        # in the schema's dtypes: a scalar "" would become pandas' own string dtype, and the
        # frame would miss the fast path below (a few ms a video)
        df = df.assign(**{c: pd.Series(DEFAULTS[c], index=df.index, dtype=object
                                       if schema[c] == "str" else schema[c]) for c in missing})
        missing = []
    if missing:
        raise ValueError(f"{name} table lacks columns {missing}")
    # Already conforming (a stage's output, conformed again by write_part): a shallow copy is
    # enough under copy-on-write, and saves a per-call cost paid for every video.
    if list(df.columns[:len(schema)]) == list(schema) and isinstance(df.index, pd.RangeIndex) \
            and df.index.start == 0 and df.index.step == 1 \
            and [str(t) for t in df.dtypes.iloc[:len(schema)]] == \
            ["object" if t == "str" else t for t in schema.values()]:
        return df.copy(deep=False)
    # One frame built from converted columns: assigning column by column (pandas block
    # consolidation) was most of the per-video overhead of a text-only run.
    idx = pd.RangeIndex(len(df))
    data = {}
    for col, dtype in schema.items():
        kind = object if dtype == "str" else dtype
        values = df[col]
        if values.dtype != kind:
            values = values.astype(kind)
        data[col] = pd.Series(values.to_numpy(), index=idx, name=col, dtype=kind)
    data.update({c: pd.Series(df[c].array, index=idx, name=c)
                 for c in df.columns if c not in schema})
    return pd.DataFrame(data, index=idx)

