"""Issue #40's levers: the imperative rewrite, story and schedule rejection, near-duplicate
merging, the 'steps' grammar, and few-shot examples from a template file reaching both
backends (the embedded llama.cpp and an OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from tests.chat_server import chat_server

from howtocap.caption.captioner import CaptionConfig, CaptionError, caption_video
from howtocap.caption.constrain import CAPTION_REGEX, STEP_GBNF, STEP_REGEX
from howtocap.caption.filler import load_parser, reject_reasons
from howtocap.caption.imperative import imperatives
from howtocap.caption.merge import repeats
from howtocap.llm import create
from howtocap.llm.base import GenerationConfig


@pytest.fixture(scope="module")
def nlp() -> object:
    return load_parser()


@pytest.mark.parametrize(("said", "step"), [
    ("So now I'm going to add two cups of flour", "Add two cups of flour."),
    ("We're just going to pour in the milk.", "Pour in the milk."),
    ("You want to stir it for five minutes.", "Stir it for five minutes."),
    ("Let's add the garlic.", "Add the garlic."),
    ("I'm adding the onions to the pan.", "Add the onions to the pan."),
    ("I need to beat one egg.", "Beat one egg."),
    ("Now we add salt and pepper.", "Add salt and pepper."),
])
def test_imperative_rewrite_drops_the_frame_and_keeps_objects_and_quantities(
        nlp: object, said: str, step: str) -> None:
    assert imperatives([said], nlp) == [step]


def test_imperative_rewrite_in_parser_processes_equals_the_rewrite_in_process(
        nlp: object) -> None:
    """An HTTP run hands its parse to a ParserPool: the rewrite happens there, the same."""
    from howtocap.caption.filler import ParserPool

    said = ["So now I'm going to add two cups of flour", "Let's add the garlic.",
            "The noodles are soaking in water."]
    pool = ParserPool(1)
    try:
        assert imperatives(said, pool) == imperatives(said, nlp) == [
            "Add two cups of flour.", "Add the garlic.", "The noodles are soaking in water."]
        assert pool.verdicts(said[:1]) == reject_reasons(said[:1], nlp)  # verdicts still
    finally:
        pool.close()


def test_imperative_rewrite_leaves_steps_statements_and_negations_alone(nlp: object) -> None:
    kept = ["Add the onions.", "The noodles are soaking in water.", "Don't overmix the batter.",
            "I have no idea why this dish is named after Singapore."]
    assert imperatives(kept, nlp) == kept


# Real ASR sentences of the benchmark's tune split (shared/data/youcook2_asr, videos
# WRtoMalV4Zo, jgeZjmXCDiw, ETXVbDoMKbQ, rT3Esab9zmU, CrLSUUltW2A), each with a human step of
# the same video: the step is kept, the talk rejected with its reason.
TUNE_PAIRS = [
    ("add cubed onions to the pot and stir", "glass is originated from hungary.", "story"),
    ("chop some salami", "it 's exactly like my mother 's.", "story"),
    ("add lemon juice and blend", "this is the traditional played.", "story"),
    ("add some corn starch to the water and mix well",
     "is you can subscribe, you can watch my videos every monday?", "schedule"),
    ("add water and kneed to make dough", "otherwise , the dish may not taste good.", "story"),
    ("Soak the rice vermicelli in water.", "Release new videos every Monday, Wednesday, and "
                                           "Friday.", "schedule"),
]


@pytest.mark.parametrize(("step", "talk", "why"), TUNE_PAIRS)
def test_story_and_schedule_are_rejected_with_a_reason_and_the_step_kept(
        nlp: object, step: str, talk: str, why: str) -> None:
    assert reject_reasons([step, talk], nlp) == ["", why]


def test_near_duplicates_within_the_window_are_repeats() -> None:
    texts = ["Add the flour to the bowl.", "Add flour to a bowl.", "Whisk the eggs.",
             "Add the flour to the bowl."]
    assert repeats(texts, [0.0, 12.0, 20.0, 200.0], window=30.0) == [1]
    assert repeats(texts, [0.0, 12.0, 20.0, 200.0], window=0.0) == []


def test_steps_grammar_forbids_the_openings_a_step_never_has() -> None:
    for line in ("12s: I add the flour.", "3s: So add salt.", "3s: We're adding salt.",
                 "3s: And stir.", "3s: But wait.", "3s: You stir.", "3s: If hot, stir.",
                 "3s: I'm done."):
        assert re.fullmatch(CAPTION_REGEX, line) and not re.fullmatch(STEP_REGEX, line), line
    for line in ("12s: Add the flour.", "3s: Soak the rice.", "3s: Insert the skewer.",
                 "3s: Butter the pan.", "3s: Andouille sausage in the pan.", "3s: Wet it.",
                 "3s: Yogurt goes in.", "3s: An egg in the bowl."):
        assert re.fullmatch(STEP_REGEX, line), line
    assert "first ::=" in STEP_GBNF


def subtitles() -> pd.DataFrame:
    return pd.DataFrame({"start": [0.0, 5.0, 10.0], "end": [5.0, 10.0, 15.0],
                         "text": ["we add two cups flour",
                                  "we release new videos every monday",
                                  "then whisk the eggs"]})


EXAMPLE_ASR = "7s: okay zanzibar so we chop the parsnips"
EXAMPLE_ANSWER = "7s: Chop the parsnips."


def template_file(tmp_path: Path) -> Path:
    path = tmp_path / "shots.json"
    path.write_text(json.dumps({"prompt": "Steps:\n{asr}", "system": "You write steps.",
                                "examples": [[EXAMPLE_ASR, EXAMPLE_ANSWER]]}))
    return path


def test_fewshot_examples_and_grammar_from_a_file_reach_an_http_server(tmp_path: Path
                                                                       ) -> None:
    cfg = CaptionConfig(template=str(template_file(tmp_path)), constrain=True,
                        grammar="steps", imperative=True)
    with chat_server() as srv:
        llm = create(url=srv.url, model="echo", max_retries=0)
        df, _ = caption_video("v", subtitles(), llm, cfg)
    body = srv.bodies[0]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][1]["content"] == f"Steps:\n{EXAMPLE_ASR}"
    assert body["messages"][2]["content"] == EXAMPLE_ANSWER
    assert body["messages"][3]["content"].startswith("Steps:\n0s: we add two cups flour")
    assert body["grammar"] == STEP_GBNF
    assert body["structured_outputs"] == {"regex": STEP_REGEX}
    # the echo server's captions ("We add two cups flour."), through rejection and the
    # imperative rewrite
    kept = df[df["rejected"] == ""]["text"].tolist()
    assert kept == ["Add two cups flour.", "Then whisk the eggs."]
    assert df.set_index("start").loc[5.0, "rejected"] == "schedule"


@pytest.mark.slow
def test_fewshot_examples_from_a_file_reach_the_embedded_model(tmp_path: Path) -> None:
    """llama.cpp reads the example's tokens: the prompt it processed (cached + new tokens)
    is longer by at least the example's words than the same request without it."""
    from howtocap.llm.llamacpp import LlamaCppLLM

    seen: list[int] = []

    class Counting(LlamaCppLLM):
        def complete(self, messages: object, gen: GenerationConfig) -> dict:
            resp = super().complete(messages, gen)  # type: ignore[arg-type]
            tm = resp.get("timings") or {}
            seen.append(int(tm.get("cache_n") or 0) + int(tm.get("prompt_n") or 0))
            return resp

    llm = Counting("smollm2", n_ctx=1024, n_threads=1).load()
    gen = GenerationConfig(max_tokens=8)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"prompt": "Steps:\n{asr}", "system": "You write steps."}))
    for path in (plain, template_file(tmp_path)):
        # a tiny model's reply need not parse: the prompt is what is checked
        with contextlib.suppress(CaptionError):
            caption_video("v", subtitles(), llm, CaptionConfig(template=str(path), retries=0,
                                                               generation=gen))
    assert len(seen) == 2
    assert seen[1] - seen[0] >= len((EXAMPLE_ASR + EXAMPLE_ANSWER).split())
