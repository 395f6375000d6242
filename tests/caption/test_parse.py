"""Parsing LLM replies into captions: every accepted format, counts, and what is dropped."""

from __future__ import annotations

import math

import pytest

from howtocap.caption.blocks import Block
from howtocap.caption.parse import parse_reply

BLOCK = Block(index=0, start=10.4, end=95.6, text="")


def caps(reply: str, block: Block = BLOCK, **kw: float) -> list[tuple[float, float, str]]:
    return [(c.start, c.end, c.text) for c in parse_reply(reply, block, **kw).captions]


@pytest.mark.parametrize("line, start", [
    ("12s: Crack the eggs.", 12.0),
    ("12 s - Crack the eggs.", 12.0),
    ("[12s] Crack the eggs.", 12.0),
    ("(12 sec) Crack the eggs.", 12.0),
    ("00:12 Crack the eggs.", 12.0),
    ("00:12: Crack the eggs.", 12.0),
    ("* 01:05: Crack the eggs.", 65.0),
    ("0:01:05 - Crack the eggs.", 65.0),
    ("12.5s: Crack the eggs.", 12.5),
    ("1. 12s: Crack the eggs.", 12.0),
    ("2) 12s: Crack the eggs.", 12.0),
    ("- 12s: Crack the eggs.", 12.0),
    ("* [00:12] Crack the eggs.", 12.0),
    ("• 12s: Crack the eggs.", 12.0),
    ("**12s:** Crack the eggs.", 12.0),
    ("At 12s, crack the eggs.", 12.0),
    ("12s-20s: Crack the eggs.", 12.0),
    ("Crack the eggs (12s)", 12.0),
])
def test_timestamp_formats(line: str, start: float) -> None:
    got = caps(line)
    assert len(got) == 1
    s, e, text = got[0]
    assert (s, e) == (start, start + 8.0)
    assert text.rstrip(".") == "Crack the eggs"


def test_never_splits_on_decimal_points_and_handles_several_per_line() -> None:
    reply = ("20s: Add 2.5 cups of flour. Mix it for 1.5 minutes.\n"
             "30s: Stir. 35s: Pour it. 40s: Bake.")
    assert caps(reply) == [
        (20.0, 28.0, "Add 2.5 cups of flour. Mix it for 1.5 minutes."),
        (30.0, 38.0, "Stir."), (35.0, 43.0, "Pour it."), (40.0, 48.0, "Bake.")]


def test_counts_lines_without_timestamp_and_out_of_range() -> None:
    reply = ("Sure! Here is a summary of the video segment:\n\n"
             "10s: Heat the pan.\n"      # floor(10.4) = 10 -> kept
             "96s: Serve it.\n"          # ceil(95.6) = 96 -> kept
             "9s: Too early.\n"
             "97s: Too late.\n"
             "Step 3: whisk the batter\n"
             "I hope this helps!")
    res = parse_reply(reply, BLOCK)
    assert [c.text for c in res.captions] == ["Heat the pan.", "Serve it."]
    assert res.n_no_timestamp == 3
    assert res.n_out_of_range == 2
    assert len(parse_reply("9s: Too early.", BLOCK, slack=2.0).captions) == 1


def test_filler_is_stripped_and_duplicates_dropped() -> None:
    reply = ('1. 12s: "Crack the eggs into the bowl." (12s)\n'
             "2. 20s: crack the eggs into the bowl\n"
             "3. 30s:\n"
             "4. 40s: whisk them (40s).\n"
             '50s: and serve it warm".\n'
             '60s: Say "cheers" to everyone')
    res = parse_reply(reply, BLOCK)
    assert [(c.start, c.text) for c in res.captions] == [
        (12.0, "Crack the eggs into the bowl."), (40.0, "Whisk them"),
        (50.0, "And serve it warm."), (60.0, 'Say "cheers" to everyone')]
    assert res.n_duplicates == 1 and res.n_empty == 1


def test_clip_length_and_unparseable_reply() -> None:
    assert caps("15s: Knead the dough.", clip_seconds=4.0) == [(15.0, 19.0, "Knead the dough.")]
    res = parse_reply("The speaker talks about baking bread.\nIt was fun.", BLOCK)
    assert res.captions == [] and res.n_no_timestamp == 2
    assert parse_reply("", BLOCK).captions == []


def test_fast_line_forms_split_as_the_general_parser() -> None:
    """``_captions`` answers plain ``12s: Text.`` lines (and cleans their usual text) and
    digit-free lines without the general regexes: on lines of every form (markers, quotes,
    ranges, clocks, dashes, non-ASCII, trailing stamps) it gives the same captions as
    ``_split_line`` and ``clean_text``, and the parser's dedupe key is ``norm_text``'s."""
    import random

    from howtocap.caption.parse import (
        _captions,
        _clean_key,
        _split_line,
        clean_text,
        norm_text,
    )

    rng = random.Random(3)
    heads = ["12s:", "0s: ", "12s: ", "12 s:", "007s:", "123456s: ", "12s:-", "12s:|> ", "At 5s,",
             "[12s] ", "(3 sec) ", "00:12 ", "1:02:03 - ", "12s-20s: ", "12.5s: ", "12S: ",
             "", "- ", "* ", "1. ", "Step ", "12s:\t"]
    words = ["add", "the", "eggs", "Stir", "salt,", "pan.", "well!", "2.5", "cups", '"soup"',
             "'tis", "“hot”", "**bold**", "5s:", "(7s)", "[00:09]", "now.", "at", "to", "-",
             "—", "é", "½", "٣s:", "x٣", "9s", ":", ";", "x2", "it's", "?", "|", ">", "_", "`"]
    tails = ["", ".", " (14s)", " [00:20]", "!", "  ", ":", ",", "'", '"', "”"]
    checked = plain = 0
    for _ in range(20000):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(0, 7)))
        line = (rng.choice(heads) + body + rng.choice(tails)).strip()
        if not line:
            continue
        want = [(t, clean_text(p)) for t, p in _split_line(line)]
        got = _captions(line)
        assert got == want, line
        for _, text in got:
            assert _clean_key(text) == norm_text(text), text
        checked += 1
        plain += bool(want) and line[:1].isdigit() and "s:" in line[:7]
    assert checked > 15000 and plain > 1000  # the fuzz reaches both paths



def test_whole_replies_parse_as_line_by_line_through_the_general_parser() -> None:
    """``parse_rows`` reads the usual lines in place and a reply of printable ASCII lines
    with one regex call: on replies of plain lines, of mixed forms (markers, quotes, ``**``,
    clocks, non-ASCII, tabs, CR LF, blank lines, duplicates, stamps out of range) it gives
    the captions and counts that the general steps give line by line."""
    import random

    from howtocap.caption.blocks import Block
    from howtocap.caption.parse import _MARKER, _split_line, clean_text, norm_text

    def reference(reply: str, block: Block) -> tuple[list[tuple[float, str]], list[int]]:
        lo, hi = math.floor(block.start), math.ceil(block.end)
        caps: list[tuple[float, str]] = []
        counts = [0, 0, 0, 0]  # no timestamp, out of range, empty, duplicates
        seen: set[str] = set()
        for raw in reply.splitlines():
            line = _MARKER.sub("", raw.replace("**", "")).strip()
            if not line:
                continue
            found = [(t, clean_text(p)) for t, p in _split_line(line)]
            if not found:
                counts[0] += 1
            for t, text in found:
                if not text:
                    counts[2] += 1
                elif not lo <= t <= hi:
                    counts[1] += 1
                elif norm_text(text) in seen:
                    counts[3] += 1
                else:
                    seen.add(norm_text(text))
                    caps.append((t, text))
        return caps, counts

    rng = random.Random(8)
    plain_words = ["add", "the", "eggs", "Stir", "salt,", "pan.", "well!", "now.", "it's", "?"]
    odd = ['"soup"', "**bold**", "(7s)", "é", "½", "\t", "2.5", "x2", "[00:09]", "`"]
    heads = ["", "- ", "1. ", "* ", "Sure! ", "[12s] ", "00:12 "]
    block = Block(0, 2.0, 40.0, "")
    whole = 0
    for _ in range(4000):
        lines = []
        for _ in range(rng.randint(0, 8)):
            words = rng.choices(plain_words, k=rng.randint(0, 5))
            if rng.random() < 0.2:
                words.append(rng.choice(odd))
            head = f"{rng.randint(0, 50)}s: " if rng.random() < 0.8 else rng.choice(heads)
            lines.append(head + " ".join(words) + rng.choice(["", ".", "  ", " "]))
            if rng.random() < 0.1:
                lines.append(rng.choice(["", "   ", lines[-1]]))  # blank or repeated
        reply = rng.choice(["\n", "\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])
        res = parse_reply(reply, block)
        want, counts = reference(reply, block)
        assert [(c.start, c.text) for c in res.captions] == want, reply
        assert [res.n_no_timestamp, res.n_out_of_range, res.n_empty, res.n_duplicates] == \
            counts, reply
        whole += reply.isascii() and "**" not in reply and \
            reply.replace("\n", "").isprintable()
    assert 500 < whole < 3500  # both the whole-reply path and the line-by-line one

def test_captions_are_the_dataclass_as_its_init_makes_it() -> None:
    """``parse_reply`` sets a caption's fields at once: still equal, hashed, printed and
    frozen as one ``ParsedCaption.__init__`` made."""
    import dataclasses

    from howtocap.caption.parse import ParsedCaption

    res = parse_reply("0s: Crack the eggs.\n4s: Whisk them.", Block(0, 0.0, 9.0, ""), 8.0)
    want = [ParsedCaption(0.0, 8.0, "Crack the eggs."), ParsedCaption(4.0, 12.0, "Whisk them.")]
    assert res.captions == want and [hash(c) for c in res.captions] == [hash(c) for c in want]
    assert [repr(c) for c in res.captions] == [repr(c) for c in want]
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.captions[0].text = "x"  # type: ignore[misc]
