"""A CrossTask-format release built from generated videos whose step times we know: the real
videos cannot be downloaded here, so tests and the benchmark write their own release in the exact
file layout. Each task is a few photographs (its steps, named by a short instruction); each
video shows them in canonical order with background photographs between them, sometimes with
two steps swapped or one left out, as real videos do."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from howtocap.errors import HowtocapError
from howtocap.samples import make_narrated_video

# task id, title, [(photograph, step text)] in canonical order
TASKS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("90001", "Go to space", [("astronaut", "put on the space suit"),
                              ("rocket", "launch the rocket"),
                              ("moon", "look at the moon through a telescope"),
                              ("camera", "take a photo with the camera")]),
    ("90002", "Morning at home", [("coffee", "pour coffee into a cup"),
                                  ("chelsea", "brush the cat's fur"),
                                  ("coins", "count and sort the coins"),
                                  ("page", "read the instructions on the page")]),
    ("90003", "A day on the farm", [("brick", "lay bricks in a row"),
                                    ("horse", "lead the horse into the field"),
                                    ("motorcycle_left", "check the motorcycle tires"),
                                    ("retina", "examine the eye image")]),
]
BACKGROUND = ["grass", "gravel", "color", "text", "cell", "hubble_deep_field", "logo",
              "chessboard_RGB", "clock_motion", "phantom"]
_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"


@dataclass
class FixtureVideo:
    task_id: str
    video_id: str
    video_path: Path
    order: list[int]  # canonical step indices in the order they are shown
    segments: list[tuple[int, float, float]] = field(default_factory=list)  # step, start, end
    split: str = "val"


@dataclass
class CrossTaskFixture:
    release: Path
    videos_dir: Path
    videos: list[FixtureVideo]


def _video_id(rng: random.Random, first: str | None = None) -> str:
    """An 11-character YouTube-like id (these may start with ``-`` or ``_``)."""
    body = "".join(rng.choice(_ID_CHARS) for _ in range(10))
    return (first or rng.choice(_ID_CHARS[:-2])) + body


def write_crosstask_release(out_dir: Path | str, *, videos_per_task: int = 2,
                            n_tasks: int = 3, seconds_per_segment: float = 3.0,
                            p_swap: float = 0.3, p_drop: float = 0.2, p_background: float = 0.6,
                            train_per_task: int = 0, size: int = 160, fps: int = 4,
                            seed: int = 0) -> CrossTaskFixture:
    """Write ``out_dir/release`` (CrossTask layout) and ``out_dir/videos`` (``<id>.mp4``): the
    first ``train_per_task`` videos of each task in ``videos.csv`` (with one video of a related,
    unannotated task, as the real release), the rest in ``videos_val.csv``. ``p_*``: chances of a
    background photograph before each step, of two adjacent steps swapped, of one left out.
    """
    if not 1 <= n_tasks <= len(TASKS) or videos_per_task < 1:
        raise HowtocapError(f"n_tasks must be 1..{len(TASKS)} and videos_per_task >= 1")
    rng = random.Random(seed)
    out = Path(out_dir)
    release, vdir = out / "release", out / "videos"
    (release / "annotations").mkdir(parents=True, exist_ok=True)
    vdir.mkdir(parents=True, exist_ok=True)
    videos: list[FixtureVideo] = []
    lines: list[str] = []
    for task_id, title, steps in TASKS[:n_tasks]:
        lines += [task_id, title, f"https://www.wikihow.com/{title.replace(' ', '-')}",
                  str(len(steps)), ",".join(text for _, text in steps), ""]
        for j in range(videos_per_task):
            order = list(range(len(steps)))
            if rng.random() < p_swap:
                i = rng.randrange(len(order) - 1)
                order[i], order[i + 1] = order[i + 1], order[i]
            if rng.random() < p_drop:
                order.pop(rng.randrange(len(order)))
            plan: list[tuple[str, str, str]] = []
            shown: list[tuple[int, int]] = []  # (step, segment index)
            for k in order:
                if rng.random() < p_background:
                    plan.append((rng.choice(BACKGROUND), "background", ""))
                shown.append((k, len(plan)))
                plan.append((steps[k][0], steps[k][1], steps[k][1]))
            if rng.random() < p_background:
                plan.append((rng.choice(BACKGROUND), "background", ""))
            vid = _video_id(rng, "_" if not videos else None)
            sample = make_narrated_video(vdir, vid, plan, seconds_per_step=seconds_per_segment,
                                         fps=fps, size=size, audio=False, subtitles=None,
                                         seed=seed)
            segs = [(k, sample.steps[i].start, sample.steps[i].end) for k, i in shown]
            videos.append(FixtureVideo(task_id, vid, sample.video_path, order, segs,
                                       "train" if j < train_per_task else "val"))
            (release / "annotations" / f"{task_id}_{vid}.csv").write_text(
                "".join(f"{k + 1},{s:.2f},{e:.2f}\n" for k, s, e in segs), encoding="utf-8")
    (release / "tasks_primary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split, name in (("train", "videos.csv"), ("val", "videos_val.csv")):
        rows = [f"{v.task_id},{v.video_id},https://www.youtube.com/watch?v={v.video_id}"
                for v in videos if v.split == split]
        if split == "train":
            rows.append("12345,relatedAbCdE,https://www.youtube.com/watch?v=relatedAbCdE")
        (release / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return CrossTaskFixture(release, vdir, videos)
