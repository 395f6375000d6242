"""Readers for dense-captioning predictions and ground truth, in the field's own JSON forms.

Predictions: the ActivityNet/PDVC submission form ``{"results": {vid: [{"timestamp": [s, e],
"sentence": str}, ...]}}`` (a bare ``{vid: [...]}`` is accepted too). Ground truth: YouCook2's
release (``{"database": {vid: {"annotations": [{"segment", "sentence"}], "subset", ...}}}``) or
ActivityNet Captions (``{vid: {"duration", "timestamps": [[s, e]], "sentences": [...]}}``).
Both become ``{vid: [(start, end, sentence), ...]}`` so the protocol never sees file formats.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from howtocap.errors import InputError
from howtocap.io.inputs import read_json

Segment = tuple[float, float, str]


class Malformed(ValueError):
    """A structural problem in a prediction or ground-truth dict (turned into a one-line error
    naming the file by the caller)."""


@dataclass
class GroundTruth:
    """Ground-truth segments per video, and which dataset form they came from."""

    videos: dict[str, list[Segment]]
    form: str  # "youcook2" | "activitynet"
    subsets: dict[str, str] = field(default_factory=dict)  # vid -> subset (YouCook2 only)


def _segment(value: Any, where: str) -> tuple[float, float]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise Malformed(f"{where}: expected [start, end] in seconds, got {value!r:.60}")
    s, e = float(value[0]), float(value[1])
    if not (math.isfinite(s) and math.isfinite(e)):
        raise Malformed(f"{where}: start and end must be finite numbers, got {value!r:.60}")
    if e < s:
        raise Malformed(f"{where}: end {e:g} is before start {s:g}")
    return s, e


def _sentence(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{where}: sentence must be a string, got {type(value).__name__}")
    return value


def parse_predictions(data: Any) -> dict[str, list[Segment]]:
    """``{vid: [(start, end, sentence)]}`` from a submission dict, or ``Malformed``."""
    if not isinstance(data, dict):
        raise Malformed(f"expected a JSON object with 'results', got {type(data).__name__}")
    if "results" not in data and not all(isinstance(v, list) for v in data.values()):
        raise Malformed("no 'results' key: expected {\"results\": {vid: [{\"timestamp\": "
                        "[s, e], \"sentence\": ...}]}}")
    results = data.get("results", data)
    if not isinstance(results, dict):
        raise Malformed("'results' must map video ids to lists of "
                        "{\"timestamp\": [s, e], \"sentence\": ...}")
    out: dict[str, list[Segment]] = {}
    for vid, preds in results.items():
        if not isinstance(preds, list):
            raise Malformed(f"results[{vid!r}]: expected a list of predictions, got "
                            f"{type(preds).__name__}")
        segs = []
        for i, p in enumerate(preds):
            where = f"results[{vid!r}][{i}]"
            if not isinstance(p, dict) or "timestamp" not in p or "sentence" not in p:
                raise Malformed(f"{where}: expected {{\"timestamp\": [s, e], \"sentence\": ...}}")
            s, e = _segment(p["timestamp"], where)
            segs.append((s, e, _sentence(p["sentence"], where)))
        out[str(vid)] = segs
    return out


def parse_ground_truth(data: Any) -> GroundTruth:
    """Segments per video from YouCook2 or ActivityNet Captions JSON, or ``Malformed``."""
    if not isinstance(data, dict):
        raise Malformed(f"expected a JSON object, got {type(data).__name__}")
    if "database" in data:
        db = data["database"]
        if not isinstance(db, dict):
            raise Malformed("'database' must map video ids to {\"annotations\": [...], ...}")
        videos: dict[str, list[Segment]] = {}
        subsets: dict[str, str] = {}
        for vid, entry in db.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("annotations"), list):
                raise Malformed(f"database[{vid!r}]: no 'annotations' list")
            segs = []
            for i, ann in enumerate(entry["annotations"]):
                where = f"database[{vid!r}].annotations[{i}]"
                if not isinstance(ann, dict) or "segment" not in ann or "sentence" not in ann:
                    raise Malformed(f"{where}: expected {{\"segment\": [s, e], \"sentence\": ...}}")
                s, e = _segment(ann["segment"], where)
                segs.append((s, e, _sentence(ann["sentence"], where)))
            videos[str(vid)] = segs
            if "subset" in entry:
                subsets[str(vid)] = str(entry["subset"])
        return GroundTruth(videos, "youcook2", subsets)
    videos = {}
    for vid, entry in data.items():
        if (not isinstance(entry, dict) or not isinstance(entry.get("timestamps"), list)
                or not isinstance(entry.get("sentences"), list)):
            raise Malformed("expected YouCook2 JSON ({\"database\": ...}) or ActivityNet "
                            "Captions JSON ({vid: {\"timestamps\": [...], \"sentences\": "
                            f"[...]}}); {vid!r} is neither")
        if len(entry["timestamps"]) != len(entry["sentences"]):
            raise Malformed(f"{vid!r}: {len(entry['timestamps'])} timestamps but "
                            f"{len(entry['sentences'])} sentences")
        videos[str(vid)] = [(*_segment(ts, f"{vid!r}.timestamps[{i}]"),
                             _sentence(sent, f"{vid!r}.sentences[{i}]"))
                            for i, (ts, sent) in enumerate(zip(entry["timestamps"],
                                                               entry["sentences"], strict=True))]
    return GroundTruth(videos, "activitynet")


def _load_checked(path: str | Path, parse: Callable[[Any], object]) -> dict[str, Any]:
    """A JSON file checked now by ``parse``, so a bad entry is one line naming the file."""
    data = read_json(path)
    try:
        parse(data)
    except Malformed as exc:
        raise InputError(path, str(exc)) from None
    return data


def load_predictions(path: str | Path) -> dict[str, Any]:
    """A predictions file ({"results": ...} or a bare {vid: [...]})."""
    return _load_checked(path, parse_predictions)


def load_ground_truth(path: str | Path) -> dict[str, Any]:
    """A ground-truth file (YouCook2 or ActivityNet Captions)."""
    return _load_checked(path, parse_ground_truth)
