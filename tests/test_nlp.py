"""``nlp.RuleIndex``: the attribute ruler's matches found by lookups must be spaCy's Matcher's."""

from __future__ import annotations

from typing import Any

import pytest

from howtocap.errors import HowtocapError
from howtocap.nlp import MODEL_CANDIDATES, RuleIndex, load_spacy
from tests.support.captions import labelled_texts

# What the ruler's exceptions are about: contractions, slang pairs, pronouns, "there is",
# runs of white space (its IS_SPACE rules), odd casing.
TRICKY = [
    "Y'all gon na love this, ain't nothing better.", "C'mon, let's go!", "I'm gonna stir it.",
    "We gotta wait.  Then  stir\n\nagain.", "There is salt and there were eggs.",
    "She'd've done it herself; they're not mine but hers.", "It's   done.\t\tServe.",
    "Don't   overmix it, 'cause it'll be tough.", "ya'll ADD THE SALT", "Whether or not, stir.",
    "  ", "", "U.S. cups vs. metric: 2 c. flour", "i ain't got nothin' left", "let 's mix",
    "then we gon",
]


@pytest.fixture(scope="module")
def pipelines() -> tuple[Any, Any]:
    """The project's parser pipeline (with the index) and the same model as spaCy loads it
    (the Matcher)."""
    import spacy

    try:
        fast = load_spacy(parser=True)
    except HowtocapError:
        pytest.skip("no spaCy English model")
    for cand in MODEL_CANDIDATES:
        try:
            return fast, spacy.load(cand, disable=["ner", "senter"])
        except OSError:
            continue
    raise AssertionError("load_spacy loaded a model spacy.load cannot")


def _attrs(doc: Any) -> list[tuple[str, ...]]:
    return [(t.text, t.tag_, t.pos_, str(t.morph), t.lemma_, t.dep_) for t in doc]


def test_the_index_is_installed_and_gives_the_matchers_tokens(pipelines: tuple[Any, Any]
                                                              ) -> None:
    fast, slow = pipelines
    assert isinstance(fast.get_pipe("attribute_ruler").match, RuleIndex)
    assert not isinstance(slow.get_pipe("attribute_ruler").match, RuleIndex)
    texts = labelled_texts() + TRICKY
    got = [_attrs(d) for d in fast.pipe(texts, batch_size=64)]
    want = [_attrs(d) for d in slow.pipe(texts, batch_size=64)]
    assert got == want


def test_the_index_finds_the_matchers_matches(pipelines: tuple[Any, Any]) -> None:
    """Match for match (before any attribute is set), including the two-token and the
    white-space rules, which some of these texts must hit."""
    fast, _ = pipelines
    ruler = fast.get_pipe("attribute_ruler")
    index = ruler.match
    rules_hit: set[int] = set()
    with fast.select_pipes(disable=["attribute_ruler", "lemmatizer"]):
        docs = list(fast.pipe(labelled_texts() + TRICKY))
    for doc in docs:
        want = sorted(set(type(ruler).match(ruler, doc)))
        assert index(doc) == want, doc.text
        rules_hit |= {m[0] for m in want}
    wide = {i for i, p in enumerate(ruler.patterns) if max(map(len, p["patterns"])) > 1}
    spaces = {i for i, p in enumerate(ruler.patterns)
              if any("IS_SPACE" in tok for pat in p["patterns"] for tok in pat)}
    assert rules_hit & wide and rules_hit & spaces


def test_a_ruler_changed_or_unsupported_keeps_the_matcher() -> None:
    import spacy

    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    ruler.add([[{"LOWER": "stir"}]], {"POS": "VERB"})
    assert RuleIndex.install(ruler)
    ruler.add([[{"LOWER": "eggs"}]], {"POS": "NOUN"})  # added after: must still apply
    doc = nlp("Stir the eggs")
    assert [t.pos_ for t in doc] == ["VERB", "", "NOUN"]
    assert not isinstance(ruler.match, RuleIndex)  # went back to the Matcher

    other = spacy.blank("en").add_pipe("attribute_ruler")
    other.add([[{"LOWER": "stir"}, {"LOWER": "well", "OP": "?"}]], {"POS": "VERB"})
    assert not RuleIndex.install(other)
