"""Captions that are captions: constrained decoding with real llama.cpp, the chatter filter,
and a video that keeps what it finished when some or all of its LLM blocks fail."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from howtocap.caption.blocks import make_blocks
from howtocap.caption.captioner import CaptionConfig, caption_video
from howtocap.caption.chatter import is_chatter
from howtocap.caption.constrain import CAPTION_REGEX
from howtocap.caption.parse import parse_reply
from howtocap.caption.prompt import build_messages
from howtocap.llm.base import GenerationConfig
from howtocap.llm.llamacpp import LlamaCppLLM
from howtocap.llm.models import SMOLLM2
from tests.support.chat_server import chat_server
from tests.support.cli import add_video, run_cli, vtt

RAMBLE = [
    (3.2, 9.0, "hey guys welcome back so today um we are going to fix a wobbly chair"),
    (9.0, 15.5, "first flip the chair over and uh look at where the legs join the seat"),
    (15.5, 22.0, "you can see this screw here is loose so grab a screwdriver and tighten it"),
    (22.0, 28.0, "my dad gave me this screwdriver years ago it's like my favorite tool"),
    (28.0, 35.0, "now squeeze some wood glue into the gap and clamp the leg for an hour"),
    (35.0, 40.0, "and don't forget to like and subscribe if this helped you out"),
]


@pytest.mark.slow
def test_grammar_makes_a_tiny_model_answer_only_caption_lines() -> None:
    """SmolLM2-135M ignores the caption format on its own; with the grammar every line of
    every reply is '<n>s: <sentence>' and parses."""
    llm = LlamaCppLLM(SMOLLM2).load()
    subs = pd.DataFrame(RAMBLE, columns=["start", "end", "text"])
    cfg = CaptionConfig(template="paper", constrain=True,
                        generation=GenerationConfig(max_tokens=160))
    constrained = cfg.resolved_generation()
    assert constrained.grammar and not cfg.generation.grammar
    for words in (12, 30, 200):  # one sentence per block, a few, and everything in one block
        for block in make_blocks(subs, words):
            reply = llm.chat(build_messages(block, cfg.resolved_template()), constrained)
            if getattr(reply, "finish_reason", None) == "length":  # cut mid-line by max_tokens
                reply = reply.rsplit("\n", 1)[0]
            assert reply.strip(), block.text
            lines = reply.strip().split("\n")
            assert all(re.fullmatch(r"\d{1,5}s: [A-Za-z0-9].*[.!]", ln) for ln in lines), reply
            assert re.fullmatch(CAPTION_REGEX, reply.strip() + "\n")  # the vLLM twin agrees
            res = parse_reply(reply, block, slack=1000)
            assert res.n_no_timestamp == 0 and res.n_empty == 0, reply
            assert len(res.captions) + res.n_duplicates == len(lines), reply  # it may loop


def test_chatter_patterns() -> None:
    for text in ["Don't forget to like and subscribe.", "Hit the bell for notifications.",
                 "Leave a comment below.", "Thanks for watching!", "Welcome back to my channel.",
                 "Hey guys, today we fix a chair.", "Check out my other video.",
                 "The link is in the description.", "This video is sponsored by Acme.",
                 "Smash that like button.", "See you next time.",
                 "Use code cozy for fifteen percent off."]:
        assert is_chatter(text), text
    for text in ["Fold the edge like this.", "Add a comment card to the gift box.",
                 "Link the chain to the sprocket.", "Tighten the bell on the handlebar.",
                 "Welcome the guests at the door.", "Stir the sauce for five minutes.",
                 "Use the code on the box to set the timer.", "Cut off the ends with a knife."]:
        assert not is_chatter(text), text


def test_chatter_signoffs_and_digressions() -> None:
    """Sign-offs, shout-outs and asides are chatter; steps that share their words are not."""
    for text in ["And that's all for today!", "Shout-out to everyone who left me a comment.",
                 "Tell me in the comments what to build next.", "Sorry, the phone rang.",
                 "Enjoy the video.", "Trust me on this one.", "Smash that button.",
                 "Funny story about this saw.", "I got it for twenty bucks."]:
        assert is_chatter(text), text
    for text in ["That's it, now sand the edge.", "Watch the oil level closely.",
                 "Comment out the old line in the config file.", "Start the engine.",
                 "Press the button to release the blade.", "Shout the count to your partner."]:
        assert not is_chatter(text), text


def test_chatter_captions_are_dropped_and_counted() -> None:
    class Scripted:
        name = "scripted"

        def chat(self, messages: list, gen: GenerationConfig) -> str:
            return ("3s: Welcome back to the channel.\n15s: Tighten the loose screw.\n"
                    "35s: Like and subscribe.")

        def chat_many(self, batch: list, gen: GenerationConfig) -> list:
            return [self.chat(m, gen) for m in batch]

    subs = pd.DataFrame(RAMBLE, columns=["start", "end", "text"])
    df, stats = caption_video("chair", subs, Scripted())
    assert df["text"].tolist() == ["Tighten the loose screw."] and stats.chatter == 2
    df, stats = caption_video("chair", subs, Scripted(), CaptionConfig(drop_chatter=False))
    assert len(df) == 3 and stats.chatter == 0


@pytest.mark.slow
def test_some_blocks_failing_keeps_the_rest_with_a_warning(tmp_path: Path,
                                                           base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "half", base_video, vtt([(0.5, 2.0, "first crack two eggs into the bowl"),
                                             (2.5, 3.8, "NOPARSE then whisk the eggs well")]))
    add_video(vids, "none", base_video, vtt([(0.5, 2.0, "NOPARSE crack two eggs")]))
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0", "--block-words", "10", "--quiet")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    status = pd.read_parquet(out / "status")
    status = status[status["stage"] == "caption"].set_index("video_id")
    half, none = status.loc["half"], status.loc["none"]
    assert half["status"] == "ok" and half["warnings"] == 1
    assert half["message"] == ("1 of 2 LLM blocks gave no caption (block 1: reply had no "
                               "timestamped caption line)")
    assert none["status"] == "error" and none["warnings"] == 0
    assert "half: 1 of 2 LLM blocks gave no caption" in " ".join(res.stderr.split())
    assert "caption: 1 done (1 with warnings)" in res.stderr
    caps = pd.read_parquet(out / "captions")
    assert caps["video_id"].tolist() == ["half"] and caps["block"].tolist() == [0]
    subs = pd.read_parquet(out / "subtitles")
    assert sorted(subs["video_id"].unique()) == ["half", "none"]  # both keep their subtitles
