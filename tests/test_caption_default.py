"""The shipped caption default (model, template, grammar) is the one the independent caption
benchmark chose on its report split (benchmarks/results/captions.json, issue #20)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "captions.json"


def _results() -> dict:
    return json.loads(RESULTS.read_text())


def test_code_default_is_the_benchmarks_choice() -> None:
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.prompt import DEFAULT_TEMPLATE_NAME
    from howtocap.cli.caption import caption_cmd as caption
    from howtocap.llm.models import EMBEDDED_DEFAULT

    choice = _results()["choice"]
    cli_constrain = inspect.signature(caption).parameters["constrain"].default
    assert (EMBEDDED_DEFAULT, DEFAULT_TEMPLATE_NAME, CaptionConfig().constrain, cli_constrain) \
        == (choice["model"], choice["template"], choice["constrain"], choice["constrain"])
    assert CaptionConfig().template == DEFAULT_TEMPLATE_NAME


def test_the_recorded_choice_follows_the_rule_from_the_recorded_rows() -> None:
    """Re-applies the benchmark's rule to the stored rows: a hand-edited choice, or rows
    changed without re-choosing, fail here."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_captions import choose_default
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
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
