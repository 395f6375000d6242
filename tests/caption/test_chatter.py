"""The chatter filter's word prefilter never lets chatter through: every pattern's random
matches (generated from the pattern itself, in random case) are still called chatter, and so
is every ASCII text the full regex flags in a fuzz of words taken from the patterns."""

from __future__ import annotations

import random
import re
from typing import Any

from howtocap.caption import chatter

try:  # Python 3.11+
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as P  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

FILL = "abcdefghijklmnopqrstuvwxyz  ,.!'0123456789"


def _emit(tree: Any, rng: random.Random, out: list[str]) -> None:
    """A random string the parsed pattern ``tree`` may match (anchors emit nothing; what does
    not match after all is filtered out by the caller)."""
    for op, arg in tree:
        if op is C.LITERAL:
            out.append(chr(arg))
        elif op is C.NOT_LITERAL or op is C.ANY:
            ch = rng.choice(FILL)
            out.append("x" if op is C.NOT_LITERAL and ord(ch) == arg else ch)
        elif op is C.IN:
            lits = [chr(a) for o, a in arg if o is C.LITERAL]
            ranges = [chr(rng.randint(*a)) for o, a in arg if o is C.RANGE]
            cats = {a for o, a in arg if o is C.CATEGORY}
            pool = lits + ranges + ([" "] if C.CATEGORY_NOT_WORD in cats else []) \
                + (["7"] if C.CATEGORY_DIGIT in cats else [])
            out.append(rng.choice(pool or [" "]))
        elif op is C.BRANCH:
            _emit(rng.choice(arg[1]), rng, out)
        elif op is C.SUBPATTERN:
            _emit(arg[-1], rng, out)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = arg
            for _ in range(rng.randint(lo, min(hi, lo + 4))):
                _emit(sub, rng, out)
        elif op is C.AT and arg is C.AT_BOUNDARY and out and out[-1].isalnum():
            out.append(" ")


def _sample(pattern: str, rng: random.Random) -> str:
    out: list[str] = []
    _emit(P.parse(pattern, re.IGNORECASE), rng, out)
    text = "".join(out)
    text = "".join(c.upper() if rng.random() < 0.3 else c for c in text)
    return text if pattern.startswith("^") else rng.choice(["", "Now ", "ok, "]) + text


def test_every_pattern_has_a_prefilter_word() -> None:
    for pattern in chatter._PATTERNS:
        forms = {pattern, pattern.replace("'?", "'"), pattern.replace("'?", "")}
        assert any(word.strip() in f for word in chatter._NEEDS for f in forms), pattern


def test_random_matches_of_every_pattern_are_still_chatter() -> None:
    rng = random.Random(22)
    for pattern in chatter._PATTERNS:
        one = re.compile(pattern, re.IGNORECASE)
        hits = [s for s in (_sample(pattern, rng) for _ in range(400)) if one.search(s)]
        assert len(hits) >= 100, (pattern, hits[:3])  # the generator does reach the pattern
        missed = [s for s in hits if not chatter.is_chatter(s)]
        assert not missed, (pattern, missed[:5])


def test_prefilter_agrees_with_the_regex_on_a_word_fuzz() -> None:
    words = sorted({w for p in chatter._PATTERNS for w in re.findall(r"[a-z']+", p)}
                   | {"the", "a", "egg", "bowl", "stir", "Fold", "edge", "x"})
    rng = random.Random(7)
    flagged = 0
    for _ in range(20000):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        text = text.capitalize() + rng.choice([".", "!", "", "?"])
        want = bool(chatter._CHATTER.search(text))
        flagged += want
        assert chatter.is_chatter(text) == want, text
    assert flagged > 1000  # the fuzz does hit chatter, not only plain steps


def test_non_ascii_text_goes_to_the_regex_as_before() -> None:
    # U+017F (long s) matches "s" under IGNORECASE: no ASCII word test may skip it
    assert chatter.is_chatter("\u017fubscribe to the channel")
    assert not chatter.is_chatter("Füge das Salz hinzu.")


def test_a_reply_without_chatter_words_needs_no_check_per_caption() -> None:
    """``may_hold_chatter`` answers for a whole reply: whenever a caption parsed from a reply
    is chatter, the reply was said to may hold it (replies of chatter split by ``**``, extra
    spaces, tabs, list markers, quotes and trailing timestamps included)."""
    from howtocap.caption.blocks import Block
    from howtocap.caption.parse import parse_reply

    rng = random.Random(11)
    block = Block(0, 0.0, 100.0, "")
    steps = ["Crack the eggs.", "Stir the pot", "Fold the edge."]
    seen = 0
    for pattern in chatter._PATTERNS:
        for _ in range(60):
            text = _sample(pattern, rng)
            if rng.random() < 0.5 and len(text) > 3:  # split a word with ** or spaces
                k = rng.randrange(1, len(text) - 1)
                text = text[:k] + rng.choice(["**", "  ", "\t"]) + text[k:]
            lines = [f"{rng.randint(0, 99)}s: {rng.choice(steps)}" for _ in range(3)]
            lines.insert(rng.randint(0, 3), rng.choice(["", "- ", "1. ", "* "])
                         + f"{rng.randint(0, 99)}s: " + rng.choice(['"', ""]) + text
                         + rng.choice(["", " (12s)", '"']))
            reply = rng.choice(["Sure!\n", ""]) + "\n".join(lines)
            caps = parse_reply(reply, block).captions
            if any(chatter.is_chatter(c.text) for c in caps):
                seen += 1
                assert chatter.may_hold_chatter(reply), reply
    assert seen > 500
    assert not chatter.may_hold_chatter("0s: Crack the eggs.\n5s: Stir the pot.")
    assert chatter.may_hold_chatter("0s: Sub\u017fcribe.")  # not ASCII: asked per caption
