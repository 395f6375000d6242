"""Block packing and prompt building (no model needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from howtocap.caption.blocks import make_blocks
from howtocap.caption.config import CaptionConfig
from howtocap.caption.prompt import PAPER_PROMPT, build_messages, load_template, resolve_template
from howtocap.errors import HowtocapError, InputError


def subs(rows: list[tuple[float, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["start", "end", "text"])


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_every_line_of_every_block_has_its_timestamp() -> None:
    df = subs([(float(10 * i) + 0.7, float(10 * i) + 9, words(30, f"s{i}w")) for i in range(10)])
    blocks = make_blocks(df, max_words=100)
    assert len(blocks) == 4  # 3 sentences (90 words) fit, the 4th would make 120
    for b in blocks:
        lines = b.text.split("\n")
        assert len(lines) == len(b.sentences)
        for line, sent in zip(lines, b.sentences, strict=True):
            assert re.fullmatch(rf"{int(sent.start)}s: {re.escape(sent.text)}", line)
    assert blocks[1].text.startswith("30s: s3w0")  # first sentence of a later block too


def test_word_limit_and_block_time_range() -> None:
    df = subs([(float(i), float(i) + 1.5, words(7, "w")) for i in range(20)])
    blocks = make_blocks(df, max_words=20)
    assert [b.n_words for b in blocks] == [14] * 10
    assert all(b.n_words <= 20 for b in blocks)
    assert blocks[0].start == 0.0 and blocks[0].end == 2.5
    assert [b.index for b in blocks] == list(range(10))


def test_long_sentence_gets_its_own_block() -> None:
    df = subs([(0, 1, "short one"), (1, 5, words(250, "x")), (5, 6, "after it")])
    blocks = make_blocks(df, max_words=200)
    assert [len(b.sentences) for b in blocks] == [1, 1, 1]
    assert blocks[1].n_words == 250 and blocks[1].text.startswith("1s: x0 x1")


WORDS = CaptionConfig().block_words  # the default, declared once there


def test_unsorted_rows_blank_text_and_bad_tables() -> None:
    df = subs([(20, 22, "second"), (3.9, 5, "first"), (8, 9, "   "), (9, 10, None)])
    (block,) = make_blocks(df, WORDS)
    assert block.text == "3s: first\n20s: second"
    assert make_blocks(subs([]), WORDS) == []
    with pytest.raises(HowtocapError, match="lacks columns"):
        make_blocks(pd.DataFrame({"start": [1.0]}), WORDS)
    with pytest.raises(ValidationError, match="block_words"):  # the bound lives in the model
        CaptionConfig(block_words=0)


def test_paper_prompt_is_the_papers_and_holds_the_block() -> None:
    (block,) = make_blocks(subs([(0, 4, "take the flour"), (4, 8, "add an egg")]), WORDS)
    msgs = build_messages(block, "paper")
    assert msgs == [{"role": "user", "content": PAPER_PROMPT.replace("{asr}", block.text)}]
    content = msgs[0]["content"]
    assert content.startswith("I will give you an automatically recognized speech with "
                              "timestamps from a video segment that is cut from a long video.")
    assert "Begin each sentence with an estimated timestamp." in content
    assert "0s: take the flour\n4s: add an egg" in content


def test_template_files(tmp_path: Path) -> None:
    (block,) = make_blocks(subs([(0, 4, "take the flour")]), WORDS)
    txt = tmp_path / "t.txt"
    txt.write_text("Summarise:\n<block>\nDone.")
    assert build_messages(block, load_template(txt))[0]["content"] == \
        "Summarise:\n0s: take the flour\nDone."
    yml = tmp_path / "t.yaml"
    yml.write_text("system: be brief\nprompt: 'ASR: {asr}'\n"
                   "examples:\n  - ['1s: hi', '1s: Wave.']\n")
    msgs = build_messages(block, str(yml))
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[1]["content"] == "ASR: 1s: hi" and msgs[-1]["content"] == "ASR: 0s: take the flour"
    assert resolve_template("fewshot").examples  # built-in few-shot template ships
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder here")
    with pytest.raises(InputError, match=r"bad\.txt: prompt template has no placeholder"):
        load_template(bad)
    with pytest.raises(InputError, match="missing.txt: prompt template file not found"):
        resolve_template(str(tmp_path / "missing.txt"))
    broken = tmp_path / "b.yaml"
    broken.write_text("prompt: [unclosed")
    with pytest.raises(InputError, match="invalid YAML"):
        load_template(broken)


def test_every_builtin_template_renders_with_examples_in_caption_format() -> None:
    """Shipped templates (actions, concise, fewshot) load, hold the block, and their worked
    answers parse as captions: a broken example would teach the model a broken format."""
    from howtocap.caption.parse import parse_reply
    from howtocap.caption.prompt import BUILTIN

    subs = pd.DataFrame({"start": [0.0, 4.0], "end": [4.0, 8.0],
                         "text": ["take the flour", "pour the milk"]})
    block = make_blocks(subs, 200)[0]
    assert {"actions", "concise", "fewshot"} <= set(BUILTIN)
    for name in BUILTIN:
        tpl = resolve_template(name)
        msgs = build_messages(block, name)
        assert "0s: take the flour" in msgs[-1]["content"], name
        assert tpl.examples, name
        for asr, answer in tpl.examples:
            ex = pd.DataFrame({"start": [float(line.split("s:", 1)[0])
                                         for line in asr.splitlines()],
                               "text": [line.split(": ", 1)[1] for line in asr.splitlines()]})
            ex["end"] = ex["start"] + 4
            ex_block = make_blocks(ex, 400)[0]
            caps = parse_reply(answer, ex_block, 8.0, 10.0).captions
            assert len(caps) == len(answer.splitlines()), (name, answer)


def test_every_builtin_template_puts_the_block_last_so_its_prompt_prefix_is_reused() -> None:
    """llama.cpp reuses the cached prompt up to the first token that differs. With the block
    at the end (rules first, as in the paper's prompt) every block after the first re-reads
    only itself: 8.8 vs 11.8 s per block for `actions` (benchmarks/results/llm.md)."""
    from howtocap.caption.prompt import TEMPLATE_NAMES

    def one(name: str, text: str) -> list[dict[str, str]]:
        block = make_blocks(pd.DataFrame({"start": [3.0], "end": [6.0], "text": [text]}),
                            200)[0]
        return build_messages(block, name)

    for name in TEMPLATE_NAMES:
        a, b = one(name, "whisk the eggs"), one(name, "fold the towel")
        assert a[:-1] == b[:-1], name
        head, tail = a[-1]["content"].split("3s: whisk the eggs")
        assert b[-1]["content"] == f"{head}3s: fold the towel{tail}", name
        assert len(tail) <= 3, (name, tail)  # the paper's prompt closes its quote: '".'


def test_sentences_are_the_dataclass_as_its_init_makes_it() -> None:
    """``_sentences`` sets a Sentence's fields at once: still equal, hashed and frozen as
    one its ``__init__`` made."""
    import dataclasses

    from howtocap.caption.blocks import Sentence, _sentences

    subs = pd.DataFrame({"start": [-1.0, 4.0], "end": [3.0, float("nan")],
                         "text": [" crack  the eggs ", "whisk"]})
    got = [s for s, _ in _sentences(subs)]
    want = [Sentence(0.0, 3.0, "crack the eggs"), Sentence(4.0, 4.0, "whisk")]
    assert got == want and [hash(s) for s in got] == [hash(s) for s in want]
    assert [repr(s) for s in got] == [repr(s) for s in want]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].text = "x"  # type: ignore[misc]
