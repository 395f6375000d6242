"""Reply parsing and block packing: behaviours the mutation check found untested
(benchmarks/robustness/bench_mutation.py; each test names the rule it holds, not the mutant)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pydantic import ValidationError

from howtocap.caption.blocks import Block, make_blocks
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.parse import parse_reply

BLOCK = Block(index=0, start=10.4, end=95.6, text="")


def texts(reply: str, **kw: float) -> list[tuple[float, str]]:
    return [(c.start, c.text) for c in parse_reply(reply, BLOCK, **kw).captions]


def subs(rows: list[tuple[object, object, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["start", "end", "text"])


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# -- parse ------------------------------------------------------------------------------------

def test_slack_widens_the_range_at_both_ends() -> None:
    """block 10.4-95.6: floor/ceil give 10-96; slack 2 admits 8 and 98, not 7 or 99."""
    reply = "7s: Far too early.\n8s: Early.\n98s: Late.\n99s: Far too late."
    res = parse_reply(reply, BLOCK, slack=2.0)
    assert [c.start for c in res.captions] == [8.0, 98.0]
    assert res.n_out_of_range == 2


def test_empty_and_missing_replies_count_nothing() -> None:
    for reply in ("", None):
        res = parse_reply(reply, BLOCK)  # type: ignore[arg-type]
        assert (res.captions, res.n_no_timestamp, res.n_empty, res.n_out_of_range,
                res.n_duplicates) == ([], 0, 0, 0, 0)


def test_every_empty_and_duplicate_caption_is_counted() -> None:
    reply = ("12s:\n13s: -\n14s: ...\n"
             "20s: Whisk the eggs.\n30s: whisk the  eggs\n40s: WHISK THE EGGS!\n50s: Serve.")
    res = parse_reply(reply, BLOCK)
    assert [c.text for c in res.captions] == ["Whisk the eggs.", "Serve."]
    assert res.n_empty == 3 and res.n_duplicates == 2


def test_bold_timestamp_inside_a_line_still_opens_a_caption() -> None:
    assert texts("12s: Stir the sauce. **35s:** Pour it into the bowl.") == [
        (12.0, "Stir the sauce."), (35.0, "Pour it into the bowl.")]


def test_bracketed_timestamp_glued_to_the_text_opens_a_caption() -> None:
    assert texts("12s: Stir the sauce. [35s]Pour it.") == [
        (12.0, "Stir the sauce."), (35.0, "Pour it.")]


def test_a_clock_time_followed_by_punctuation_inside_a_line_is_text() -> None:
    """No bracket and no separator after it: a time mentioned in the sentence, not a stamp."""
    assert texts("20s: Set the timer. 12:30.") == [(20.0, "Set the timer. 12:30.")]


@pytest.mark.parametrize("line, text", [
    # balanced quotes are the caption's own: kept
    ('20s: Add the "secret sauce".', 'Add the "secret sauce".'),
    ('20s: Stir in "a pinch" of salt', 'Stir in "a pinch" of salt'),
    # an odd count: the last quote closes an echoed block and goes, whatever came before
    ('20s: Label it "flour" and serve it warm".', 'Label it "flour" and serve it warm.'),
    ('20s: serve it warm".', "Serve it warm."),
])
def test_quotes_kept_when_balanced_and_a_stray_closing_one_dropped(line: str, text: str) -> None:
    assert texts(line) == [(20.0, text)]


# -- blocks -----------------------------------------------------------------------------------

def test_a_block_holds_exactly_max_words() -> None:
    """Four 10-word sentences with a 20-word limit: two full blocks, not three or four."""
    df = subs([(float(i), float(i) + 1, words(10, f"s{i}w")) for i in range(4)])
    blocks = make_blocks(df, max_words=20)
    assert [len(b.sentences) for b in blocks] == [2, 2]
    assert [b.n_words for b in blocks] == [20, 20]


def test_default_limit_is_200_words() -> None:
    """The paper's 200 words, declared once in ``CaptionConfig`` (make_blocks has no copy)."""
    df = subs([(0, 1, words(100, "a")), (1, 2, words(100, "b")), (2, 3, words(1, "c"))])
    assert [b.n_words for b in make_blocks(df, CaptionConfig().block_words)] == [200, 1]


def test_one_word_blocks_are_allowed() -> None:
    df = subs([(0, 1, "stir"), (1, 2, "pour"), (2, 3, "bake")])
    assert [b.text for b in make_blocks(df, max_words=1)] == ["0s: stir", "1s: pour", "2s: bake"]
    with pytest.raises(ValidationError, match="block_words"):  # the bound lives in the config
        CaptionConfig(block_words=0)


def test_unreadable_times_drop_the_row_or_fall_back_to_the_start() -> None:
    """A non-numeric or missing start drops the sentence (the rest stay); a missing end
    becomes the start, so the block's range never turns NaN."""
    df = subs([(0.0, 1.0, "first"), ("soon", 3.0, "no start"), (None, 4.0, "none either"),
               (5.0, None, "no end"), (6.0, "later", "bad end"), (7.0, 9.0, "last")])
    (block,) = make_blocks(df, 200)
    assert [s.text for s in block.sentences] == ["first", "no end", "bad end", "last"]
    assert [(s.start, s.end) for s in block.sentences] == [
        (0.0, 1.0), (5.0, 5.0), (6.0, 6.0), (7.0, 9.0)]
    assert (block.start, block.end) == (0.0, 9.0) and not math.isnan(block.end)


def test_sentences_with_the_same_start_keep_their_file_order() -> None:
    """64 sentences over 8 start times: ties are many, and the sort must be stable (an
    unstable one reorders ties once a table is past the insertion-sort size)."""
    rows = [(float((i * 7) % 8), float((i * 7) % 8) + 1, f"w{i}") for i in range(64)]
    (block,) = make_blocks(subs(rows), max_words=1000)
    expected = [f"w{i}" for t in range(8) for i in range(64) if (i * 7) % 8 == t]
    assert [s.text for s in block.sentences] == expected


def test_a_caption_ending_in_a_quoted_phrase_keeps_its_closing_quote() -> None:
    assert texts('20s: Add the "secret sauce"') == [(20.0, 'Add the "secret sauce"')]
    assert texts('20s: Add the “secret sauce”.') == [(20.0, 'Add the “secret sauce”.')]
    assert texts('20s: "Add the sauce"') == [(20.0, "Add the sauce")]
    assert texts('20s: "Add the sauce') == [(20.0, "Add the sauce")]
    assert texts("20s: Add the sauce'") == [(20.0, "Add the sauce")]
    assert texts("20s: Stir the cooks' pot") == [(20.0, "Stir the cooks' pot")]
