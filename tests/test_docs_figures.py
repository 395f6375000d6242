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


# -- typed measurements anywhere in README.md and docs/ ---------------------------------------
# A measured figure is a number with a unit of measurement (time, bytes, a rate, a ratio, a
# percentage) or a decimal number. Typed outside a render marker nobody re-measures it, so it
# goes stale (docs/captions.md once said 10,001 fuzz cases where fuzz.json had 9,998). Not
# measurements, hence not flagged: code (inline and fenced), markers, links and HTML comments;
# bounds and settings (a number after ≥ ≤ < > = ±, "up to", "at most", "at least", "every",
# "default", "target", "within", a --flag or an option's name: 0.75 is a bar, 60 s a setting);
# ranges and sizes of inputs (1.5–4.5 s, "60 s of narration": what was generated, not what
# was measured); products (224 × 224); rows of option tables (their first cell is code); and
# the phrases of ``ALLOWED`` (versions, shipped files, formula constants, settings).
UNIT = (r"(?:[mµ]s|s|sec|seconds?|min|minutes?|h|hours?|[kKMGT]i?B|[a-zA-Z]+/s)(?![\w/])")
NUMBER = r"(?<![\w.,/#@§^–-])[~≈]?\d+(?:,\d{3})*(?:\.\d+)?(?![\d.,]\d)"
MEASURED = re.compile(rf"{NUMBER}(?:\s?(?:%|×(?!\s?\d)|x(?![\w]))|\s{UNIT})"
                      r"|(?<![\w.,/#@§^–-])\d+(?:,\d{3})*\.\d+(?![\d.,]\d)(?![\w'])")
SETTING = re.compile(r"(?:[≥≤<>=±]|\bup to|\bat most|\bat least|\bevery|\bdefault(?: is| of)?"
                     r"|--[\w-]+(?: \w+)?|\btargets?(?: of)?|\bwithin|CODE\**\s*\()"
                     r"\s*[~≈]?(?:\d[\d.,]*,\s*)*$", re.I)
RANGE = re.compile(r"^\s?(?:[–-]\s?[~≈]?\d|to \d)")
INPUT = re.compile(r"(?:s|sec|seconds?|min|minutes?|h|hours?)$")  # "60 s of narration"
# Pages rewritten for the shard layout (issue #39 part 1): checked once they are.
NOT_YET = ("docs/runs.md", "docs/scaling.md", "docs/architecture.md")
# Generated from the app's help (defaults only).
GENERATED = ("docs/cli.md",)
# Figures that are not measurements, with enough context to find them: versions, sizes of
# shipped files, constants of a formula, settings stated without a bound word.
ALLOWED: dict[str, tuple[str, ...]] = {
    "README.md": ("1,000 videos or 60 s", "a 30 s merge", "soft labels 0.6", "0.3/0.5/0.7/0.9",
                  "momentum model 0.995"),
    "docs/align.md": ("1.4826 × MAD", "a 0.3 threshold", "(0, 0.25, … 2.5)", "old 1.5",
                      "moved by −23 s"),
    "docs/benchmarks.md": ("-f null -`, 120 s 720p", "clients for 30 s", "| HTTP, 30 s (",
                           "issue's 90 %/80 %", "old 1.5", "(1,000 videos or 60 s)"),
    "docs/captions.md": ("temperature 0.7", "a 30 s merge", "Q4_K_M, 1.1 GB", "for 10 minutes.",
                         "copying + 0.10", "above +0.05"),
    "docs/clips.md": ("GOPs of 1, 2 and 5 s",),
    "docs/duplicates.md": ("videos of 5 minutes", "a copy at 1.25×"),
    "docs/dvc.md": ("tious=(0.3, 0.5, 0.7,", "0.9), split=None", "METEOR 1.5"),
    "docs/encoders.md": ("three 1 MiB chunks",),
    "docs/search.md": ("to 4 kB (414)", "3× (60)", "clients for 30 s"),
    "docs/stats.md": ("100 × distinct",),
    "docs/subtitles.md": ("before 0 s", "at 2.6 words/s"),
    "docs/train.md": ("warmup 5 % + cosine", "0.995, 2048, 0.6", "| **0.1** |", "start 0.07",
                      "decay 0.05"),
}


def _blank(m: re.Match[str]) -> str:
    return "\n" * m.group(0).count("\n")


def bare_prose(text: str) -> str:
    """The page without what is not prose: rendered tables and figures, code, comments,
    link targets, option tables' rows (line numbers kept)."""
    text = render_docs.TABLE_RE.sub(_blank, text)
    text = render_docs.FIG_RE.sub("FIG", text)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.S)
    text = render_docs.CODE_RE.sub(lambda m: _blank(m) if "\n" in m.group(0) else "CODE", text)
    text = re.sub(r"\]\([^)\s]*\)", "]", text)
    return "\n".join("" if re.match(r"\|\s*CODE", line) else line for line in text.splitlines())


def typed_figures(text: str) -> list[tuple[int, str]]:
    """``(line, figure)`` of every measured figure typed outside the markers."""
    found = []
    for i, line in enumerate(bare_prose(text).splitlines(), 1):
        for m in MEASURED.finditer(line):
            after = line[m.end():]
            if SETTING.search(line[:m.start()]) or RANGE.match(after) \
                    or INPUT.search(m.group(0)) and re.match(r"\s?of\b", after) \
                    or line[:m.start()].rstrip().endswith(("–", "-")):
                continue
            found.append((i, m.group(0).strip()))
    return found


def _pages() -> list[Path]:
    skip = {ROOT / p for p in NOT_YET + GENERATED}
    return [p for p in render_docs.doc_files() if p not in skip]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_measured_figure_is_typed(page: Path) -> None:
    """Every measured figure in the README and docs comes from a results file through a marker
    (``python benchmarks/render_docs.py`` fills it)."""
    rel = page.relative_to(ROOT).as_posix()
    lines = page.read_text(encoding="utf-8").splitlines()
    allowed = ALLOWED.get(rel, ())
    typed = [f"{rel}:{i}: {fig!r} in: {lines[i - 1].strip()[:120]}"
             for i, fig in typed_figures("\n".join(lines))
             if not any(fig in a and a in lines[i - 1] for a in allowed)]
    assert not typed, "typed measurements (render them from a results file, or drop them):\n" \
        + "\n".join(typed)


@pytest.mark.parametrize("text, figures", [
    ("The fuzzer ran 10,001 cases in 12.5 s.", ["12.5 s"]),
    ("4 requests in flight gave 0.89× the blocks/s of 1", ["0.89×"]),
    ("peak 660 MB, 23 videos/s, F 0.31, 96% of steps kept, 1.5x slower", [
        "660 MB", "23 videos/s", "0.31", "96%", "1.5x"]),
    ("| decode | 1.04× ffmpeg | x |", ["1.04×"]),
    ("| x | p99 875.3 ms | y |", ["875.3 ms"]),
    # not measurements: markers, code, links, bounds, settings, ranges, option rows
    ("ok <!--fig a.json:b .1f×-->1.0×<!--/fig--> on 2 cores, [x](docs/x.md#3-1) `0.5 s`", []),
    ("targets ≤ 5 % and ≥ 90 %, at most 30 s, up to 60 s, every 4.5 s, on 60 s of speech", []),
    ("the default is 0.75; --merge-seconds 30 s; crops of 1.5–4.5 s, 70–90 % of the frame", []),
    ("| `--block-words` | 200 | 0.7 |\n```\n12.5 s\n```", []),
])
def test_typed_figures_are_found(text: str, figures: list[str]) -> None:
    assert [f for _, f in typed_figures(text)] == figures
