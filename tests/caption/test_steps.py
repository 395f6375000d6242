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

from howtocap.caption.captioner import CaptionConfig, CaptionError, caption_video
from howtocap.caption.constrain import CAPTION_REGEX, STEP_GBNF, STEP_REGEX
from howtocap.caption.filler import load_parser, reject_reasons
from howtocap.caption.imperative import imperatives, judge_captions
from howtocap.caption.merge import repeats
from howtocap.llm import create
from howtocap.llm.base import GenerationConfig
from tests.support.captions import Scripted
from tests.support.chat_server import chat_server


@pytest.fixture(scope="module")
def nlp() -> object:
    return load_parser()


FRAMED = [
    ("So now I'm going to add two cups of flour", "Add two cups of flour."),
    ("We're just going to pour in the milk.", "Pour in the milk."),
    ("You want to stir it for five minutes.", "Stir it for five minutes."),
    ("Let's add the garlic.", "Add the garlic."),
    ("I'm adding the onions to the pan.", "Add the onions to the pan."),
    ("I need to beat one egg.", "Beat one egg."),
    ("Now we add salt and pepper.", "Add salt and pepper."),
]


@pytest.mark.parametrize(("said", "step"), FRAMED)
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
        texts = one_parse_texts()  # verdict and rewrite from one parse, as in process
        assert judge_captions(texts, pool, reject_fillers=True, imperative=True) == \
            judge_captions(texts, nlp, reject_fillers=True, imperative=True)
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


DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def one_parse_texts() -> list[str]:
    """Captions to judge: the hand-labelled filler captions (steps and every reason), the tune
    split's steps and talk, and narration in the speaker's frame (rewritten when kept)."""
    caps = json.loads((DATA / "filler_captions.json").read_text())["captions"]
    return [str(c[0]) for c in caps] + [t for step, talk, _ in TUNE_PAIRS for t in (step, talk)] \
        + [said for said, _ in FRAMED] + ["Now I'm adding the flour to the bowl.",
                                          "So yeah, now I'm going to wait a few minutes."]


def apart(texts: list[str], nlp: object) -> tuple[list[str], list[str]]:
    """The filler test, then the rewrite of the captions it kept: two parses, as before."""
    why = reject_reasons(texts, nlp)
    keep = [i for i, w in enumerate(why) if not w]
    new = list(texts)
    for i, step in zip(keep, imperatives([texts[i] for i in keep], nlp), strict=True):
        new[i] = step
    return why, new


def test_one_parse_gives_what_the_filler_test_and_the_rewrite_give_apart(nlp: object) -> None:
    texts = one_parse_texts()
    why, new = apart(texts, nlp)
    assert judge_captions(texts, nlp, reject_fillers=True, imperative=True) == (why, new)
    # every kind of outcome is among them: rejected (as written), rewritten, kept as written
    assert len({w for w in why if w}) >= 6
    assert sum(t != n for t, n in zip(texts, new, strict=True)) >= len(FRAMED) + 1
    assert any(not w and t == n for t, w, n in zip(texts, why, new, strict=True))
    assert all(t == n for t, w, n in zip(texts, why, new, strict=True) if w)
    # one of the two alone
    assert judge_captions(texts, nlp, reject_fillers=True, imperative=False) == (why, texts)
    assert judge_captions(texts, nlp, reject_fillers=False, imperative=True) == \
        ([""] * len(texts), imperatives(texts, nlp))
    assert judge_captions(texts, None, reject_fillers=False, imperative=False) == \
        ([""] * len(texts), texts)


class CountingParser:
    """The real parser, keeping every text it is asked to parse."""

    def __init__(self, nlp: object) -> None:
        self.nlp, self.texts = nlp, []

    def pipe(self, texts: list[str], batch_size: int = 256) -> object:
        self.texts += list(texts)
        return self.nlp.pipe(texts, batch_size=batch_size)  # type: ignore[attr-defined]


def scripted_video(texts: list[str]) -> tuple[pd.DataFrame, Scripted]:
    """One block of subtitles, and an LLM that writes ``texts`` as its captions, a second
    apart."""
    subs = pd.DataFrame({"start": [float(i) for i in range(len(texts))],
                         "end": [i + 1.0 for i in range(len(texts))], "text": ["x"] * len(texts)})
    return subs, Scripted("\n".join(f"{i}s: {t}" for i, t in enumerate(texts)))


def test_the_default_parses_each_caption_once(nlp: object) -> None:
    """The filler test and the imperative rewrite read one parse: every caption goes through
    the parser once (before, the kept ones went twice)."""
    subs, llm = scripted_video(one_parse_texts())
    counting = CountingParser(nlp)
    cfg = CaptionConfig(block_words=100_000, merge_seconds=0)
    df, _ = caption_video("v", subs, llm, cfg, nlp=counting)
    assert sorted(counting.texts) == sorted(set(counting.texts))
    assert len(counting.texts) == len(df) > 100
    kept = df[df["rejected"] == ""]
    assert "Add two cups of flour." in kept["text"].tolist() and len(kept) < len(df)


@pytest.mark.slow
def test_no_parser_is_loaded_without_the_filler_test_and_the_rewrite(tmp_path: Path) -> None:
    """``--keep-fillers --no-imperative`` never imports spaCy (nor starts a parser process);
    with either on, the parse runs (so the check can tell)."""
    import subprocess
    import sys

    from howtocap.caption.filler import ParserPool
    from howtocap.caption.stage import CaptionStage
    from howtocap.llm import LLMOptions

    src = tmp_path / "caption.json"
    src.write_text(json.dumps({"v1": {"start": [0.0, 5.0], "end": [5.0, 10.0],
                                      "text": ["so now we add the flour", "so yeah"]}}))
    code = ("import sys\nfrom howtocap.cli import app\n"
            "try:\n    app(sys.argv[1:], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print('spacy' in sys.modules)\n")
    seen = {}
    with chat_server() as srv:
        for flags in (("--keep-fillers", "--no-imperative"), ("--keep-fillers",)):
            out = tmp_path / f"run{len(flags)}"
            res = subprocess.run([sys.executable, "-c", code, "caption", "--subtitles", str(src),
                                  "--out", str(out), "--llm-url", srv.url, "--quiet",
                                  "--parse-workers", "0", *flags],
                                 capture_output=True, text=True, timeout=300, check=False)
            assert res.returncode == 0, res.stderr[-2000:]
            seen[flags] = res.stdout.split()[-1]
            assert len(pd.read_parquet(out / "captions")) == 2
    assert seen == {("--keep-fillers", "--no-imperative"): "False", ("--keep-fillers",): "True"}
    url = LLMOptions(url=["http://127.0.0.1:9/v1"])
    off = CaptionStage(url, CaptionConfig(reject_fillers=False, imperative=False),
                       parse_workers=1)
    off.setup()
    assert off._nlp is None
    rewrite = CaptionStage(url, CaptionConfig(reject_fillers=False), parse_workers=1)
    rewrite.setup()
    try:
        assert isinstance(rewrite._nlp, ParserPool)  # the rewrite parses in the workers too
    finally:
        rewrite.release()


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
