"""Reading a table's shard file a window of whole videos at a time, so align's driver holds a
window and not the run (issue #22: 48M captions at HowTo100M).

A stage's shard files are sorted by video id (``RunDir``), so a window of row groups cut at a
video boundary holds whole videos, in the order a sort of the file gives. A file that is not
sorted that way (one copied in by hand) is read whole, as one window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from howtocap.atomic import atomic_write, corrupt_parquet, open_parquet

ROWS = 16_384  # rows a window holds (plus the rest of the video it ends in); read at each
# call, so a test can make windows tiny


def _metadata(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise corrupt_parquet(path, exc) from None


def columns_of(path: Path) -> list[str]:
    """The table's column names (from the footer, no rows read)."""
    return list(_metadata(path).schema.to_arrow_schema().names)


def sorted_by_video(path: Path, rows: int | None = None) -> bool:
    """Whether the file's ``video_id`` never decreases (and has no nulls): one pass over
    that column, a record batch at a time."""

    last: str | None = None
    pf = open_parquet(path)
    for rb in pf.iter_batches(batch_size=rows or ROWS, columns=["video_id"]):
        col = rb.column(0)
        if col.null_count:
            return False
        ids = col.to_numpy(zero_copy_only=False)
        if not len(ids):
            continue
        if (last is not None and ids[0] < last) or bool((ids[1:] < ids[:-1]).any()):
            return False
        last = ids[-1]
    return True


def video_windows(path: Path, columns: Sequence[str] | None = None, rows: int | None = None
                  ) -> Iterator[pd.DataFrame]:
    """The file's rows as frames of whole videos, in file order (``rows`` at a time, and the
    rest of the last video); the whole file as one frame when it is not sorted by video.
    Frames are what ``pd.read_parquet`` gives, row for row."""
    import pyarrow.parquet as pq

    rows = rows or ROWS
    cols = list(columns) if columns is not None else None
    if not sorted_by_video(path, rows):
        yield pq.read_table(path, columns=cols, page_checksum_verification=True).to_pandas()
        return
    pf = open_parquet(path)
    if pf.metadata.num_rows == 0:  # no windows: the empty table itself, with its columns
        yield _pandas(pf.read(columns=cols), pf)
        return
    carry: pa.Table | None = None
    for rb in pf.iter_batches(batch_size=rows, columns=cols):
        t = pa.Table.from_batches([rb])
        t = t if carry is None else pa.concat_tables([carry, t])  # (a carry is never empty)
        if not t.num_rows:
            continue
        ids = t.column("video_id")
        last = ids[t.num_rows - 1].as_py()
        # the rows of the window's last video wait for the next batch (it may go on there)
        same = np.asarray(ids.to_numpy(zero_copy_only=False) == last)
        cut = int(np.argmax(same))
        if cut == 0:  # one video so far: a window never splits one
            carry = t
            continue
        carry = t.slice(cut)
        yield _pandas(t.slice(0, cut), pf)
    if carry is not None and carry.num_rows:
        yield _pandas(carry, pf)


def _pandas(t: Any, pf: Any) -> pd.DataFrame:
    """A window as the frame ``pd.read_parquet`` would give for those rows."""
    return t.replace_schema_metadata(pf.schema_arrow.metadata).to_pandas()


def write_windows(path: Path, frames: Iterator[pd.DataFrame]) -> int:
    """Frames of one table into one Parquet file (atomic, page checksums), a row group each,
    as ``atomic_write_parquet`` would write their concatenation; returns the row count."""
    import pyarrow.parquet as pq

    total = [0]

    def write(tmp: str) -> None:
        writer: pq.ParquetWriter | None = None
        schema: pa.Schema | None = None
        try:
            for df in frames:
                if schema is None:
                    t = pa.Table.from_pandas(df, preserve_index=False)
                    # a column of no values in the first window has no type of its own yet
                    schema = pa.schema([f.with_type(pa.string()) if pa.types.is_null(f.type)
                                        else f for f in t.schema],
                                       metadata=t.schema.metadata)
                    t = t.cast(schema)
                    writer = pq.ParquetWriter(tmp, schema, write_page_checksum=True)
                else:
                    t = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
                assert writer is not None
                writer.write_table(t)
                total[0] += t.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            raise ValueError(f"{path}: no frames to write (give an empty one)")

    atomic_write(path, write)
    return total[0]
