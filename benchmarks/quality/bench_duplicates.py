"""Near-duplicate videos and repeated clips (``howtocap duplicates``) on generated videos.

Run: ``.venv/bin/python benchmarks/quality/bench_duplicates.py [--quick]``. Writes
``benchmarks/results/duplicates.json``, ``duplicates.md`` and ``duplicates.png``.

Two sets of generated videos, TUNING (seed 1) and HELD-OUT (seed 2). Each holds distinct
videos: five 2-s shots of real photographs (``howtocap.photos``, with the samples' pan and
zoom), no two videos sharing an ordered pair of consecutive shots (they may share single
photographs: a shared 2-s shot is not a duplicate). Planted among them, made with ffmpeg from
distinct videos with parameters drawn per set: re-encodes (another bitrate), crops (70-90 % of
the frame), resizes (4/9 to 7/9 of the side), trimmed copies (5-7 s of the 10), the case of
issue #41 (``trim_scale``: up to 10 % cut at each end, half size, CRF 32); repeated clips: a new
video made of 5 s of a distinct video and 5 s of new shots (photographs the source does not
show); and NEGATIVES, pairs of distinct videos (footage of their own) that share an intro (the
same first 2-4 s) or one photograph shown still (2-4 s, first in one, last in the other): not
copies, a repeated clip at most. Copies get random ids, so the id order tells nothing. The
photographs include look-alikes (two dark speckled micrographs, a blurred clock and a colour
chart): distinct footage that a generic image encoder finds close, as real videos have.

* TUNING: the step's ``find_duplicates`` on the run's cached embeddings (the embedded default
  encoder) at every (threshold, cover threshold) of the grid; the pair is chosen by ``RULE``
  before the held-out set is scored.
* HELD-OUT: other videos, shots, pans and copy parameters; reported at the chosen pair only.
  Both sets draw on the same 27 photographs (the only ones that ship in packages).
* Both sets also under today's rule before #41 (``old_coverage``: the matched runs' spans over
  the shorter video, at its defaults), in the same run.

A video row is right when its video and its ``duplicate_of`` are one planted footage; recall
per kind: the planted copies in their source's group. A clip row is right when it names the
planted pair and its window overlaps the planted one by IoU >= 0.5, or when it joins a planted
copy and its source (a piece of shared footage, though the copy was not seen whole), or when
it joins a negative pair inside their shared intro or photograph; clip recall counts only the
planted repeated clips. A negative pair in one group of videos is a false video row.

Timing: the real command per 1,000 videos on the sets (warm frame cache; the embedding itself is
the frames stage's cost, reported beside it), and the k-NN + pair check + grouping alone on
synthetic per-second embeddings (random scenes of a few seconds, 10 % noisy trimmed copies) at
1,000 and 10,000 videos of 60 s: synthetic because generating and embedding 10,000 videos does
not fit this machine; the k-NN's cost depends only on the number of keyframes, which the md
reports.

The perceptual-hash first pass (``imagehash`` pHash of each second's frame, pairs of seconds
within ``PHASH_BITS`` bits as candidates) is measured on the held-out set: its candidates'
recall per kind and its time per video (it must decode every video again: the frame cache
holds embeddings, not pixels).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
import numpy as np
import pandas as pd
from _harness import load_results, machine, md_table, write_results

from howtocap.duplicates.config import COVER_THRESHOLD, THRESHOLD, DuplicatesConfig
from howtocap.duplicates.match import Segment, keyframes, unit_rows
from howtocap.duplicates.run import candidate_pairs, duplicates_run, find_duplicates
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.photos import packaged_photos
from howtocap.samples import make_narrated_video

TUNING_SEED, HELD_OUT_SEED = 1, 2
THRESHOLDS = [round(float(t), 2) for t in np.arange(0.4, 0.951, 0.05)]
COVER_THRESHOLDS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
OLD_DEFAULTS = {"threshold": 0.9, "video_cover": 0.8}  # today's rule's defaults (before #41)
KINDS = ("reencode", "crop", "resize", "trim", "trim_scale")
NEGATIVES = ("intro", "photo")
SHOT, SHOTS = 2.0, 5  # seconds per shot, shots per distinct video
# 288 px: a copy at half size is 144 px, as small as real videos get (at 144-px sources
# the half-size copies were 72 px, which the encoder no longer recognised)
SIZE, FPS = 288, 5
PHASH_BITS = 10  # Hamming distance (of 64 bits) at which two seconds' pHashes match
# stereo pairs and grey copies of another photograph are not distinct footage
NOT_DISTINCT = ("skimage:chessboard_GRAY", "skimage:motorcycle_right")
RULE = ("the (threshold, cover threshold) with the best video F1 on the tuning set (video cover "
        "fixed at 0.8: the issue's target is whole copies); a tie goes to the better clip F1, "
        "then the higher threshold, then the higher cover threshold (fewer false matches on "
        "unseen footage)")


def _ffmpeg(*args: str) -> None:
    if Path(args[-1]).exists():  # --workdir: made by an earlier run (same seed, same file)
        return
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", *args], check=True)


def _x264(*args: str) -> list[str]:
    return [*args, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]


def _sequences(rng: random.Random, pool: list[str], n: int, used: set[tuple[str, str]]
               ) -> list[list[str]]:
    """``n`` shot sequences sharing no ordered pair of consecutive shots with each other."""
    out = []
    while len(out) < n:
        seq = rng.sample(pool, SHOTS)
        pairs = set(zip(seq, seq[1:], strict=False))
        if pairs & used:
            continue
        used |= pairs
        out.append(seq)
    return out


def _concat(parts: list[list[str]], out: Path) -> None:
    """One H.264 video of ``parts`` (each the input options of one ffmpeg input) in order."""
    n = len(parts)
    fit = f"scale={SIZE}:{SIZE}:force_original_aspect_ratio=increase,crop={SIZE}:{SIZE}"
    graph = "".join(f"[{i}:v]{fit},setsar=1,fps={FPS}[p{i}];" for i in range(n)) + \
        "".join(f"[p{i}]" for i in range(n)) + f"concat=n={n}:v=1[v]"
    _ffmpeg(*[a for p in parts for a in p], "-filter_complex", graph, "-map", "[v]", *_x264(),
            str(out))


def _still(photo: Path, seconds: float) -> list[str]:
    """ffmpeg input options of ``photo`` as a still shot (no pan or zoom) of the set's size."""
    return ["-loop", "1", "-framerate", str(FPS), "-t", f"{seconds:g}", "-i", str(photo)]


def _copy(kind: str, src: Path, out: Path, rng: random.Random) -> None:
    """A planted copy of ``src``, its parameters drawn from ``rng``."""
    if kind == "reencode":
        _ffmpeg("-i", str(src), *_x264("-b:v", f"{rng.randint(80, 200)}k"), str(out))
    elif kind == "crop":
        f = rng.uniform(0.7, 0.9)
        side = int(SIZE * f) // 2 * 2
        x, y = rng.randint(0, SIZE - side), rng.randint(0, SIZE - side)
        _ffmpeg("-i", str(src), *_x264("-vf", f"crop={side}:{side}:{x}:{y}"), str(out))
    elif kind == "resize":
        side = rng.randrange(SIZE * 4 // 9, SIZE * 7 // 9 + 1, 2)  # 64-112 px at 144
        _ffmpeg("-i", str(src), *_x264("-vf", f"scale={side}:{side}"), str(out))
    elif kind == "trim":
        start = round(rng.uniform(1.0, 3.0), 2)
        length = round(rng.uniform(5.0, 7.0), 2)
        _ffmpeg("-ss", str(start), "-t", str(length), "-i", str(src), *_x264(), str(out))
    else:  # trim_scale: the case, up to 10 % cut at each end, half size, CRF 32
        total = SHOT * SHOTS
        head, tail = (round(rng.uniform(0.0, 0.1 * total), 2) for _ in range(2))
        _ffmpeg("-ss", str(head), "-t", f"{total - head - tail:.2f}", "-i", str(src),
                *_x264("-vf", f"scale={SIZE // 2}:{SIZE // 2}", "-crf", "32"), str(out))


def make_set(root: Path, seed: int, n_distinct: int, per_kind: int, n_clips: int,
             n_negative: int) -> dict[str, Any]:
    """The videos of one set and its ground truth: ``per_kind`` copies of each kind,
    ``n_clips`` repeated clips and ``n_negative`` pairs of distinct videos per kind of
    ``NEGATIVES`` (footage they share but are not copies of each other)."""
    photos = {k: v for k, v in packaged_photos().items() if k not in NOT_DISTINCT}
    pool = sorted(photos)
    rng = random.Random(seed)
    media = root / "media"
    used: set[tuple[str, str]] = set()
    videos: dict[str, Path] = {}
    n_copies = per_kind * len(KINDS)
    if n_distinct < n_copies + n_clips:
        raise SystemExit("need a distinct video per copy and per repeated clip")
    seqs = _sequences(rng, pool, n_distinct + n_clips + 3 * n_negative * len(NEGATIVES), used)
    fresh_seqs = iter(seqs[n_distinct + n_clips:])

    def make(vid: str, seq: list[str]) -> Path:
        if (media / f"{vid}.mp4").exists():  # --workdir: made by an earlier run
            return media / f"{vid}.mp4"
        return make_narrated_video(media, vid, [(p, p, p) for p in seq], seconds_per_step=SHOT,
                                   fps=FPS, size=SIZE, audio=False, subtitles=None, seed=seed,
                                   photos=photos).video_path

    for i in range(n_distinct):
        videos[f"v{seed}_{i:02d}"] = make(f"v{seed}_{i:02d}", seqs[i])
    truth_videos: dict[str, tuple[str, str]] = {}  # copy -> (source, kind)
    ids = rng.sample(range(100, 1000), n_copies + n_clips + 2 * n_negative * len(NEGATIVES))
    for k in range(n_copies):
        src = f"v{seed}_{k:02d}"
        kind = KINDS[k % len(KINDS)]
        cid = f"x{seed}_{ids[k]}"
        _copy(kind, videos[src], media / f"{cid}.mp4", rng)
        videos[cid] = media / f"{cid}.mp4"
        truth_videos[cid] = (src, kind)
    truth_clips: list[dict[str, Any]] = []
    for k in range(n_clips):
        src = f"v{seed}_{n_copies + k:02d}"  # not a copied video: one truth per footage
        cid = f"x{seed}_{ids[n_copies + k]}"
        # new shots: none of the source's photographs (that would be more shared footage)
        fresh = [p for p in seqs[n_distinct + k] + pool if p not in seqs[n_copies + k]]
        new = make(f"new{seed}_{k}", list(dict.fromkeys(fresh))[:3])
        start = rng.choice([0.0, 2.0, 4.0])
        first = rng.random() < 0.5
        parts = [["-ss", str(start), "-t", "5", "-i", str(videos[src])],
                 ["-t", "5", "-i", str(new)]]
        if not first:
            parts.reverse()
        _concat(parts, media / f"{cid}.mp4")
        videos[cid] = media / f"{cid}.mp4"
        truth_clips.append({"video": cid, "source": src, "window": (0.0, 5.0) if first
                            else (5.0, 10.0), "source_window": (start, start + 5.0)})
    # negatives: two distinct videos (footage of their own, not in the set otherwise) that
    # share an intro (the same first seconds) or one photograph shown still (no pan)
    negatives: list[dict[str, Any]] = []
    next_id = iter(ids[n_copies + n_clips:])
    total = SHOT * SHOTS
    for kind in NEGATIVES:
        for k in range(n_negative):
            shared = round(rng.uniform(2.0, 4.0), 2)
            own_seqs = [next(fresh_seqs) for _ in "ab"]
            own = [make(f"{kind}{seed}_{k}{side}", seq)
                   for side, seq in zip("ab", own_seqs, strict=True)]
            pair = [f"x{seed}_{next(next_id)}" for _ in "ab"]
            if kind == "intro":
                intro = make(f"{kind}{seed}_{k}", next(fresh_seqs))
                for vid, body in zip(pair, own, strict=True):
                    _concat([["-t", f"{shared:g}", "-i", str(intro)],
                             ["-t", f"{total - shared:g}", "-i", str(body)]],
                            media / f"{vid}.mp4")
                windows = [(0.0, shared), (0.0, shared)]
            else:  # a photograph neither video shows otherwise
                photo = rng.choice([p for p in pool if p not in own_seqs[0] + own_seqs[1]])
                still = _still(photos[photo], shared)
                body = [["-t", f"{total - shared:g}", "-i", str(v)] for v in own]
                _concat([still, body[0]], media / f"{pair[0]}.mp4")
                _concat([body[1], still], media / f"{pair[1]}.mp4")
                windows = [(0.0, shared), (total - shared, total)]
            for vid in pair:
                videos[vid] = media / f"{vid}.mp4"
            negatives.append({"kind": kind, "videos": pair, "windows": windows})
    return {"videos": videos, "truth_videos": truth_videos, "truth_clips": truth_clips,
            "negatives": negatives}


def _iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def evaluate(table: pd.DataFrame, truth: dict[str, Any]) -> dict[str, Any]:
    """Precision/recall of the video rows (per kind: recall) and of the clip rows."""
    tv = truth["truth_videos"]
    footage = {v: v for v in truth["videos"]} | {c: s for c, (s, _) in tv.items()}
    rows = table[table["kind"] == "video"]
    group = {v: d for v, d in zip(rows["video_id"], rows["duplicate_of"], strict=True)}
    right = [footage[v] == footage[d] for v, d in group.items()]
    found = {c: group.get(c) == s or group.get(s) == c or
             (c in group and group.get(s) == group[c]) for c, (s, _) in tv.items()}
    per_kind = {}
    for kind in KINDS:
        planted = [c for c, (_, k) in tv.items() if k == kind]
        per_kind[kind] = {"planted": len(planted), "found": sum(found[c] for c in planted),
                          "recall": (sum(found[c] for c in planted) / len(planted))
                          if planted else None}
    kept_ok = [group.get(c) == s for c, (s, k) in tv.items() if k != "reencode" and found[c]]
    n_found = sum(found.values())
    precision = sum(right) / len(right) if right else 1.0
    recall = n_found / len(tv) if tv else 1.0
    clip_rows = table[table["kind"] == "clip"]
    matched, hits, false_clips = set(), 0, []
    for r in clip_rows.itertuples():
        # a piece of a planted copy matched to its source is shared footage too (the copy
        # itself counts as found only when reported as a video)
        ok = footage[r.video_id] == footage[r.duplicate_of]
        for neg in truth["negatives"]:  # their shared intro or photograph is shared footage
            if {r.video_id, r.duplicate_of} == set(neg["videos"]):
                mine = neg["windows"][neg["videos"].index(r.video_id)]
                ok = ok or min(r.end, mine[1]) - max(r.start, mine[0]) > 0
        for i, t in enumerate(truth["truth_clips"]):
            if {r.video_id, r.duplicate_of} != {t["video"], t["source"]}:
                continue
            mine = (r.start, r.end) if r.video_id == t["video"] else (r.dup_start, r.dup_end)
            if _iou(mine, t["window"]) >= 0.5:
                matched.add(i)
                ok = True
        hits += ok
        if not ok:
            false_clips.append(f"{r.video_id}[{r.start:g}-{r.end:g}]->{r.duplicate_of}"
                               f"[{r.dup_start:g}-{r.dup_end:g}]")
    c_prec = hits / len(clip_rows) if len(clip_rows) else 1.0
    c_rec = len(matched) / len(truth["truth_clips"]) if truth["truth_clips"] else 1.0

    def f1(p: float, r: float) -> float:
        return 2 * p * r / (p + r) if p + r else 0.0

    negatives = {}
    for kind in NEGATIVES:
        pairs = [n["videos"] for n in truth["negatives"] if n["kind"] == kind]
        negatives[kind] = {"pairs": len(pairs), "as_video": sum(
            group.get(x) == y or group.get(y) == x or (x in group and group.get(y) == group[x])
            for x, y in pairs)}

    return {"video": {"rows": len(rows), "right": int(sum(right)), "precision": precision,
                      "planted": len(tv), "found": n_found, "recall": recall,
                      "f1": f1(precision, recall), "per_kind": per_kind,
                      "kept_is_source": (sum(kept_ok) / len(kept_ok)) if kept_ok else None,
                      "false": [f"{v}->{d}" for (v, d), ok in zip(group.items(), right,
                                                                 strict=True) if not ok],
                      "missed": [f"{c} ({tv[c][1]})" for c, ok in found.items() if not ok]},
            "clip": {"rows": len(clip_rows), "right": hits, "precision": c_prec,
                     "planted": len(truth["truth_clips"]), "found": len(matched),
                     "recall": c_rec, "f1": f1(c_prec, c_rec),
                     "false": false_clips[:20]},
            "negatives": negatives}


def old_coverage(ea: np.ndarray, eb: np.ndarray, segments: list[Segment], *,
                 threshold: float) -> float:
    """Today's rule before #41, frozen here as the baseline: the matched runs' spans (gaps
    inside them included) over the shorter video; ``threshold`` is not used."""
    if not segments or min(len(ea), len(eb)) == 0:
        return 0.0
    if len(ea) <= len(eb):
        return sum(s.a_len for s in segments) / len(ea)
    return sum(s.b_len for s in segments) / len(eb)


class Loaded:
    """A set's per-second rows, read from its run's frame cache once: each setting of the sweep
    runs the step's own ``find_duplicates`` on them (the command would load the encoder and
    hash every file again for each)."""

    def __init__(self, rd: RunDir, truth: dict[str, Any]) -> None:
        from howtocap.encoders import create
        from howtocap.encoders.cache import frame_embeddings
        from howtocap.io.video import probe

        enc = create("default").frame_encoder
        self.ids = list(truth["videos"])
        fes = [frame_embeddings(Path(truth["videos"][v]), enc, fps=1.0,
                                cache_dir=rd.cache_dir) for v in self.ids]
        self.rows = [unit_rows(fe.emb) for fe in fes]
        self.durations = [fe.duration for fe in fes]
        self.pixels = [probe(truth["videos"][v]).width * probe(truth["videos"][v]).height
                       for v in self.ids]

    def table(self, cfg: DuplicatesConfig, old: bool = False) -> pd.DataFrame:
        """The duplicates table at ``cfg`` (``old``: under today's rule, span coverage)."""
        import howtocap.duplicates.run as step

        keys = [r[keyframes(r, cfg.keyframe_same)].astype(np.float16) for r in self.rows]
        new = step.offset_coverage
        if old:
            step.offset_coverage = old_coverage  # type: ignore[assignment]
        try:
            df, n = find_duplicates(self.ids, keys, lambda i: self.rows[i], self.durations,
                                    lambda i: self.pixels[i], cfg)
        finally:
            step.offset_coverage = new  # type: ignore[assignment]
        df.attrs["candidate_pairs"] = n
        return df


def _score(loaded: Loaded, truth: dict[str, Any], cfg: DuplicatesConfig,
           old: bool = False) -> dict[str, Any]:
    df = loaded.table(cfg, old)
    ev = evaluate(df, truth)
    ev["candidate_pairs"] = df.attrs["candidate_pairs"]
    return ev


def run_set(root: Path, truth: dict[str, Any], grid: list[tuple[float, float]]
            ) -> dict[str, Any]:
    """The set under the new rule at each (threshold, cover threshold) of ``grid``, and under
    today's rule at its defaults; the real command once (cold cache: the embeddings' cost, and
    warm: the command's own time)."""
    rd = RunDir(root / "run")
    rd.record_videos([VideoItem(v, p) for v, p in truth["videos"].items()])
    out: dict[str, Any] = {"videos": len(truth["videos"]),
                           "planted_copies": len(truth["truth_videos"]),
                           "planted_clips": len(truth["truth_clips"]),
                           "negative_pairs": len(truth["negatives"]), "sweep": {}}
    cold = not rd.cache_dir.exists()  # else --workdir reused an earlier run's cache
    t0 = time.perf_counter()
    duplicates_run(rd.root, DuplicatesConfig(threshold=grid[0][0],
                                             cover_threshold=grid[0][1]), progress=False)
    out["cold_seconds"] = round(time.perf_counter() - t0, 2) if cold else None
    t0 = time.perf_counter()
    duplicates_run(rd.root, DuplicatesConfig(threshold=grid[0][0],
                                             cover_threshold=grid[0][1]), progress=False)
    out["seconds_warm"] = round(time.perf_counter() - t0, 3)
    loaded = Loaded(rd, truth)
    for t, c in grid:
        out["sweep"][_key(t, c)] = _score(loaded, truth, DuplicatesConfig(threshold=t,
                                                                          cover_threshold=c))
    out["old_rule"] = _score(loaded, truth, DuplicatesConfig(**OLD_DEFAULTS), old=True)
    return out


def _key(t: float, c: float) -> str:
    return f"{t:.2f}/{c:.2f}"


def choose(sweep: dict[str, Any]) -> str:
    """RULE: the best video F1; ties: the better clip F1, then the higher threshold, then the
    higher cover threshold."""
    def score(k: str) -> tuple[float, float, float, float]:
        ev = sweep[k]
        t, c = (float(x) for x in k.split("/"))
        return (round(ev["video"]["f1"], 6), round(ev["clip"]["f1"], 6), t, c)

    return max(sweep, key=score)


# -- phash first pass ------------------------------------------------------------------------
def phash_pass(truth: dict[str, Any]) -> dict[str, Any]:
    """pHash of each second's frame (decoded again), candidate pairs within PHASH_BITS."""
    import imagehash
    from PIL import Image

    from howtocap.io.video import iter_frames

    t0 = time.perf_counter()
    hashes: dict[str, np.ndarray] = {}
    for vid, path in truth["videos"].items():
        bits = [imagehash.phash(Image.fromarray(img)).hash.flatten()
                for _, img in iter_frames(path, fps=1.0, size=None)]
        hashes[vid] = np.array(bits, dtype=bool)
    secs = time.perf_counter() - t0
    ids = sorted(hashes)
    cands = set()
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            dist = (hashes[a][:, None, :] != hashes[b][None, :, :]).sum(-1)
            if (dist <= PHASH_BITS).any():
                cands.add((a, b))
    tv = truth["truth_videos"]

    def has(x: str, y: str) -> bool:
        return (min(x, y), max(x, y)) in cands

    per_kind = {k: float(np.mean([has(c, s) for c, (s, kk) in tv.items() if kk == k]))
                for k in KINDS if any(kk == k for _, kk in tv.values())}
    clips = float(np.mean([has(t["video"], t["source"]) for t in truth["truth_clips"]])) \
        if truth["truth_clips"] else None
    return {"seconds_per_video": round(secs / len(ids), 4), "candidate_pairs": len(cands),
            "pairs_possible": len(ids) * (len(ids) - 1) // 2,
            "candidate_recall_per_kind": per_kind, "candidate_recall_clips": clips}


# -- synthetic timing ------------------------------------------------------------------------
def synthetic(n: int, seed: int, dim: int = 384, seconds: int = 60
              ) -> tuple[list[str], list[np.ndarray]]:
    """Per-second unit rows of ``n`` videos: scenes of 2-10 s (a random direction + noise per
    second); every tenth video a noisy trimmed copy of the one before."""
    rng = np.random.default_rng(seed)
    vids: list[np.ndarray] = []
    for i in range(n):
        if i % 10 == 9:
            src = vids[-1]
            lo = int(rng.integers(0, seconds // 4))
            rows = src[lo:lo + seconds // 2] + rng.normal(0, 0.02, (seconds // 2, dim))
        else:
            parts, left = [], seconds
            while left > 0:
                length = min(left, int(rng.integers(2, 11)))
                scene = rng.normal(size=dim)
                parts.append(scene + rng.normal(0, 0.15, (length, dim)) * np.linalg.norm(scene)
                             / np.sqrt(dim))
                left -= length
            rows = np.concatenate(parts)
        vids.append(unit_rows(rows.astype(np.float32)))
    return [f"s{i:05d}" for i in range(n)], vids


def time_synthetic(n: int) -> dict[str, Any]:
    ids, rows = synthetic(n, seed=n)
    cfg = DuplicatesConfig(threshold=THRESHOLD)
    t0 = time.perf_counter()
    keys = [r[keyframes(r, cfg.keyframe_same)].astype(np.float16) for r in rows]
    t_key = time.perf_counter() - t0
    n_keys = sum(len(k) for k in keys)
    t0 = time.perf_counter()
    cands = candidate_pairs(keys, cfg)
    t_knn = time.perf_counter() - t0
    t0 = time.perf_counter()
    df, _ = find_duplicates(ids, keys, lambda i: rows[i], [60.0] * n, lambda i: 0, cfg,
                            cands=cands)
    t_all = time.perf_counter() - t0 + t_knn
    planted = n // 10
    found = int(((df["kind"] == "video")).sum())
    return {"videos": n, "seconds_per_video": 60, "keyframes": n_keys,
            "index_mb": round(n_keys * 384 * 4 / 2**20, 1), "candidate_pairs": len(cands),
            "keyframes_s": round(t_key, 3), "knn_s": round(t_knn, 3),
            "knn_check_group_s": round(t_all, 3),
            "per_1000_videos_s": round((t_key + t_all) / n * 1000, 3),
            "planted_copies": planted, "video_rows": found}


# -- report ----------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def _at(sweep: dict[str, Any], key: str) -> list[tuple[str, Any]]:
    """The sweep's rows that share ``key``'s cover threshold (one line of the grid)."""
    c = key.split("/")[1]
    return [(k.split("/")[0], ev) for k, ev in sweep.items() if k.split("/")[1] == c]


def report(res: dict[str, Any]) -> list[str]:
    ch = res["chosen"]
    tun, held = res["tuning"], res["held_out"]
    new, old = held["at_chosen"], held["old_rule"]
    lines = ["# Duplicates: planted near-duplicate videos and repeated clips", "",
             "Generated by `benchmarks/quality/bench_duplicates.py`"
             f"{' --quick' if res['quick'] else ''}"
             f" ({res['machine']}); encoder `{res['encoder']}`; distinct videos of "
             f"{res.get('size', 144)} px, 10 s at {FPS} fps. Rule for the settings: {RULE}.",
             "", f"Chosen on the tuning set: threshold **{ch['threshold']:.2f}**, cover "
             f"threshold **{ch['cover_threshold']:.2f}** (the code's defaults: "
             f"{res['code_default_threshold']:.2f}, {res['code_default_cover_threshold']:.2f})."
             " Today's rule (before #41: a pair is two copies when its matched runs' spans "
             "cover 80 % of the shorter video) is run on the same sets at its defaults "
             f"(threshold {OLD_DEFAULTS['threshold']:.2f}).", "",
             "## Held-out set: today's rule vs the new rule", "",
             f"{held['videos']} videos, {held['planted_copies']} planted copies, "
             f"{held['planted_clips']} repeated clips, {held['negative_pairs']} pairs of "
             "distinct videos sharing an intro or a still photograph.", "",
             *md_table(["rows", "today: precision", "today: recall", "new: precision",
                        "new: recall"],
                       [[name, f"{_pct(o['precision'])} ({o['right']}/{o['rows']})",
                         f"{_pct(o['recall'])} ({o['found']}/{o['planted']})",
                         f"{_pct(n['precision'])} ({n['right']}/{n['rows']})",
                         f"{_pct(n['recall'])} ({n['found']}/{n['planted']})"]
                        for name, o, n in (("near-duplicate videos", old["video"],
                                            new["video"]),
                                           ("repeated clips", old["clip"], new["clip"]))]),
             "", *md_table(["copy", "planted", "today: found", "new: found"],
                           [[kind, k["planted"], k["found"],
                             new["video"]["per_kind"][kind]["found"]]
                            for kind, k in old["video"]["per_kind"].items()]),
             "", *md_table(["distinct pair sharing", "pairs", "today: as one video",
                            "new: as one video"],
                           [[kind, k["pairs"], k["as_video"], new["negatives"][kind]["as_video"]]
                            for kind, k in old["negatives"].items()]),
             "", "`trim_scale` is the issue's case: up to 10 % cut at each end, half size, CRF "
             "32. Kept id is the source (trims, crops, resizes): "
             f"{_pct(new['video']['kept_is_source'])}. False video rows: "
             f"{', '.join(new['video']['false']) or 'none'}; missed copies: "
             f"{', '.join(new['video']['missed']) or 'none'}.", "",
             "## Tuning set", "",
             f"Today's rule: video P/R {_pct(tun['old_rule']['video']['precision'])}/"
             f"{_pct(tun['old_rule']['video']['recall'])}, clip P/R "
             f"{_pct(tun['old_rule']['clip']['precision'])}/"
             f"{_pct(tun['old_rule']['clip']['recall'])}. The new rule at the chosen cover "
             "threshold, by threshold:", "",
             *md_table(["threshold", "video P", "video R", "clip P", "clip R",
                        "candidate pairs"],
                       [[t, _pct(ev["video"]["precision"]), _pct(ev["video"]["recall"]),
                         _pct(ev["clip"]["precision"]), _pct(ev["clip"]["recall"]),
                         ev["candidate_pairs"]]
                        for t, ev in _at(tun["sweep"], res["chosen_key"])]),
             "", "Video F1 / clip F1 over the grid (rows: threshold, columns: cover "
             "threshold):", "",
             *md_table(["threshold", *[f"{c:.2f}" for c in res["cover_thresholds"]]],
                       [[f"{t:.2f}", *[_f1s(tun['sweep'][_key(t, c)])
                                       for c in res["cover_thresholds"]]]
                        for t in res["thresholds"]])]
    lines += ["", "## Time", "",
              f"Real command, held-out set, warm frame cache: "
              f"{held['seconds_warm']:.2f} s for {held['videos']} videos "
              f"({res['time']['real_per_1000_videos_s']:.1f} s per 1,000, loading the encoder "
              f"and hashing each file to find its cache entry included)"
              + (f"; embedding them first (the frames stage's work, cold cache): "
                 f"{held['cold_seconds']:.1f} s." if held["cold_seconds"] is not None else "."),
              "",
              "Synthetic per-second embeddings (60 s videos, 384-d; keyframes + k-NN + pair "
              "check + grouping, no file I/O):", "",
              *md_table(["videos", "keyframes", "index MB", "candidate pairs", "k-NN s",
                         "all s", "s per 1,000 videos"],
                        [[s[k] for k in ("videos", "keyframes", "index_mb", "candidate_pairs",
                                         "knn_s", "knn_check_group_s", "per_1000_videos_s")]
                         for s in res["time"]["synthetic"]])]
    ph = res.get("phash")
    if ph:
        lines += ["", "## Perceptual-hash first pass (measured, not used)", "",
                  f"pHash of every second's frame, pairs within {PHASH_BITS} bits: "
                  f"{ph['seconds_per_video']:.3f} s per video (a second decode), "
                  f"{ph['candidate_pairs']} of {ph['pairs_possible']} pairs kept as "
                  "candidates; recall of the planted pairs among them: "
                  + ", ".join(f"{k} {_pct(v)}" for k, v in
                              ph["candidate_recall_per_kind"].items())
                  + f", clips {_pct(ph['candidate_recall_clips'])}.", "", res["phash_verdict"]]
    return lines


def _f1s(ev: dict[str, Any]) -> str:
    return f"{ev['video']['f1']:.2f} / {ev['clip']['f1']:.2f}"


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    rows = _at(res["tuning"]["sweep"], res["chosen_key"])
    ts = [float(t) for t, _ in rows]
    for key, style in (("video", "-o"), ("clip", "-s")):
        ax[0].plot(ts, [ev[key]["precision"] for _, ev in rows], style,
                   label=f"{key} precision")
        ax[0].plot(ts, [ev[key]["recall"] for _, ev in rows], style, alpha=0.5,
                   label=f"{key} recall")
    ax[0].axvline(res["chosen"]["threshold"], color="grey", ls=":")
    ax[0].set(xlabel="per-second cosine threshold", ylabel="share of rows or planted",
              title=f"tuning set, cover threshold {res['chosen']['cover_threshold']:.2f}",
              ylim=(-0.02, 1.05))
    ax[0].legend(fontsize=7)
    held = res["held_out"]
    kinds = list(held["at_chosen"]["video"]["per_kind"])
    x = np.arange(len(kinds) + 1)
    for shift, (name, ev) in zip((-0.2, 0.2), (("today's rule", held["old_rule"]),
                                              ("new rule", held["at_chosen"])), strict=True):
        vals = [ev["video"]["per_kind"][k]["recall"] or 0 for k in kinds] + \
            [ev["clip"]["recall"]]
        ax[1].bar(x + shift, vals, width=0.4, label=name)
    ax[1].set_xticks(x, [*kinds, "clip"], fontsize=8)
    ax[1].set(ylim=(0, 1.05), ylabel="recall of planted copies and clips",
              title="held-out set: today's rule vs the new rule")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def phash_verdict(res: dict[str, Any]) -> str:
    """Whether the pHash pass helps, in the numbers measured."""
    ph, hv = res["phash"], res["held_out"]["at_chosen"]["video"]["per_kind"]
    lost = [k for k, v in ph["candidate_recall_per_kind"].items()
            if hv[k]["recall"] and v < hv[k]["recall"]]
    step = res["time"]["real_per_1000_videos_s"] / 1000
    return (f"Left out: as a first pass it keeps {ph['candidate_pairs']} of "
            f"{ph['pairs_possible']} pairs (the k-NN proposed "
            f"{res['held_out']['at_chosen']['candidate_pairs']}), "
            + (f"misses planted {', '.join(lost)} copies that the embeddings find, " if lost
               else "")
            + f"and adds {ph['seconds_per_video']:.3f} s per video to decode every video again "
            f"(the frame cache holds embeddings, not pixels), where the whole step takes "
            f"{step:.3f} s per video with a warm cache.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sets, 1,000 synthetic only")
    ap.add_argument("--workdir", type=Path, help="keep the videos and frame cache here (a "
                                                 "re-run reuses them) [default: a temp dir]")
    ap.add_argument("--tuning-only", action="store_true",
                    help="stop after choosing the settings on the tuning set (nothing written)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the md and png from duplicates.json")
    ap.add_argument("--size", type=int, default=SIZE,
                    help="the distinct videos' side in px (the copies scale with it)")
    args = ap.parse_args()
    globals()["SIZE"] = args.size
    if args.render:
        res = load_results("duplicates")
        res["phash_verdict"] = phash_verdict(res)
        write_results("duplicates", res, report(res), plot=lambda png: plot(res, png))
        return

    n_distinct, per_kind, n_clips, n_negative = (12, 2, 2, 1) if args.quick else (25, 4, 3, 2)
    grid = [(t, c) for t in THRESHOLDS for c in COVER_THRESHOLDS]
    res: dict[str, Any] = {"quick": args.quick, "encoder": "default-v1", "size": SIZE,
                           "machine": machine(torch_threads=True),
                           "load_average_start": list(os.getloadavg()), "rule": RULE,
                           "thresholds": THRESHOLDS, "cover_thresholds": COVER_THRESHOLDS,
                           "video_cover": DuplicatesConfig().video_cover,
                           "old_rule_defaults": OLD_DEFAULTS,
                           "code_default_threshold": THRESHOLD,
                           "code_default_cover_threshold": COVER_THRESHOLD}
    with tempfile.TemporaryDirectory(prefix="bench-dups-") as tmp_dir:
        tmp = str(args.workdir) if args.workdir else tmp_dir
        sets = {}
        for name, seed in (("tuning", TUNING_SEED), ("held_out", HELD_OUT_SEED)):
            root = Path(tmp) / name
            print(f"making {name} set", file=sys.stderr)
            sets[name] = make_set(root, seed, n_distinct, per_kind, n_clips, n_negative)
        res["tuning"] = run_set(Path(tmp) / "tuning", sets["tuning"], grid)
        key = choose(res["tuning"]["sweep"])  # fixed before the held-out set is scored
        t, c = (float(x) for x in key.split("/"))
        res["chosen_key"], res["chosen"], res["chosen_threshold"] = \
            key, {"threshold": t, "cover_threshold": c}, t
        print(f"chosen on the tuning set: {key}", file=sys.stderr)
        if args.tuning_only:
            print(json.dumps(res["tuning"]["sweep"][key], indent=1), file=sys.stderr)
            return
        held = run_set(Path(tmp) / "held_out", sets["held_out"], [(t, c)])
        held["at_chosen"] = held.pop("sweep")[key]
        res["held_out"] = held
        print("phash pass", file=sys.stderr)
        res["phash"] = phash_pass(sets["held_out"])
    real = res["held_out"]["seconds_warm"] / res["held_out"]["videos"] * 1000
    res["time"] = {"real_per_1000_videos_s": round(real, 2),
                   "synthetic": [time_synthetic(n) for n in
                                 ((1000,) if args.quick else (1000, 10000))]}
    res["phash_verdict"] = phash_verdict(res)
    print(json.dumps(res, indent=1), file=sys.stderr)
    write_results("duplicates", res, report(res), plot=lambda png: plot(res, png))


if __name__ == "__main__":
    main()
