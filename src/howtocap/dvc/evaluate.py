"""The dense video captioning protocol of ActivityNet Captions (densevid_eval, 2018 version;
PDVC and Vid2Seq report with it), on YouCook2 or ActivityNet ground truth.

Per tIoU threshold, captions (predictions paired with overlapping ground truth, BLEU/METEOR/
ROUGE-L/CIDEr per video) and segments (recall, precision); the details, including the reference
code's ">" for segments and ">=" for captions that we keep, are in docs/dvc.md. Final scores are
the means over thresholds, fractions in [0, 1] (papers print x100).
"""

from __future__ import annotations

import random
import string
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from howtocap.dvc.data import GroundTruth, Malformed, Segment, parse_ground_truth, parse_predictions
from howtocap.dvc.scoring import Scorers, java_path, tokenize_all
from howtocap.errors import HowtocapError

DEFAULT_TIOUS: tuple[float, ...] = (0.3, 0.5, 0.7, 0.9)
MAX_PROPOSALS = 1000  # per video, as the reference evaluation
CAPTION_METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
METRICS = (*CAPTION_METRICS, "Recall", "Precision")
PROTOCOL = ("densevid_eval (ActivityNet Captions, 2018): per-video mean over ground-truth "
            "videos, unmatched predictions scored against a random string, mean over tIoUs")


def tiou(a: Sequence[float], b: Sequence[float]) -> float:
    """Temporal intersection over union of two [start, end] segments."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = min(max(a[1], b[1]) - min(a[0], b[0]), (a[1] - a[0]) + (b[1] - b[0]))
    return inter / (union + 1e-8)


def caption_pairs(preds: Sequence[Segment], refs: Sequence[Segment],
                  threshold: float) -> list[tuple[int, int | None]]:
    """(prediction index, reference index or None) pairs scored at one threshold: each
    prediction with every reference it overlaps by tIoU >= threshold, else with nothing."""
    pairs: list[tuple[int, int | None]] = []
    for i, p in enumerate(preds):
        hits: list[int | None] = [j for j, r in enumerate(refs) if tiou(p[:2], r[:2]) >= threshold]
        pairs.extend((i, j) for j in hits or [None])
    return pairs


def detection(preds: Sequence[Segment], refs: Sequence[Segment],
              threshold: float) -> tuple[float, float]:
    """(recall, precision) of one video's segments at one threshold (tIoU > threshold)."""
    hits = [(i, j) for i, p in enumerate(preds) for j, r in enumerate(refs)
            if tiou(p[:2], r[:2]) > threshold]
    recall = len({j for _, j in hits}) / len(refs) if refs else 0.0
    precision = len({i for i, _ in hits}) / len(preds) if preds else 0.0
    return recall, precision


def _select_split(gt: GroundTruth, split: str | None) -> dict[str, list[Segment]]:
    if split is None:
        return gt.videos
    if gt.form != "youcook2" or not gt.subsets:
        raise HowtocapError(f"--split {split}: this ground truth has no 'subset' per video "
                            "(ActivityNet Captions ships one file per split: pass that file)")
    chosen = {v: s for v, s in gt.videos.items() if gt.subsets.get(v) == split}
    if not chosen:
        raise HowtocapError(f"--split {split}: no ground-truth video has that subset "
                            f"(subsets: {', '.join(sorted(set(gt.subsets.values())))})")
    return chosen


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def evaluate(pred: dict, gt: dict, tious: Sequence[float] = DEFAULT_TIOUS, *,
             split: str | None = None, meteor: bool = True,
             max_proposals: int = MAX_PROPOSALS, seed: int = 0) -> dict[str, Any]:
    """Dense-captioning scores of ``pred`` against ``gt`` (the JSON forms of ``dvc.data``).

    ``split`` keeps the YouCook2 videos of that subset. ``meteor=False`` skips METEOR (its JVM
    takes seconds to start). The random strings unmatched predictions are scored against come
    from ``seed``, so results repeat. Warnings are also issued as ``UserWarning``.
    """
    if not tious or any(not 0 < t <= 1 for t in tious):
        raise HowtocapError(f"tIoU thresholds must be in (0, 1], got {list(tious)}")
    if max_proposals < 1:
        raise HowtocapError(f"max_proposals must be at least 1, got {max_proposals}")
    try:
        predictions = parse_predictions(pred)
    except Malformed as exc:
        raise HowtocapError(f"predictions: {exc}") from None
    try:
        truth = parse_ground_truth(gt)
    except Malformed as exc:
        raise HowtocapError(f"ground truth: {exc}") from None
    refs = _select_split(truth, split)
    if not refs:
        raise HowtocapError("ground truth has no videos")
    preds = {v: predictions.get(v, [])[:max_proposals] for v in refs}
    notes: list[str] = []
    evaluated = sum(1 for v in refs if preds[v])
    if predictions and not evaluated:
        notes.append(f"none of the {len(predictions)} predicted videos is in the ground truth "
                     f"(e.g. {next(iter(predictions))!r} vs {next(iter(refs))!r}); all scores 0")
    elif evaluated < len(refs):
        notes.append(f"{len(refs) - evaluated} of {len(refs)} ground-truth videos have no "
                     "predictions (scored 0)")

    # Pair captions at every threshold, then tokenise every distinct sentence once.
    rng = random.Random(seed)
    pairs = {t: {v: [(preds[v][i][2], ref[j][2] if j is not None else
                      "".join(rng.choice(string.ascii_lowercase)
                              for _ in range(rng.randint(10, 20))))
                     for i, j in caption_pairs(preds[v], ref, t)]
                 for v, ref in refs.items()} for t in tious}
    sentences = sorted({s for per_t in pairs.values() for ps in per_t.values()
                        for pair in ps for s in pair})
    java = java_path()
    if java is None:
        notes.append(f"java not found: {'METEOR not computed (null), ' if meteor else ''}"
                     "captions tokenised in Python (a PTB approximation); install a JRE, "
                     "e.g. apt-get install default-jre-headless")
    tokens, tokenizer, tok_notes = tokenize_all(sentences, java)
    # "|||" separates fields in METEOR's stdin protocol: never let a caption contain it
    tok = {s: " ".join(t.replace("|||", " ").split())
           for s, t in zip(sentences, tokens, strict=True)}
    notes += tok_notes

    scorers = Scorers(meteor=meteor, java=java)
    per_tiou: dict[str, dict[str, float | None]] = {}
    per_video: dict[str, dict[str, list[float | None]]] = {v: {} for v in refs}
    try:
        for t in tious:
            rows: dict[str, list[float | None]] = {m: [] for m in METRICS}
            for v, ref in refs.items():
                ps = pairs[t][v]
                if ps:  # (reference, prediction) per pair
                    caps = scorers.score({k: [tok[g]] for k, (_, g) in enumerate(ps)},
                                         {k: [tok[p]] for k, (p, _) in enumerate(ps)})
                else:
                    caps = {m: 0.0 for m in CAPTION_METRICS}
                    caps["METEOR"] = 0.0 if scorers.meteor_name else None
                recall, precision = detection(preds[v], ref, t)
                for m, val in {**caps, "Recall": recall, "Precision": precision}.items():
                    rows[m].append(val)
                    per_video[v].setdefault(m, []).append(val)
            at_t = per_tiou[f"{t:g}"] = {m: _mean(vals) for m, vals in rows.items()}
            at_t["F1"] = _f1(float(at_t["Precision"] or 0), float(at_t["Recall"] or 0))
    finally:
        scorers.close()
    notes += scorers.warnings
    if scorers.warnings:  # METEOR failed: partial numbers would mislead
        for row in [*per_tiou.values(), *per_video.values()]:
            row["METEOR"] = None
    scores = {m: _mean([row[m] for row in per_tiou.values()]) for m in METRICS}
    scores["F1"] = _f1(float(scores["Precision"] or 0), float(scores["Recall"] or 0))
    for n in notes:
        warnings.warn(n, UserWarning, stacklevel=2)
    return {
        "protocol": PROTOCOL,
        "tious": [float(t) for t in tious],
        "scores": scores,
        "per_tiou": per_tiou,
        "per_video": {v: {m: _mean(vals) for m, vals in ms.items()}
                      for v, ms in per_video.items()},
        "counts": {"gt_videos": len(refs), "gt_segments": sum(map(len, refs.values())),
                   "pred_videos": len(predictions), "gt_videos_with_predictions": evaluated,
                   "predictions": sum(map(len, preds.values())),
                   "gt_form": truth.form, "split": split, "max_proposals": max_proposals},
        "tokenizer": tokenizer,
        "meteor": scorers.meteor_name if not scorers.warnings else None,
        "warnings": notes,
    }


def _mean(values: Sequence[float | None]) -> float | None:
    """Mean, or ``None`` when any value is missing (METEOR without Java)."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(np.asarray(values, dtype=float)))
