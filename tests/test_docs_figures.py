"""Every figure the docs quote equals its results file, and the checker would notice if not."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import render_docs  # noqa: E402


def test_every_marker_matches_its_results_file() -> None:
    problems = render_docs.process(render_docs.doc_files(), render_docs.Results(), write=False)
    assert not problems, "stale or broken figures (run python benchmarks/render_docs.py):\n" \
        + "\n".join(map(str, problems))


def test_the_docs_have_markers_where_they_quote_benchmarks() -> None:
    """The pages that quote measurements do so through markers (a page that lost them all
    would pass the check above trivially)."""
    for page in ["README.md", "docs/benchmarks.md", "docs/scaling.md"]:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert len(list(render_docs.markers(text))) >= 20, page


def _results_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "m.json").write_text(json.dumps({
        "speed": {"ratio": 11.73, "default (clip 8 s)": {"after": 0.946}},
        "rows": [{"rtf": 30.41}, {"rtf": 27.74}], "wer": 0.0169, "none": None,
        "0.5": {"x": 3}}))
    (folder / "t.md").write_text("# t\n\n| a | b | c |\n|---|---|---|\n| one | 1.0 | x |\n"
                                 "| two | 2.0 | y |\n\ntext\n")
    return folder


def test_checker_reports_planted_wrong_values_and_render_fixes_them(tmp_path: Path) -> None:
    results = render_docs.Results(_results_copy(tmp_path))
    doc = tmp_path / "page.md"
    doc.write_text(
        "ok <!--fig m.json:speed.ratio .1f×-->11.7×<!--/fig--> "
        "wrong <!--fig m.json:rows.1.rtf .1f-->30.4<!--/fig--> "
        "dotted key <!--fig m.json:speed.default (clip 8 s).after .2f-->0.90<!--/fig--> "
        "percent <!--fig m.json:wer .1%-->1.7%<!--/fig--> "
        "numeric key <!--fig m.json:0.5.x d-->3<!--/fig--> "
        "row by value <!--fig m.json:rows.rtf=27.74.rtf .0f-->28<!--/fig--> "
        "a suffix with a space <!--fig m.json:speed.ratio .0f ×-->12 ×<!--/fig-->\n"
        "an example in code is not a figure: `<!--fig FILE.json:path FORMAT-->VALUE<!--/fig-->`\n"
        "<!--table t.md#1 cols=a|c rows=two-->\n| stale |\n<!--/table-->\n")
    problems = render_docs.process([doc], results, write=False)
    assert sorted(p.spec for p in problems) == [
        "m.json:rows.1.rtf .1f", "m.json:speed.default (clip 8 s).after .2f",
        "t.md#1 cols=a|c rows=two"]
    wrong = next(p for p in problems if p.spec.startswith("m.json:rows"))
    assert "'30.4'" in wrong.message and "'27.7'" in wrong.message and wrong.line == 1

    assert render_docs.process([doc], results, write=True)  # reported, then rewritten
    assert render_docs.process([doc], results, write=False) == []
    text = doc.read_text()
    assert "-->27.7<!--/fig-->" in text and "-->0.95<!--/fig-->" in text
    assert "<!--table t.md#1 cols=a|c rows=two-->\n| a | c |\n|---|---|\n| two | y |\n" in text


@pytest.mark.parametrize("spec, message", [
    ("gone.json:a .1f", "no results file"),
    ("m.json:speed.nope .1f", "no key 'nope'"),
    ("m.json:rows.7.rtf .1f", "no list index '7'"),
    ("m.json:rows.rtf=1.rtf .1f", "no list item with 'rtf=1'"),
    ("m.json:none .1f", "null"),
    ("m.json:speed .1f", "a dict, not a figure"),
    ("m.json:speed.ratio", "malformed"),
    ("@no.such.figure .1f", "no derived figure"),
])
def test_checker_reports_markers_naming_what_does_not_exist(tmp_path: Path, spec: str,
                                                            message: str) -> None:
    results = render_docs.Results(_results_copy(tmp_path))
    doc = tmp_path / "page.md"
    doc.write_text(f"x <!--fig {spec}-->1.0<!--/fig-->\n")
    problems = render_docs.process([doc], results, write=True)
    assert len(problems) == 1 and message in problems[0].message
    assert doc.read_text() == f"x <!--fig {spec}-->1.0<!--/fig-->\n"  # broken: left alone


def test_check_command_exits_1_on_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    truth = json.loads((render_docs.RESULTS / "metrics.json").read_text())["speedup_vs_argsort"]
    page.write_text(f"<!--fig metrics.json:speedup_vs_argsort .1f-->{truth + 9:.1f}<!--/fig-->\n")
    script = ROOT / "benchmarks" / "render_docs.py"
    res = subprocess.run([sys.executable, str(script), "--check", str(page)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and f"results say '{truth:.1f}'" in res.stdout
    shutil.copy(page, tmp_path / "before.md")
    res = subprocess.run([sys.executable, str(script), str(page)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout
    assert page.read_text() == f"<!--fig metrics.json:speedup_vs_argsort .1f-->{truth:.1f}" \
                               "<!--/fig-->\n"


def test_derived_figures_follow_their_inputs(tmp_path: Path) -> None:
    """The scaling plan moves when a measurement moves: halve the captions per block and the
    number of LLM requests doubles."""
    folder = tmp_path / "results"
    shutil.copytree(render_docs.RESULTS, folder, ignore=shutil.ignore_patterns("*.png"))
    before = render_docs.derived("scaling.blocks_total_m", render_docs.Results(folder))
    llm = json.loads((folder / "llm.json").read_text())
    default = llm["choice"]["label"]
    for run in llm["runs"]:
        if run["label"] == default:
            run["captions_per_block"] /= 2
    (folder / "llm.json").write_text(json.dumps(llm))
    after = render_docs.derived("scaling.blocks_total_m", render_docs.Results(folder))
    assert after == pytest.approx(2 * before)


# -- typed figures in the benchmark tables ---------------------------------------------------
# What a measured result looks like: a ratio (12.3×, 0.9x), a percentage, or a decimal number
# that is not a setting (≥ 0.75 is a filter bar, not a measurement).
MEASURED = re.compile(r"\d[\d,.]*\s?(?:×|%)|(?<![≥≤=] )(?<![\w.])\d+\.\d+(?![\w.])")
# The LLM-captions row is rendered by the captions benchmark's owner (issue #20).
NOT_YET = ("| LLM | default (", "| LLM | 26 ASR blocks")


def _table_rows(text: str, heading: str) -> list[str]:
    section = text.split(heading, 1)[1]
    return render_docs.md_tables(section)[0][2:]


def unmarked_figures(row: str) -> list[str]:
    bare = render_docs.FIG_RE.sub("", row)
    bare = re.sub(r"\[[^\]]*\]\([^)]*\)|`[^`]*`", "", bare)  # links and code are not figures
    return MEASURED.findall(bare)


@pytest.mark.parametrize("page, heading", [("README.md", "## Benchmarks"),
                                           ("docs/benchmarks.md", "## Summary")])
def test_benchmark_tables_type_no_figure(page: str, heading: str) -> None:
    rows = _table_rows((ROOT / page).read_text(encoding="utf-8"), heading)
    assert len(rows) >= 15
    typed = {row.split("|")[1].strip(): unmarked_figures(row) for row in rows
             if not any(s in row for s in NOT_YET)}
    assert {k: v for k, v in typed.items() if v} == {}


def test_a_typed_figure_in_a_benchmark_row_is_caught() -> None:
    assert unmarked_figures("| decode | 1.04× ffmpeg | x |") == ["1.04×"]
    assert unmarked_figures("| x | keeps 96% of steps at ≥ 0.75 | y |") == ["96%"]
    assert unmarked_figures("| x | p99 875.3 ms | y |") == ["875.3"]
    assert unmarked_figures("| x | <!--fig a.json:b .1f×-->1.0×<!--/fig--> on 2 cores, "
                            "[link](docs/x.md#3-1) `0.5` | y |") == []
