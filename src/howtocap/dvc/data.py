"""Readers for dense-captioning predictions and ground truth, in the field's own JSON forms.

Predictions: the ActivityNet/PDVC submission form ``{"results": {vid: [{"timestamp": [s, e],
"sentence": str}, ...]}}`` (a bare ``{vid: [...]}`` is accepted too). Ground truth: YouCook2's
release (``{"database": {vid: {"annotations": [{"segment", "sentence"}], "subset", ...}}}``) or
ActivityNet Captions (``{vid: {"duration", "timestamps": [[s, e]], "sentences": [...]}}``).
Both become ``{vid: [(start, end, sentence), ...]}`` so the protocol never sees file formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from howtocap.errors import InputError
from howtocap.io.inputs import read_json

Segment = tuple[float, float, str]


class Malformed(ValueError):
    """A structural problem in a prediction or ground-truth dict (the caller names the file)."""


@dataclass
class GroundTruth:
    """Ground-truth segments per video, and which dataset form they came from."""

    videos: dict[str, list[Segment]]
    form: str  # "youcook2" | "activitynet"
    subsets: dict[str, str] = field(default_factory=dict)  # vid -> subset (YouCook2 only)


def _ordered(span: tuple[float, float]) -> tuple[float, float]:
    if span[1] < span[0]:
        raise ValueError(f"end {span[1]:g} is before start {span[0]:g}")
    return span


# [start, end] in seconds: JSON numbers (not true/false, not "1"), finite, end >= start
Seconds = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Span = Annotated[tuple[Seconds, Seconds], AfterValidator(_ordered)]


class Prediction(BaseModel):  # other keys (e.g. a proposal score) are ignored
    timestamp: Span
    sentence: StrictStr


class Annotation(BaseModel):
    segment: Span
    sentence: StrictStr


class YouCook2Video(BaseModel):
    annotations: list[Annotation]
    subset: Any = None


class Step(Annotation):
    """A YouCook2 segment read as a query (``evaluate``) or a step (``tdr``): text, stripped."""

    sentence: Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1)]
    id: StrictInt | None = None
    key_objects: list[StrictStr] | None = None


class StepsVideo(YouCook2Video):
    annotations: list[Step]
    recipe_type: str | int | None = None
    duration: Seconds | None = None


class ActivityNetVideo(BaseModel):
    timestamps: list[Span]
    sentences: list[StrictStr]  # PDVC's test file holds placeholders (["None"]): accepted

    @model_validator(mode="after")
    def _paired(self) -> ActivityNetVideo:
        if len(self.timestamps) != len(self.sentences):
            raise ValueError(f"{len(self.timestamps)} timestamps but {len(self.sentences)} "
                             "sentences")
        return self


def _not_blank(vid: str) -> str:
    if not vid.strip():
        raise ValueError("a video id must not be blank")
    return vid


_VideoId = Annotated[str, AfterValidator(_not_blank)]  # a key a query is made of: kept as written
_PREDICTIONS = TypeAdapter(dict[str, list[Prediction]])
_YOUCOOK2 = TypeAdapter(dict[str, YouCook2Video])
_ACTIVITYNET = TypeAdapter(dict[str, ActivityNetVideo])
_STEPS = TypeAdapter(dict[_VideoId, StepsVideo])


def _checked(adapter: TypeAdapter[Any], data: Any, root: str) -> Any:
    """``adapter``'s value, or ``Malformed`` naming where the first problem is
    (``results['v'][0]['timestamp']: end 1 is before start 5 (got (5.0, 1.0))``)."""
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = root + "".join(f"[{p!r}]" for p in e["loc"])
        raise Malformed(f"{where}: {str(e['msg']).removeprefix('Value error, ')} "
                        f"(got {e['input']!r:.60})") from None


def parse_predictions(data: Any) -> dict[str, list[Segment]]:
    """``{vid: [(start, end, sentence)]}`` from a submission dict, or ``Malformed``."""
    if not isinstance(data, dict):
        raise Malformed(f"expected a JSON object with 'results', got {type(data).__name__}")
    if "results" not in data and not all(isinstance(v, list) for v in data.values()):
        raise Malformed("no 'results' key: expected {\"results\": {vid: [{\"timestamp\": "
                        "[s, e], \"sentence\": ...}]}}")
    results = _checked(_PREDICTIONS, data.get("results", data), "results")
    return {vid: [(*p.timestamp, p.sentence) for p in preds] for vid, preds in results.items()}


def parse_ground_truth(data: Any) -> GroundTruth:
    """Segments per video from YouCook2 or ActivityNet Captions JSON, or ``Malformed``."""
    if not isinstance(data, dict):
        raise Malformed(f"expected a JSON object, got {type(data).__name__}")
    if "database" in data:
        db = _checked(_YOUCOOK2, data["database"], "database")
        return GroundTruth({vid: [(*a.segment, a.sentence) for a in v.annotations]
                            for vid, v in db.items()}, "youcook2",
                           {vid: str(v.subset) for vid, v in db.items() if v.subset is not None})
    for vid, entry in data.items():
        if not isinstance(entry, dict):
            raise Malformed("expected YouCook2 JSON ({\"database\": ...}) or ActivityNet "
                            "Captions JSON ({vid: {\"timestamps\": [...], \"sentences\": "
                            f"[...]}}); {vid!r} is neither")
    videos = _checked(_ACTIVITYNET, data, "")
    return GroundTruth({vid: [(*ts, s) for ts, s in zip(v.timestamps, v.sentences, strict=True)]
                        for vid, v in videos.items()}, "activitynet")


def youcook2_steps(path: Path) -> dict[str, StepsVideo]:
    """The videos of a YouCook2 annotations file (``youcookii_annotations_*.json``), checked;
    a malformed one is one line naming the file and where."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("database"), dict):
        raise InputError(path, 'missing key \'database\' (expected YouCook2 annotations: '
                               '{"database": {video_id: {...}}})')
    try:
        return _checked(_STEPS, data["database"], "database")  # type: ignore[no-any-return]
    except Malformed as exc:
        raise InputError(path, str(exc)) from None


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
