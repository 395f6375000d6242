"""Signals benchmark: does each visual signal of ``howtocap signals`` single out the kind of
video it is meant for, and what does each cost against decoding alone?

Planted videos (``tests/support/signal_videos.py``, real photographs from scikit-image, H.264): text
slides, a talking head (the astronaut's portrait swaying slightly), a still photograph, a black
screen, a blurred shot drifting slowly, and moving footage (a fast pan and zoom). Each is scored
in fixed windows by the real stage (``SignalsStage``: PP-OCR text detection, BlazeFace), and
each signal's separation is the ROC AUC of its value for its planted kind against every other
window (1 = every planted window ranks above every other). ``static`` (a bool) gets precision
and recall for slides + stills + black.

Cost: each video is decoded once more at the stage's sampling rate (decoding alone, the
baseline), then each measure is timed on those frames; reported as seconds per video minute.

Writes benchmarks/results/signals.{json,md,png}. ``--quick``: one video per kind.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo: tests.support
import numpy as np
import pandas as pd
from _harness import load_avg, machine, md_table, write_results
from sklearn.metrics import roc_auc_score
from tests.support.signal_videos import KINDS, make

from howtocap.engine.stage import VideoInput
from howtocap.io.inputs import VideoItem
from howtocap.io.video import iter_frames
from howtocap.io.where import PRESETS, where_rows
from howtocap.signals.config import SignalsConfig
from howtocap.signals.measure import luma, motion, sharpness
from howtocap.signals.stage import SignalsStage

SECONDS = 8.0  # per planted video
SIZE = (640, 360)  # a 360p video: the stage's default frame size, so nothing is scaled
FPS = 25
CFG = SignalsConfig(window_seconds=4.0)  # 2 windows per video; the stage's other defaults

# signal -> (the planted kinds it should single out, the sign that ranks them first)
TARGETS: dict[str, tuple[tuple[str, ...], int]] = {
    "text_area": (("slides",), 1),
    "face_area": (("talking_head",), 1),
    "motion": (("moving",), 1),
    "brightness": (("black",), -1),  # dark first
    "sharpness": (("blurred", "black"), -1),  # no detail first (a black frame has none either)
}
STATIC = ("slides", "still", "black")
# --where presets (howtocap.io.where.PRESETS) -> the planted kinds each is meant to leave out
PRESET_DROPS = {"visible": ("black", "blurred"), "no-slides": ("slides", "still", "black"),
                "no-talking-head": ("talking_head",),
                "footage": ("slides", "still", "black", "blurred", "talking_head")}
HELD_OUT_SEEDS = 100  # held-out videos draw seeds from here: never seen when the bars were set


def score(stage: SignalsStage, videos: dict[tuple[str, int], Path]) -> pd.DataFrame:
    rows = []
    for (kind, seed), path in videos.items():
        out = stage.process(VideoInput(VideoItem(f"{kind}-{seed}", path)))
        t = out.tables["signals"].assign(kind=kind, seed=seed)
        rows.append(t)
    return pd.concat(rows, ignore_index=True)


def separation(table: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sig, (kinds, sign) in TARGETS.items():
        y = table["kind"].isin(kinds).to_numpy()
        v = sign * table[sig].fillna(0).to_numpy()
        planted, rest = table.loc[y, sig], table.loc[~y, sig]
        out[sig] = {"planted": "+".join(kinds), "auc": round(float(roc_auc_score(y, v)), 4),
                    "planted_median": round(float(planted.median()), 5),
                    "rest_max" if sign > 0 else "rest_min":
                        round(float(rest.max() if sign > 0 else rest.min()), 5)}
    y = table["kind"].isin(STATIC).to_numpy()
    got = table["static"].to_numpy(bool)
    tp = int((got & y).sum())
    out["static"] = {"planted": "+".join(STATIC),
                     "precision": round(tp / max(1, int(got.sum())), 4),
                     "recall": round(tp / max(1, int(y.sum())), 4)}
    return out


def preset_scores(table: pd.DataFrame) -> dict[str, Any]:
    """Each preset's precision and recall as a filter that leaves out its planted kinds,
    window by window."""
    out = {}
    for name, drops in PRESET_DROPS.items():
        kept = where_rows(table.reset_index(drop=True).assign(_row=range(len(table))), name,
                          "bench")
        dropped = ~np.isin(np.arange(len(table)), kept["_row"].to_numpy())
        y = table["kind"].isin(drops).to_numpy()
        tp = int((dropped & y).sum())
        out[name] = {"condition": PRESETS[name], "drops": "+".join(drops),
                     "precision": round(tp / max(1, int(dropped.sum())), 4),
                     "recall": round(tp / max(1, int(y.sum())), 4),
                     "windows_dropped": int(dropped.sum()), "windows_to_drop": int(y.sum())}
    return out


def costs(stage: SignalsStage, videos: dict[tuple[str, int], Path]) -> dict[str, float]:
    """Seconds per video minute: decoding at the stage's rate (the baseline), then each
    measure on the decoded frames (text and face on every ``detect_every``-th frame)."""
    cfg = stage.cfg
    spent = dict.fromkeys(("decode", "brightness+sharpness", "motion", "text_area",
                           "face_area"), 0.0)
    minutes = 0.0
    for path in videos.values():
        t0 = time.perf_counter()
        frames = [f.copy() for _, f in iter_frames(path, fps=cfg.fps, size=cfg.frame_size,
                                                   fit=True)]
        spent["decode"] += time.perf_counter() - t0
        minutes += len(frames) / cfg.fps / 60
        t0 = time.perf_counter()
        grays = [luma(f) for f in frames]
        for g in grays:
            float(g.mean()), sharpness(g)
        spent["brightness+sharpness"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for a, b in zip(grays[:-1], grays[1:], strict=True):
            motion(a, b)
        spent["motion"] += time.perf_counter() - t0
        picked = frames[::cfg.detect_every]
        t0 = time.perf_counter()
        for f in picked:
            stage._text.area(f)
        spent["text_area"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for f in picked:
            stage._faces.largest_area(f)
        spent["face_area"] += time.perf_counter() - t0
    return {k: round(v / minutes, 3) for k, v in spent.items()}


def report(res: dict[str, Any]) -> list[str]:
    sep, cost = res["separation"], res["seconds_per_video_minute"]
    lines = [f"# Signals on planted videos ({res['videos_per_kind']} per kind, "
             f"{res['seconds']:.0f} s each, {res['windows']} windows of "
             f"{res['window_seconds']:.0f} s)", "", f"Machine: {res['machine']}", "",
             "Separation: ROC AUC of each signal for its planted kind against every other "
             "window (1 = perfect).", ""]
    lines += md_table(["signal", "planted kind", "AUC", "planted median", "others' extreme"],
                      [[s, v["planted"], f"{v['auc']:.3f}", v["planted_median"],
                        v.get("rest_max", v.get("rest_min"))]
                       for s, v in sep.items() if s != "static"], "llrrr")
    st = sep["static"]
    lines += ["", f"`static` (motion < {res['static_motion']}) for {st['planted']}: precision "
              f"{st['precision']:.2f}, recall {st['recall']:.2f}.", "",
              f"Cost, seconds per video minute (frames at {res['fps']} fps, detectors at "
              f"{res['detect_fps']} fps, {SIZE[1]}p):", ""]
    lines += md_table(["part", "s / video min", "x decoding"],
                      [[k, f"{v:.2f}", f"{v / cost['decode']:.2f}"] for k, v in cost.items()],
                      "lrr")
    lines += ["", f"The whole stage, end to end: {res['stage_seconds_per_video_minute']:.2f} s "
                  "per video minute.", "",
              "`--where` presets as filters that leave out their planted kinds, per window; "
              "the bars were set on the videos above, these are "
              f"{res['videos_per_kind']} more per kind (other seeds):", ""]
    lines += md_table(["preset", "condition", "leaves out", "precision", "recall"],
                      [[k, f"`{v['condition']}`", v["drops"], f"{v['precision']:.2f}",
                        f"{v['recall']:.2f}"] for k, v in res["presets"].items()], "lllrr")
    return lines


def plot(res: dict[str, Any]) -> Any:
    def draw(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sep = {k: v for k, v in res["separation"].items() if k != "static"}
        cost = res["seconds_per_video_minute"]
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
        a.bar(list(sep), [v["auc"] for v in sep.values()], color="#4c72b0")
        a.set_ylim(0, 1.05)
        a.axhline(0.5, color="grey", lw=0.8, ls="--")
        a.set_ylabel("ROC AUC (0.5 = chance)")
        a.set_title("Each signal: its planted kind vs every other window")
        a.tick_params(axis="x", labelsize=8)
        b.barh(list(cost), list(cost.values()), color="#55a868")
        b.set_xlabel("seconds per video minute")
        b.set_title("Cost of each part (decode = the baseline)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return draw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one video per kind")
    args = ap.parse_args()
    per_kind = 1 if args.quick else 3
    load0 = load_avg()
    stage = SignalsStage(CFG)
    stage.setup()
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as tmp:
        videos = {(k, s): make(Path(tmp), k, seconds=SECONDS, w=SIZE[0], h=SIZE[1], fps=FPS,
                               seed=s, name=f"{k}-{s}")
                  for k in KINDS for s in range(per_kind)}
        t0 = time.perf_counter()
        table = score(stage, videos)
        stage_s = time.perf_counter() - t0
        cost = costs(stage, videos)
        held = {(k, s): make(Path(tmp), k, seconds=SECONDS, w=SIZE[0], h=SIZE[1], fps=FPS,
                             seed=s, name=f"{k}-{s}")
                for k in KINDS for s in range(HELD_OUT_SEEDS, HELD_OUT_SEEDS + per_kind)}
        held_table = score(stage, held)
    minutes = len(videos) * SECONDS / 60
    res = {"machine": machine(), "load_avg": [load0, load_avg()], "quick": args.quick,
           "videos_per_kind": per_kind, "kinds": list(KINDS), "seconds": SECONDS,
           "size": list(SIZE), "window_seconds": CFG.window_seconds, "windows": len(table),
           "fps": CFG.fps, "detect_fps": CFG.detect_fps, "static_motion": CFG.static_motion,
           "separation": separation(table), "seconds_per_video_minute": cost,
           "stage_seconds_per_video_minute": round(stage_s / minutes, 3),
           "presets": preset_scores(held_table),
           "presets_tuning": preset_scores(table),
           "medians_by_kind": table.groupby("kind")[[*TARGETS]].median().round(5)
           .to_dict(orient="index")}
    write_results("signals", res, report(res), plot=plot(res))


if __name__ == "__main__":
    main()
