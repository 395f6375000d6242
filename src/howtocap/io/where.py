"""``--where``: keep the caption rows whose columns (theirs, and the visual signals of their
window) pass an expression in pandas' ``DataFrame.query`` syntax, or a preset's (``PRESETS``);
docs/signals.md has both.
A caption's window gets each signal's mean over the signal rows it overlaps, weighted by the
overlap, so a filter and a clip's JSON see one value per caption whatever the shots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from howtocap.errors import HowtocapError

if TYPE_CHECKING:  # the CLI reads PRESETS for its help without loading pandas
    import pandas as pd

KEYS = ("video_id", "start", "end")
# Chosen on the planted videos of benchmarks/quality/bench_signals.py (docs/signals.md): each
# threshold lies between its planted kind's median and the nearest value of every other kind
# (sharpness: their geometric mean, as it spans decades); ``static`` is the step's own flag.
PRESETS = {
    "visible": "brightness > 0.1 and sharpness > 0.0003",  # not black, not blurred
    "no-slides": "not static",  # slides, still photographs and black screens out
    "no-talking-head": "face_area < 0.07",  # a face filling a tenth of the frame or more out
    "footage": "brightness > 0.1 and sharpness > 0.0003 and not static and face_area < 0.07",
}


def window_signals(rows: pd.DataFrame, signals: pd.DataFrame) -> pd.DataFrame:
    """Each row's window's overlap-weighted mean of every signal column (NaN where no signal
    row overlaps it); a flag holds where it holds for at least half the window.
    One sorted pass for all videos: videos are laid end to end on one time axis, and a
    window's mean is the difference of the running integral at its two ends."""
    import numpy as np
    import pandas as pd

    flags = [c for c in signals.columns if pd.api.types.is_bool_dtype(signals[c])]
    cols = [c for c in signals.columns if c not in KEYS
            and (pd.api.types.is_numeric_dtype(signals[c]) or c in flags)]
    out = pd.DataFrame(index=rows.index)
    if not cols:
        return out
    sig = signals.assign(video_id=signals["video_id"].astype(str)).sort_values(
        ["video_id", "start"], kind="stable")
    sig = sig[sig["end"].astype(float) > sig["start"].astype(float)]
    if not len(sig):  # no signal row spans any time: every window is unknown
        for c in cols:
            out[c] = pd.array([None] * len(rows), dtype="boolean") if c in flags else np.nan
        return out
    order = {v: i for i, v in enumerate(pd.unique(sig["video_id"]))}
    span = float(max(sig["end"].max(), rows["end"].max() if len(rows) else 0.0)) + 1.0
    base = sig["video_id"].map(order).to_numpy(float) * span
    s0 = base + sig["start"].to_numpy(float)
    # overlapping signal rows (not ours, but a user's table may have them): the later one wins
    s1 = np.minimum(base + sig["end"].to_numpy(float), np.r_[s0[1:], np.inf])
    width = np.maximum(s1 - s0, 0.0)
    rid = rows["video_id"].astype(str).map(order)
    known = rid.notna().to_numpy()
    rbase = rid.fillna(0).to_numpy(float) * span
    a = rbase + rows["start"].to_numpy(float)
    b = rbase + rows["end"].to_numpy(float)

    # where each window end falls among the signal rows: found once, used by every column
    ends = []
    for x in (a, b):
        j = np.searchsorted(s0, x, side="right") - 1
        jj = np.clip(j, 0, len(s0) - 1)
        ends.append((j >= 0, np.clip(j, 0, None), jj, np.clip(x - s0[jj], 0.0, width[jj])))

    def between(values: np.ndarray) -> np.ndarray:
        """The integral of ``values`` (one per signal row) from each window's start to its end."""
        full = np.r_[0.0, np.cumsum(values * width)]
        at = [np.where(inside, full[j] + values[jj] * part, 0.0)
              for inside, j, jj, part in ends]
        return at[1] - at[0]

    for c in cols:
        v = sig[c].astype(float).to_numpy()
        fine = ~np.isnan(v)
        num, den = between(np.where(fine, v, 0.0)), between(fine.astype(float))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(known & (den > 1e-9), num / np.where(den > 0, den, 1.0), np.nan)
        # a flag holds for a window when it holds for most of it; unknown stays unknown
        out[c] = pd.array(np.where(np.isnan(mean), None, mean >= 0.5), dtype="boolean") \
            if c in flags else mean
    return out


def with_signals(rows: pd.DataFrame, signals: pd.DataFrame | None) -> pd.DataFrame:
    """``rows`` with their windows' signal columns added (unchanged when there are none)."""
    import pandas as pd

    if signals is None or not len(signals) or not len(rows):
        return rows
    extra = window_signals(rows, signals)
    out = pd.concat([rows.drop(columns=[c for c in extra.columns if c in rows.columns]),
                     extra], axis=1)
    out.attrs["signals"] = list(extra.columns)  # what the CSV and the clips' JSON carry
    return out


def where_rows(rows: pd.DataFrame, expr: str, source: str) -> pd.DataFrame:
    """The rows that pass ``expr`` (or the preset it names); a bad expression is one line
    naming ``source``, the unknown column or the syntax error."""
    import pandas as pd

    try:
        keep = rows.eval(PRESETS.get(expr.strip(), expr), engine="python")
    except pd.errors.UndefinedVariableError as exc:
        name = str(exc).split("'")[1] if "'" in str(exc) else str(exc)
        raise HowtocapError(f"{source}: --where {expr!r}: no column {name!r}; columns: "
                            f"{', '.join(map(str, rows.columns))}; presets: "
                            f"{', '.join(PRESETS)}") from None
    except SyntaxError as exc:
        raise HowtocapError(f"{source}: --where {expr!r}: syntax error: {exc.msg}") from None
    except Exception as exc:  # a type clash such as text > 1: still the user's expression
        raise HowtocapError(f"{source}: --where {expr!r}: {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not isinstance(keep, pd.Series) or not pd.api.types.is_bool_dtype(keep):
        raise HowtocapError(f"{source}: --where {expr!r} is not a condition (it gives "
                            f"{getattr(keep, 'dtype', type(keep).__name__)}, not true/false)")
    # a row whose window has no signal fails every condition on it, as NULL does in SQL
    return rows[keep.fillna(False).to_numpy(bool)].reset_index(drop=True)
