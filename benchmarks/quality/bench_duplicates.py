"""Near-duplicate videos and repeated clips (``howtocap duplicates``) on generated videos.

Run: ``.venv/bin/python benchmarks/quality/bench_duplicates.py [--quick]``. Writes
``benchmarks/results/duplicates.json``, ``duplicates.md`` and ``duplicates.png``.

Two sets of generated videos, TUNING (seed 1) and HELD-OUT (seed 2). Each holds distinct
videos: five 2-s shots of real photographs (``howtocap.photos``, with the samples' pan and
zoom), no two videos sharing an ordered pair of consecutive shots (they may share single
photographs: a shared 2-s shot is not a duplicate). Planted among them, made with ffmpeg from
distinct videos with parameters drawn per set: re-encodes (another bitrate), crops (70-90 % of
the frame), resizes (64-112 px instead of 144), trimmed copies (5-7 s of the 10); and repeated
clips: a new video made of 5 s of a distinct video and 5 s of new shots (photographs the source
does not show). Copies get random ids, so the id order tells nothing. The photographs include
look-alikes (two dark speckled micrographs, a blurred clock and a colour chart): distinct
footage that a generic image encoder finds close, as real videos have.

* TUNING: ``duplicates_run`` (the real command, the embedded default encoder) at every
  per-second threshold of the sweep; the threshold is chosen by ``RULE``.
* HELD-OUT: other videos, shots, pans and copy parameters; reported at the chosen threshold
  only. Both sets draw on the same 27 photographs (the only ones that ship in packages).

A video row is right when its video and its ``duplicate_of`` are one planted footage; recall
per kind: the planted copies in their source's group. A clip row is right when it names the
planted pair and its window overlaps the planted one by IoU >= 0.5, or when it joins a planted
copy and its source (a piece of shared footage, though the copy was not seen whole); clip
recall counts only the planted repeated clips.

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

from howtocap.duplicates.config import THRESHOLD, DuplicatesConfig
from howtocap.duplicates.match import keyframes, unit_rows
from howtocap.duplicates.run import candidate_pairs, duplicates_run, find_duplicates
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import VideoItem
from howtocap.photos import packaged_photos
from howtocap.samples import make_narrated_video

TUNING_SEED, HELD_OUT_SEED = 1, 2
THRESHOLDS = [round(float(t), 2) for t in np.arange(0.4, 0.951, 0.05)]
KINDS = ("reencode", "crop", "resize", "trim")
SHOT, SHOTS = 2.0, 5  # seconds per shot, shots per distinct video
SIZE = 144
PHASH_BITS = 10  # Hamming distance (of 64 bits) at which two seconds' pHashes match
# stereo pairs and grey copies of another photograph are not distinct footage
NOT_DISTINCT = ("skimage:chessboard_GRAY", "skimage:motorcycle_right")
RULE = ("the threshold with the best mean of the video F1 and the clip F1 on the tuning set; a "
        "tie goes to the higher threshold (fewer false matches on unseen footage)")


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


def make_set(root: Path, seed: int, n_distinct: int, n_copies: int, n_clips: int
             ) -> dict[str, Any]:
    """The videos of one set and its ground truth."""
    photos = {k: v for k, v in packaged_photos().items() if k not in NOT_DISTINCT}
    pool = sorted(photos)
    rng = random.Random(seed)
    media = root / "media"
    used: set[tuple[str, str]] = set()
    videos: dict[str, Path] = {}
    seqs = _sequences(rng, pool, n_distinct + n_clips, used)

    def make(vid: str, seq: list[str]) -> Path:
        if (media / f"{vid}.mp4").exists():  # --workdir: made by an earlier run
            return media / f"{vid}.mp4"
        return make_narrated_video(media, vid, [(p, p, p) for p in seq], seconds_per_step=SHOT,
                                   fps=5, size=SIZE, audio=False, subtitles=None, seed=seed,
                                   photos=photos).video_path

    for i in range(n_distinct):
        videos[f"v{seed}_{i:02d}"] = make(f"v{seed}_{i:02d}", seqs[i])
    truth_videos: dict[str, tuple[str, str]] = {}  # copy -> (source, kind)
    ids = rng.sample(range(100, 1000), n_copies + n_clips)
    for k in range(n_copies):
        src = f"v{seed}_{k:02d}"
        kind = KINDS[k % len(KINDS)]
        cid = f"x{seed}_{ids[k]}"
        out = media / f"{cid}.mp4"
        if kind == "reencode":
            _ffmpeg("-i", str(videos[src]), *_x264("-b:v", f"{rng.randint(80, 200)}k"),
                    str(out))
        elif kind == "crop":
            f = rng.uniform(0.7, 0.9)
            side = int(SIZE * f) // 2 * 2
            x, y = rng.randint(0, SIZE - side), rng.randint(0, SIZE - side)
            _ffmpeg("-i", str(videos[src]), *_x264("-vf", f"crop={side}:{side}:{x}:{y}"),
                    str(out))
        elif kind == "resize":
            side = rng.randrange(64, 113, 2)
            _ffmpeg("-i", str(videos[src]), *_x264("-vf", f"scale={side}:{side}"), str(out))
        else:
            start = round(rng.uniform(1.0, 3.0), 2)
            length = round(rng.uniform(5.0, 7.0), 2)
            _ffmpeg("-ss", str(start), "-t", str(length), "-i", str(videos[src]), *_x264(),
                    str(out))
        videos[cid] = out
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
        parts = [("-ss", str(start), "-t", "5", "-i", str(videos[src])),
                 ("-t", "5", "-i", str(new))]
        if not first:
            parts.reverse()
        _ffmpeg(*parts[0], *parts[1], "-filter_complex", "[0:v][1:v]concat=n=2:v=1[v]",
                "-map", "[v]", *_x264(), str(media / f"{cid}.mp4"))
        videos[cid] = media / f"{cid}.mp4"
        truth_clips.append({"video": cid, "source": src, "window": (0.0, 5.0) if first
                            else (5.0, 10.0), "source_window": (start, start + 5.0)})
    return {"videos": videos, "truth_videos": truth_videos, "truth_clips": truth_clips}


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

    return {"video": {"rows": len(rows), "right": int(sum(right)), "precision": precision,
                      "planted": len(tv), "found": n_found, "recall": recall,
                      "f1": f1(precision, recall), "per_kind": per_kind,
                      "kept_is_source": (sum(kept_ok) / len(kept_ok)) if kept_ok else None,
                      "false": [f"{v}->{d}" for (v, d), ok in zip(group.items(), right,
                                                                 strict=True) if not ok]},
            "clip": {"rows": len(clip_rows), "right": hits, "precision": c_prec,
                     "planted": len(truth["truth_clips"]), "found": len(matched),
                     "recall": c_rec, "f1": f1(c_prec, c_rec),
                     "false": false_clips[:20]}}


def run_set(root: Path, truth: dict[str, Any], thresholds: list[float]) -> dict[str, Any]:
    rd = RunDir(root / "run")
    rd.record_videos([VideoItem(v, p) for v, p in truth["videos"].items()])
    out: dict[str, Any] = {"videos": len(truth["videos"]),
                           "planted_copies": len(truth["truth_videos"]),
                           "planted_clips": len(truth["truth_clips"]), "sweep": {}}
    cold = not rd.cache_dir.exists()  # else --workdir reused an earlier run's cache
    t0 = time.perf_counter()
    duplicates_run(rd.root, DuplicatesConfig(threshold=thresholds[0]), progress=False)
    out["cold_seconds"] = round(time.perf_counter() - t0, 2) if cold else None
    for t in thresholds:  # warm frame cache from here on
        t0 = time.perf_counter()
        res = duplicates_run(rd.root, DuplicatesConfig(threshold=t), progress=False)
        secs = time.perf_counter() - t0
        ev = evaluate(pd.read_parquet(rd.table_path("duplicates")), truth)
        ev["candidate_pairs"] = res.candidate_pairs
        ev["seconds_warm"] = round(secs, 3)
        out["sweep"][f"{t:.2f}"] = ev
    return out


def choose(sweep: dict[str, Any]) -> float:
    def score(t: str) -> tuple[float, float]:
        ev = sweep[t]
        return ((ev["video"]["f1"] + ev["clip"]["f1"]) / 2, float(t))

    return float(max(sweep, key=score))


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


def report(res: dict[str, Any]) -> list[str]:
    ch = res["chosen_threshold"]
    tun, held = res["tuning"], res["held_out"]
    lines = ["# Duplicates: planted near-duplicate videos and repeated clips", "",
             "Generated by `benchmarks/quality/bench_duplicates.py`"
             f"{' --quick' if res['quick'] else ''}"
             f" ({res['machine']}); encoder `{res['encoder']}`. Rule for the threshold: {RULE}.",
             "", f"Chosen per-second threshold on the tuning set: **{ch:.2f}** (the code's "
             f"default: {res['code_default_threshold']:.2f}).", "",
             "## Held-out set at the chosen threshold", "",
             f"{held['videos']} videos, {held['planted_copies']} planted copies, "
             f"{held['planted_clips']} repeated clips.", "",
             ]
    hv, hc = held["at_chosen"]["video"], held["at_chosen"]["clip"]
    lines += md_table(["kind", "planted", "found", "recall"],
                      [[kind, k["planted"], k["found"], _pct(k["recall"])]
                       for kind, k in hv["per_kind"].items()])
    lines += ["", *md_table(["rows", "precision", "recall", "F1"], [
                  [name, f"{_pct(x['precision'])} ({x['right']}/{x['rows']})", _pct(x["recall"]),
                   f"{x['f1']:.2f}"]
                  for name, x in (("near-duplicate videos", hv), ("repeated clips", hc))]), "",
              f"Kept id is the source (trim, crop, resize): {_pct(hv['kept_is_source'])}. "
              f"False video rows: {', '.join(hv['false']) or 'none'}.", "",
              "## Tuning sweep", "",
              *md_table(["threshold", "video P", "video R", "clip P", "clip R",
                         "candidate pairs"],
                        [[t, _pct(ev["video"]["precision"]), _pct(ev["video"]["recall"]),
                          _pct(ev["clip"]["precision"]), _pct(ev["clip"]["recall"]),
                          ev["candidate_pairs"]] for t, ev in tun["sweep"].items()])]
    lines += ["", "## Time", "",
              f"Real command, held-out set, warm frame cache: "
              f"{held['at_chosen']['seconds_warm']:.2f} s for {held['videos']} videos "
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


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    sweep = res["tuning"]["sweep"]
    ts = [float(t) for t in sweep]
    for key, style in (("video", "-o"), ("clip", "-s")):
        ax[0].plot(ts, [sweep[t][key]["precision"] for t in sweep], style,
                   label=f"{key} precision")
        ax[0].plot(ts, [sweep[t][key]["recall"] for t in sweep], style, alpha=0.5,
                   label=f"{key} recall")
    ax[0].axvline(res["chosen_threshold"], color="grey", ls=":")
    ax[0].set(xlabel="per-second cosine threshold", ylabel="share",
              title="tuning set", ylim=(-0.02, 1.05))
    ax[0].legend(fontsize=7)
    hv = res["held_out"]["at_chosen"]["video"]["per_kind"]
    kinds = list(hv)
    vals = [hv[k]["recall"] or 0 for k in kinds] + \
        [res["held_out"]["at_chosen"]["clip"]["recall"]]
    ax[1].bar([*kinds, "clip"], vals, color="tab:blue")
    ax[1].set(ylim=(0, 1.05), ylabel="recall",
              title=f"held-out at {res['chosen_threshold']:.2f} (video precision "
                    f"{_pct(res['held_out']['at_chosen']['video']['precision'])})")
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
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the md and png from duplicates.json")
    args = ap.parse_args()
    if args.render:
        res = load_results("duplicates")
        res["phash_verdict"] = phash_verdict(res)
        write_results("duplicates", res, report(res), plot=lambda png: plot(res, png))
        return

    n_distinct, n_copies, n_clips = (8, 4, 2) if args.quick else (16, 12, 4)
    res: dict[str, Any] = {"quick": args.quick, "encoder": "default-v1",
                           "machine": machine(torch_threads=True),
                           "load_average_start": list(os.getloadavg()), "rule": RULE,
                           "thresholds": THRESHOLDS, "code_default_threshold": THRESHOLD}
    with tempfile.TemporaryDirectory(prefix="bench-dups-") as tmp_dir:
        tmp = str(args.workdir) if args.workdir else tmp_dir
        sets = {}
        for name, seed in (("tuning", TUNING_SEED), ("held_out", HELD_OUT_SEED)):
            root = Path(tmp) / name
            print(f"making {name} set", file=sys.stderr)
            sets[name] = make_set(root, seed, n_distinct, n_copies, n_clips)
        res["tuning"] = run_set(Path(tmp) / "tuning", sets["tuning"], THRESHOLDS)
        chosen = choose(res["tuning"]["sweep"])
        res["chosen_threshold"] = chosen
        held = run_set(Path(tmp) / "held_out", sets["held_out"], [chosen])
        held["at_chosen"] = held.pop("sweep")[f"{chosen:.2f}"]
        res["held_out"] = held
        print("phash pass", file=sys.stderr)
        res["phash"] = phash_pass(sets["held_out"])
    real = res["held_out"]["at_chosen"]["seconds_warm"] / res["held_out"]["videos"] * 1000
    res["time"] = {"real_per_1000_videos_s": round(real, 2),
                   "synthetic": [time_synthetic(n) for n in
                                 ((1000,) if args.quick else (1000, 10000))]}
    res["phash_verdict"] = phash_verdict(res)
    print(json.dumps(res, indent=1), file=sys.stderr)
    write_results("duplicates", res, report(res), plot=lambda png: plot(res, png))


if __name__ == "__main__":
    main()
