"""CrossTask step localisation (Zhukov et al. 2019), as the HowTo100M paper evaluates it (§5.2):
every second of a video is scored against every step of its task; the CrossTask inference (a
dynamic program) places each step at one second in canonical order, and recall per task is
correct / annotated steps, averaged over tasks (the official protocol). ``inference=
"independent"`` takes each step's best second alone, for comparison only. The release layout
and the protocol's details are in docs/eval.md."""

from __future__ import annotations

import csv
import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.atomic import atomic_write_text
from howtocap.bundled import cache_root
from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError, InputError
from howtocap.evaluate import CROSSTASK_INFERENCE, CROSSTASK_SPLIT
from howtocap.evaluate.benchmarks import index_videos, read_text
from howtocap.metrics import step_recall

INFERENCE = ("dp", "independent")
SPLITS = {"val": ("videos_val.csv",), "train": ("videos.csv",),
          "all": ("videos.csv", "videos_val.csv")}


@dataclass
class CrossTaskTask:
    task_id: str
    title: str
    url: str
    steps: list[str]


@dataclass
class CrossTaskVideo:
    task_id: str
    video_id: str
    url: str


@dataclass
class CrossTaskRelease:
    """The tasks and the split's videos of primary tasks (others have no annotations)."""

    root: Path
    tasks: dict[str, CrossTaskTask]
    videos: list[CrossTaskVideo]
    other_task_videos: int = 0  # listed videos of related (unannotated) tasks, left out

    def annotation_path(self, video: CrossTaskVideo) -> Path:
        return self.root / "annotations" / f"{video.task_id}_{video.video_id}.csv"


def read_tasks(path: Path | str) -> dict[str, CrossTaskTask]:
    """``tasks_primary.txt``: records of id, title, URL, step count, comma-separated steps."""
    path = Path(path)
    lines = [ln.strip() for ln in read_text(path).splitlines()]
    tasks: dict[str, CrossTaskTask] = {}
    i = 0
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        rec = lines[i:i + 5]
        if len(rec) < 5 or not all(rec):
            raise InputError(path, f"line {i + 1}: a task record needs 5 non-empty lines (id, "
                                   "title, URL, number of steps, steps), found "
                                   f"{sum(1 for r in rec if r)}")
        task_id, title, url, n_txt, steps_txt = rec
        try:
            n = int(n_txt)
        except ValueError:
            raise InputError(path, f"line {i + 4}: number of steps {n_txt!r} is not an "
                                   "integer") from None
        steps = [s.strip() for s in steps_txt.split(",")]
        if n < 1 or len(steps) != n or not all(steps):
            empty = sum(1 for s in steps if not s)
            raise InputError(path, f"line {i + 5}: task {task_id} declares {n} steps but "
                                   f"lists {len(steps)}" + (f" ({empty} empty)" if empty else ""))
        if task_id in tasks:
            raise InputError(path, f"line {i + 1}: task {task_id} appears twice")
        tasks[task_id] = CrossTaskTask(task_id, title, url, steps)
        i += 5
    if not tasks:
        raise InputError(path, "holds no task records")
    return tasks


def _rows(path: Path) -> list[tuple[int, list[str]]]:
    """(1-based line, fields) of a header-less CSV's non-blank rows."""
    rows = enumerate(csv.reader(read_text(path).splitlines()), start=1)
    return [(n, row) for n, row in rows if "".join(row).strip()]


def read_video_list(path: Path | str) -> list[CrossTaskVideo]:
    """``videos.csv`` / ``videos_val.csv``: ``task_id,video_id,url`` rows without a header."""
    path = Path(path)
    out = []
    for n, row in _rows(path):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise InputError(path, f"line {n}: expected task_id,video_id,url, got "
                                   f"{','.join(row)[:80]!r}")
        out.append(CrossTaskVideo(row[0].strip(), row[1].strip(),
                                  row[2].strip() if len(row) > 2 else ""))
    return out


def read_annotation(path: Path | str, n_steps: int) -> np.ndarray:
    """``(n, 3)`` float rows ``step (0-based), start, end`` of one ``<task>_<video>.csv``."""
    path = Path(path)
    rows = []
    for n, row in _rows(path):
        if len(row) != 3:
            raise InputError(path, f"line {n}: expected step,start,end, got {len(row)} fields")
        try:
            step, start, end = int(row[0]), float(row[1]), float(row[2])
        except ValueError:
            raise InputError(path, f"line {n}: step,start,end must be numbers, got "
                                   f"{','.join(row)[:80]!r}") from None
        if not 1 <= step <= n_steps:
            raise InputError(path, f"line {n}: step {step} outside 1..{n_steps} (steps are "
                                   "1-based)")
        if not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end < start:
            raise InputError(path, f"line {n}: bad interval {start:g}..{end:g} s")
        rows.append((step - 1, start, end))
    return np.asarray(rows, np.float64).reshape(-1, 3)


def gt_matrix(segments: np.ndarray, n_seconds: int, n_steps: int) -> np.ndarray:
    """``(n_seconds, n_steps)`` bool: second ``t`` is inside step ``k`` when ``floor(start) <=
    t < ceil(end)`` (CrossTask's rounding; annotations past the video's end are cut)."""
    y = np.zeros((n_seconds, n_steps), bool)
    for k, start, end in np.asarray(segments).reshape(-1, 3):
        y[int(math.floor(start)):int(math.ceil(end)), int(k)] = True
    return y


def read_release(root: Path | str, split: str = CROSSTASK_SPLIT) -> CrossTaskRelease:
    """Tasks and videos of ``split`` (``val``: ``videos_val.csv``, the test set; ``train``;
    ``all``) of a CrossTask release folder, keeping only videos of primary tasks."""
    root = Path(root)
    if split not in SPLITS:
        raise HowtocapError(f"--split must be one of {', '.join(SPLITS)}, not {split!r}")
    if not root.is_dir():
        raise InputError(root, "CrossTask release folder does not exist")
    tasks = read_tasks(root / "tasks_primary.txt")
    listed = [v for name in SPLITS[split] for v in read_video_list(root / name)]
    videos: dict[tuple[str, str], CrossTaskVideo] = {}  # a video listed twice counts once
    for v in listed:
        if v.task_id in tasks:
            videos.setdefault((v.task_id, v.video_id), v)
    if not videos:
        raise InputError(root / SPLITS[split][-1], "lists no video of a task in tasks_primary.txt")
    return CrossTaskRelease(root, tasks, list(videos.values()),
                            sum(v.task_id not in tasks for v in listed))


def dp_inference(scores: np.ndarray) -> np.ndarray:
    """Seconds ``t_0 < t_1 < … < t_{K-1}`` maximising ``sum_k scores[t_k, k]``, in ``O(T·K)``:
    ``best[k][t]`` = the best sum of steps ``0..k`` with step ``k`` at ``t``, from a running
    maximum of ``best[k-1]`` over earlier seconds. Ties go to the earliest seconds."""
    s = np.asarray(scores, np.float64)
    if s.ndim != 2:
        raise HowtocapError(f"scores must be (n_seconds, n_steps), got shape {s.shape}")
    t_len, k_len = s.shape
    if k_len == 0:
        return np.zeros(0, np.int64)
    if t_len < k_len:
        raise HowtocapError(f"{t_len} seconds cannot hold {k_len} steps in order")
    back = np.zeros((k_len, t_len), np.int64)
    best = s[:, 0].copy()
    for k in range(1, k_len):
        # run_arg[t]: the first second <= t where best[:t + 1] is largest
        is_new_max = np.r_[True, best[1:] > np.maximum.accumulate(best)[:-1]]
        run_arg = np.maximum.accumulate(np.where(is_new_max, np.arange(t_len), 0))
        # step k at t needs step k-1 strictly before t
        prev = np.full(t_len, -np.inf)
        prev[1:] = best[run_arg[:-1]]
        back[k, 1:] = run_arg[:-1]
        best = prev + s[:, k]
    out = np.zeros(k_len, np.int64)
    out[-1] = int(np.argmax(best))
    for k in range(k_len - 1, 0, -1):
        out[k - 1] = back[k, out[k]]
    return out


def independent_inference(scores: np.ndarray) -> np.ndarray:
    """Each step's best second on its own (any order; several steps may share a second)."""
    s = np.asarray(scores)
    return s.argmax(axis=0) if s.shape[1] else np.zeros(0, np.int64)


def recall_by_inference(kept: Sequence[tuple[Any, np.ndarray, np.ndarray]],
                        scores: Sequence[np.ndarray] | None = None) -> dict[str, dict[str, Any]]:
    """``step_recall`` of every inference over scored videos (``score_videos``' kept list);
    ``scores`` replace the videos' own (noise, chance and oracle studies)."""
    tasks = [v.task_id for v, _, _ in kept]
    gts = [g for _, _, g in kept]
    own = [s for _, s, _ in kept] if scores is None else scores
    infer = {"dp": dp_inference, "independent": independent_inference}
    return {n: step_recall([infer[n](s) for s in own], gts, tasks) for n in INFERENCE}


def evaluate_crosstask(annotations: Path | str, videos: Path | str | None = None,
                       encoder_name: Any = ENCODER, *, features: Path | str | None = None,
                       inference: str = CROSSTASK_INFERENCE, split: str = CROSSTASK_SPLIT,
                       cache_dir: Path | str | None = None, device: str | None = None,
                       out: Path | str | None = None, progress: bool = True,
                       show: bool = True) -> dict[str, Any]:
    """Step-localisation recall on a CrossTask release; returns (and may write) the result.

    Frames come from the shared per-second frame cache (``cache_dir``, by default the user
    cache), so no run decodes a video twice; with ``features`` none is decoded. A video without
    annotations, video or features, or with a broken file, is one line under ``skipped``.
    """
    from howtocap.encoders import create
    from howtocap.encoders.base import Encoder

    t0 = time.perf_counter()
    if inference not in INFERENCE:
        raise HowtocapError(f"--inference must be one of {', '.join(INFERENCE)}, not {inference!r}")
    if videos is None and features is None:
        raise HowtocapError("crosstask needs --videos DIR (or --features DIR of "
                            "<video_id>.npy at 1 fps)")
    release = read_release(annotations, split)
    feat_dir = Path(features) if features is not None else None
    if feat_dir is not None and not feat_dir.is_dir():
        raise InputError(feat_dir, "features folder does not exist")
    found = index_videos(Path(videos)) if feat_dir is None and videos is not None else {}
    encoder = encoder_name if isinstance(encoder_name, Encoder) \
        else create(str(encoder_name), device=device)
    kept, skipped = score_videos(release, encoder, feat_dir=feat_dir, found=found,
                                 cache_dir=cache_root() if cache_dir is None else Path(cache_dir),
                                 progress=progress)
    if not kept:
        first = skipped[0]["error"] if skipped else "no videos"
        raise HowtocapError(f"no CrossTask video could be evaluated (e.g. {first})")

    by_inf = recall_by_inference(kept)
    main = by_inf[inference]
    n_videos = Counter(v.task_id for v, _, _ in kept)
    other = next(n for n in INFERENCE if n != inference)
    per_task = {t: {"title": release.tasks[t].title, **r, "videos": n_videos[t],
                    "recall_" + other: by_inf[other]["per_task"][t]["recall"]}
                for t, r in main["per_task"].items()}
    result: dict[str, Any] = {
        "benchmark": "crosstask", "annotations": str(annotations),
        "videos": str(videos) if videos is not None else None,
        "features": str(feat_dir) if feat_dir is not None else None,
        "encoder": getattr(encoder, "name", str(encoder_name)),
        "split": split, "inference": inference, "recall": main["recall"],
        "recall_by_inference": {n: r["recall"] for n, r in by_inf.items()},
        "n_tasks": len(per_task), "n_videos": len(kept),
        "n_steps": int(sum(r["steps"] for r in main["per_task"].values())),
        "per_task": per_task,
        "skipped": {"videos": len(skipped), "errors": skipped,
                    "other_task_videos": release.other_task_videos},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if out is not None:
        atomic_write_text(Path(out), json.dumps(result, indent=2) + "\n")
    if show:
        print_crosstask(result)
    return result


def score_videos(release: CrossTaskRelease, encoder: Any, *, feat_dir: Path | None = None,
                 found: dict[str, Path] | None = None, cache_dir: Path | None = None,
                 progress: bool = False
                 ) -> tuple[list[tuple[CrossTaskVideo, np.ndarray, np.ndarray]],
                            list[dict[str, str]]]:
    """``([(video, scores (seconds, steps), gt mask)], skipped)`` for the release's videos:
    cosine similarities of per-second features with the task's step texts."""
    from howtocap.progress import progress_bar

    found = found or {}
    if feat_dir is None and cache_dir is None:
        raise HowtocapError("scoring videos needs a frame cache folder or a features folder")
    step_emb = {t: encoder.encode_texts(task.steps) for t, task in release.tasks.items()}
    skipped: list[dict[str, str]] = []
    kept: list[tuple[CrossTaskVideo, np.ndarray, np.ndarray]] = []  # video, scores, gt
    bar = progress_bar("[bold]crosstask", disable=not progress, transient=True)
    with bar:
        job = bar.add_task("score", total=len(release.videos))
        for v in release.videos:
            bar.advance(job)
            n_steps = len(release.tasks[v.task_id].steps)
            ann = release.annotation_path(v)
            try:
                if not ann.is_file():
                    raise HowtocapError(f"{ann}: no annotation file")
                segments = read_annotation(ann, n_steps)
                frames = _frame_features(v, encoder, feat_dir, found, cache_dir)
                if len(frames) < n_steps:
                    raise HowtocapError(f"{v.video_id}: {len(frames)} s of video cannot hold "
                                        f"the task's {n_steps} steps")
            except Exception as exc:  # noqa: BLE001 - one broken video never sinks the rest
                reason = str(exc) if isinstance(exc, HowtocapError) \
                    else f"{v.video_id}: {type(exc).__name__}: {exc}"
                skipped.append({"task": v.task_id, "video_id": v.video_id,
                                "error": " ".join(reason.split())[:300]})
                continue
            kept.append((v, frames @ step_emb[v.task_id].T,
                         gt_matrix(segments, len(frames), n_steps)))
    return kept, skipped


def _frame_features(video: CrossTaskVideo, encoder: Any, feat_dir: Path | None,
                    found: dict[str, Path], cache_dir: Path | None) -> np.ndarray:
    """Per-second L2-normalised features of one video: ``feat_dir/<id>.npy`` ``(seconds, dim)``
    at 1 fps, or its frames through the frame cache."""
    if feat_dir is not None:
        f = feat_dir / f"{video.video_id}.npy"
        if not f.is_file():
            raise InputError(f, "no features for this video")
        try:
            x = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(f, f"not a readable .npy array ({type(exc).__name__})") from None
        if x.ndim != 2 or x.shape[1] != encoder.dim:
            raise InputError(f, f"features have shape {tuple(x.shape)}; expected "
                                f"(seconds, {encoder.dim}) for this encoder")
        x = x.astype(np.float32)
        if not np.isfinite(x).all():
            raise InputError(f, "features hold NaN or infinite values")
    else:
        path = found.get(video.video_id)
        if path is None:
            raise HowtocapError(f"{video.video_id}: video file not found under the video folder")
        from howtocap.encoders.cache import frame_embeddings

        assert cache_dir is not None
        x = np.asarray(frame_embeddings(path, encoder, fps=1.0, cache_dir=cache_dir).emb,
                       np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def print_crosstask(result: dict[str, Any]) -> None:
    """Per-task recall and the mean, as a rich table (both inferences side by side)."""
    from rich.console import Console
    from rich.table import Table

    inf = result["inference"]
    other = next(n for n in INFERENCE if n != inf)
    table = Table(title=f"crosstask ({result['split']}): {result['n_videos']} videos, "
                        f"{result['n_tasks']} tasks ({result['encoder']})")
    for col in ("task", "title", "videos", "steps", f"recall {inf}", f"recall {other}"):
        table.add_column(col, justify="left" if col in ("task", "title") else "right")
    for t, r in result["per_task"].items():
        table.add_row(t, r["title"][:40], str(r["videos"]), str(r["steps"]),
                      f"{r['recall']:.1f}", f"{r['recall_' + other]:.1f}")
    table.add_row("mean", "", str(result["n_videos"]), str(result["n_steps"]),
                  f"{result['recall']:.1f}", f"{result['recall_by_inference'][other]:.1f}")
    out = Console()
    out.print(table)
    sk = result["skipped"]
    if sk["videos"]:
        out.print(f"[yellow]skipped {sk['videos']} video(s)[/yellow] (reasons in the JSON "
                  "output), e.g. " + sk["errors"][0]["error"], highlight=False)
