"""Kept captions rewritten into the imperative a written step uses (issue #40).

"So now I'm going to add two cups of flour." is what the narrator said, "Add two cups of
flour." the step a viewer sees. The parse finds the action verb under the speaker's frame (the
root, or what a frame verb governs through ``xcomp``/``ccomp``); the caption becomes its lemma
and everything it governs after it, in the caption's own words. Only speaker and viewer
clauses are rewritten: another subject, a negation or a non-action verb stays as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from howtocap.caption.filler import (
    META_VERBS,
    SPEAKER_VIEWER,
    SUBJECT_DEPS,
    Judge,
    load_parser,
    parsed,
    reject_reasons,
    verdict,
)

# Verbs that frame the action instead of being it ("I'm going to add", "let's add").
FRAME_VERBS = frozenset([
    "go", "want", "need", "have", "let", "start", "begin", "try", "like", "gon", "wanna",
    "gonna", "continue", "decide", "plan"])
_NOT_ACTIONS = META_VERBS | {"be", "have", "do", "go"}


def _action(doc: Any) -> Any | None:
    """The action verb under the speaker's frame; None when there is none to rewrite."""
    verb = next((t for t in doc if t.dep_ == "ROOT"), None)  # the first sentence's root
    if verb is None:
        return None
    framed = False
    while verb.lemma_.lower() in FRAME_VERBS:
        inner = next((c for c in verb.children if c.dep_ in ("xcomp", "ccomp")
                      and c.pos_ == "VERB"), None)
        if inner is None:
            break
        verb, framed = inner, True
    if verb.pos_ != "VERB" or verb.lemma_.lower() in _NOT_ACTIONS:
        return None
    if any(c.dep_ == "neg" for c in verb.children):
        return None
    subjects = [c for c in verb.children if c.dep_ in SUBJECT_DEPS]
    if any(s.lower_ not in SPEAKER_VIEWER and s.lower_ not in ("'s", "us") for s in subjects):
        return None
    if not subjects and not framed:  # already a step ("Add the onions."), or no clause
        return None
    return verb


def rewrite(doc: Any) -> str:
    """The caption as a step ("Add two cups of flour."), or its text unchanged."""
    verb = _action(doc)
    if verb is None:
        return doc.text
    after = [t for t in verb.subtree if t.i > verb.i]
    while after and (after[-1].is_punct or after[-1].is_space):
        after.pop()
    tail = "".join(t.text_with_ws for t in after).strip()
    lemma = verb.lemma_.lower()
    head = lemma[:1].upper() + lemma[1:]
    return f"{head} {tail}." if tail else f"{head}."


def step(doc: Any) -> tuple[str, str]:
    """The filler verdict and the caption as it stays (rewritten when kept), from one parse."""
    why = verdict(doc)
    return why, (doc.text if why else rewrite(doc))


# Every answer a parse is read for, by the name a ``ParserPool`` worker is asked for it.
JUDGES: dict[str, Judge] = {"verdict": verdict, "imperative": rewrite, "step": step}


def imperatives(texts: Iterable[str], nlp: Any) -> list[str]:
    """``rewrite`` for each caption (one batched parse; in a ``ParserPool``'s processes when
    ``nlp`` is one, so an HTTP run's driver does not parse on its own core)."""
    return [str(t) for t in parsed(texts, nlp, "imperative", rewrite)]


def judge_captions(texts: Iterable[str], nlp: Any | None, *, reject_fillers: bool,
                   imperative: bool) -> tuple[list[str], list[str]]:
    """Each caption's filler verdict ("" = kept; all "" without ``reject_fillers``) and its
    text, the kept ones rewritten into the imperative with ``imperative``: one parse a
    caption for both (``step``), none when both are off (``nlp``: loaded once when None and
    needed)."""
    items = [str(t) for t in texts]
    if not items or not (reject_fillers or imperative):
        return [""] * len(items), items
    nlp = load_parser() if nlp is None else nlp
    if not imperative:
        return reject_reasons(items, nlp), items
    if not reject_fillers:
        return [""] * len(items), imperatives(items, nlp)
    pairs = parsed(items, nlp, "step", step)
    return [str(why) for why, _ in pairs], [str(text) for _, text in pairs]
