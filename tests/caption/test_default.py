"""The shipped caption default is the one the caption benchmarks chose on their report splits:
the model by the generated-narration benchmark (benchmarks/results/captions.json, issue #20),
the template, grammar and post-processing by the real-narration one
(benchmarks/results/real_captions.json, issue #40)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "captions.json"
REAL = ROOT / "benchmarks" / "results" / "real_captions.json"


def _results() -> dict:
    return json.loads(RESULTS.read_text())


def test_code_default_is_the_benchmarks_choice() -> None:
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.filler import TALK_REASONS
    from howtocap.caption.prompt import DEFAULT_TEMPLATE_NAME
    from howtocap.cli.caption import caption_cmd as caption
    from howtocap.llm.models import EMBEDDED_DEFAULT

    assert _results()["choice"]["model"] == EMBEDDED_DEFAULT
    choice = json.loads(REAL.read_text())["choice"]["config"]
    cfg = CaptionConfig()
    cli_constrain = inspect.signature(caption).parameters["constrain"].default
    assert (DEFAULT_TEMPLATE_NAME, cfg.constrain, cli_constrain, cfg.imperative,
            cfg.merge_seconds) == (choice["template"], choice["constrain"],
                                   choice["constrain"], choice["imperative"],
                                   choice["merge_seconds"])
    if cfg.constrain:
        assert cfg.grammar == choice["grammar"]
    # the story/schedule reasons are part of the filler test, on by default
    assert cfg.reject_fillers and choice["rejects_stories"] and TALK_REASONS
    assert cfg.template == DEFAULT_TEMPLATE_NAME


def test_the_real_narration_choice_follows_its_rule_from_the_recorded_rows() -> None:
    """Re-applies bench_real_captions' rule to its stored rows (issue #40)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "quality"))
    try:
        from bench_real_captions import choose_default
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "quality"))
    res = json.loads(REAL.read_text())
    again = choose_default(res["rows"])
    assert {k: again[k] for k in ("label", "config", "tied", "eligible")} == \
        {k: res["choice"][k] for k in ("label", "config", "tied", "eligible")}
    rows = {r["label"]: r for r in res["rows"] if "report" in r}
    assert again["top_f"]["f"] == max(rows[lb]["report"]["f"] for lb in again["eligible"])


def test_the_recorded_choice_follows_the_rule_from_the_recorded_rows() -> None:
    """Re-applies the benchmark's rule to the stored rows: a hand-edited choice, or rows
    changed without re-choosing, fail here."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "quality"))
    try:
        from bench_captions import choose_default
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "quality"))
    res = _results()
    again = choose_default(res["rows"])
    assert {k: again[k] for k in ("label", "model", "template", "constrain", "tied")} == \
        {k: res["choice"][k] for k in ("label", "model", "template", "constrain", "tied")}
    # The rule: every eligible row parses >= 95 % and runs at least in real time, and the
    # chosen row's report F is within the bootstrap band of the best eligible row's.
    rows = {r["label"]: r for r in res["rows"] if "report" in r}
    for label in again["eligible"]:
        assert rows[label]["report"]["parse_rate"] >= 0.95
        assert rows[label]["report"]["quiet_realtime_factor"] >= 1.0
    assert again["top_f"]["f"] == max(rows[lb]["report"]["f"] for lb in again["eligible"])
    assert again["label"] in again["tied"]
