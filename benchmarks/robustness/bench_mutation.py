"""Mutation check of the pure core: what share of small code changes the fast unit tests catch.

Run: .venv/bin/python benchmarks/robustness/bench_mutation.py [--modules parse,blocks]
                                                               [--suite both]
     -> benchmarks/results/mutation.{json,md}

mutmut 3 (the ``dev`` extra) rewrites every function of a module into many mutants (an operator
flipped, a constant changed, an argument dropped...) and runs, per mutant, the tests that call
that function; a mutant no test fails on "survived". Each module is mutated against only the
fast unit tests mapped to it below (no real models, no generated videos), so a run takes
minutes. Two suites run in the same invocation: ``before`` (the tests that existed before the
mutation check: the baseline) and ``after`` (plus ``tests/**/test_*mutants.py``, written to
kill the survivors that showed real untested behaviour). Score = (killed + timeout) / mutants;
a mutant no selected test even reaches counts as not killed.

Every module runs in its own scratch copy under ``benchmarks/work/mutation/`` (mutmut writes
``mutants/`` next to its ``pyproject.toml``), so the repository is never touched. Not in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import RESULTS as OUT
from _harness import ROOT, WORK, machine

WORK = WORK / "mutation"
PY = Path(sys.executable)
MUTMUT = PY.parent / "mutmut"

# module -> the file, the functions mutated (None: all) and the fast tests that kill its mutants
# (existing ones = the "before" suite; "new" ones join for "after").
MODULES: dict[str, dict[str, Any]] = {
    "parse": {
        "file": "src/howtocap/caption/parse.py", "functions": None,
        "tests": ["tests/caption/test_parse.py",
                  "tests/test_fuzz.py::test_reader_gives_a_result_or_one_line[LLM reply parser]"],
        "new": ["tests/caption/test_mutants.py"],
    },
    "blocks": {
        "file": "src/howtocap/caption/blocks.py", "functions": None,
        "tests": ["tests/caption/test_blocks.py", "tests/caption/test_parse.py"],
        "new": ["tests/caption/test_mutants.py"],
    },
    "chatter": {
        "file": "src/howtocap/caption/chatter.py", "functions": None,
        "tests": ["tests/caption/test_quality.py::test_chatter_patterns",
                  "tests/caption/test_quality.py::test_chatter_signoffs_and_digressions",
                  "tests/caption/test_quality.py::test_chatter_captions_are_dropped_and_counted"],
        "new": ["tests/caption/test_mutants.py"],
    },
    "align": {
        "file": "src/howtocap/align/filter.py", "functions": None,
        "tests": ["tests/align/test_align.py"],
        "new": ["tests/align/test_mutants.py"],
    },
    "window maths": {
        "file": "src/howtocap/encoders/windows.py", "functions": ["rows_covering", "window_means"],
        "tests": ["tests/align/test_align.py", "tests/encoders/test_cache.py"],
        "new": ["tests/align/test_mutants.py"],
    },
    "metrics": {
        "file": "src/howtocap/metrics.py", "functions": None,
        "tests": ["tests/test_metrics.py", "tests/evaluate/test_crosstask.py"],
        "new": ["tests/test_metrics_mutants.py"],
    },
    # No fast test covered fingerprint.py before: only tests/engine/test_fingerprint.py's whole
    # caption runs reached it (3 tests, ~33 s a mutant), which a first run found far too slow to
    # use.
    "fingerprint": {
        "file": "src/howtocap/engine/fingerprint.py", "functions": None,
        "tests": [],
        "new": ["tests/engine/test_mutants.py"],
    },
    # a model file's hash moved out of fingerprint.py (#39), with the same tests
    "model hashes": {
        "file": "src/howtocap/bundled.py", "functions": ["file_hash", "files_hash"],
        "tests": [],
        "new": ["tests/engine/test_mutants.py"],
    },
}

# Survivors read and judged equivalent (no observable behaviour changes), keyed by mutant name;
# the md shows each one's diff next to the reason so the judgement can be checked.
EQUIVALENT: dict[str, str] = {
    "howtocap.caption.parse.x_norm_text__mutmut_5":
        "the key is only compared with keys built the same way: upper- or lower-casing "
        "finds the same duplicates",
    "howtocap.caption.parse.x_norm_text__mutmut_6":
        "the text is lower-cased first, so an upper-case X is never there to strip",
    "howtocap.caption.parse.x_clean_text__mutmut_13":
        "parse_reply removed every `**` from the line already; clean_text never sees one",
    "howtocap.caption.parse.x_clean_text__mutmut_14": "the same: no `**` is left to replace",
    "howtocap.caption.parse.x_clean_text__mutmut_20":
        "the text was stripped of those characters just before and only lost a quote before "
        "its final punctuation, so only whitespace can be left to strip, which None strips too",
    "howtocap.caption.blocks.x__sentences__mutmut_31":
        "a NaN end stays NaN, but `max(start, nan)` is `start`: the same end as the fallback",
    "howtocap.caption.blocks.x__sentences__mutmut_47": "numpy reads `kind` case-insensitively",
    "howtocap.align.filter.x_align_video__mutmut_96":
        "reach is all or nothing per caption (clamping only moves a window towards its "
        "caption), and an unreachable caption's start and score are replaced anyway",
    "howtocap.align.filter.x_video_extent__mutmut_10":
        "`duration and ...` already short-circuits on 0, so `> 0` and `>= 0` agree",
    "howtocap.align.filter.x_window_scores__mutmut_49":
        "einsum accepts upper-case subscripts alike",
    "howtocap.align.filter.x_align_video__mutmut_22":
        "`f.duration or 1` is only reached when every duration is truthy, so never used",
    "howtocap.align.filter.x_align_video__mutmut_18":
        "without the guard the min still meets the 0 of a missing duration: the same 0.0",
    "howtocap.align.filter.x_align_video__mutmut_222":
        "an outside caption keeps its start, so its computed offset is 0 anyway",
    "howtocap.align.filter.x_best_offsets__mutmut_21":
        "`>` and `>=` against `top - 1e-6` differ only for a score exactly 1e-6 below the top",
    "howtocap.align.filter.x_candidate_windows__mutmut_30":
        "when the video is exactly one clip long both branches give the window [0, extent)",
    "howtocap.align.filter.x_choose_threshold__mutmut_61":
        "with keep_top == pool size the partition's element 0 is the minimum as well",
    "howtocap.align.filter.xǁAlignConfigǁscoring_key__mutmut_19":
        "the dict literal's order is fixed, so the JSON is the same with or without sort_keys",
    "howtocap.align.filter.xǁAlignConfigǁscoring_key__mutmut_6":
        "a renamed key changes every config's key alike, so equal settings still match and "
        "different ones still differ (scores cached by an older version would be recomputed)",
    "howtocap.align.filter.x_apply_filter__mutmut_30":
        "keep_all then takes the explicit-threshold path, whose threshold without a setting is "
        "-inf: every caption is kept either way",
    "howtocap.encoders.windows.x_window_means__mutmut_4":
        "cumsum into a float64 `out` accumulates in float64 whatever the input dtype",
    "howtocap.encoders.windows.x_rows_covering__mutmut_58":
        "an empty window's hi is at most lo = mid, and the clip to lo + 1 makes it mid + 1",
    "howtocap.encoders.windows.x_rows_covering__mutmut_64":
        "the same clip lifts mid - 1 to mid + 1",
    "howtocap.metrics.x_metrics_from_ranks__mutmut_18": "float('NAN') is NaN too",
    "howtocap.metrics.x_ranks__mutmut_62":
        "the chunk size bounds memory only: ranks are per row, whatever the chunking",
    "howtocap.metrics.x_ranks__mutmut_80":
        "a step of 1 recomputes each row as the first of an overlapping chunk: the same "
        "ranks, only slower",
    "howtocap.metrics.x_ranks__mutmut_86":
        "the cheap pre-check skipped: the exact NaN test alone gives the same verdict",
    "howtocap.metrics.x__gt_tensor__mutmut_9":
        "np.asarray of a CPU tensor is the same array (on CUDA it would differ: no GPU here)",
    "howtocap.metrics.x_reference_ranks__mutmut_56":
        "`one_order(None)`: None is falsy like False",
}
# Survivors not reviewed one by one but of a kind that rarely changes behaviour here: an
# argument dropped or set to None where the default does the same on the inputs the code gets.
ARGUMENT_ONLY = re.compile(r"\b(dtype|device|strict|sort_keys|kind|errors|invalid|divide)=None\b"
                           r"|, \)")

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no_tests", 33: "no_tests",
          34: "skipped", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout",
          255: "timeout", 37: "type_check"}
COUNTS = ("mutants", "killed", "survived", "timeout", "no_tests", "other")

# Run inside a scratch dir: every mutant's status and, for the survivors, mutmut's own diff.
_DUMP = """
import json, sys
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.utils.file_utils import walk_mutatable_files
out = {}
for path in walk_mutatable_files():
    m = SourceFileMutationData(path=path)
    m.load()
    for key, code in m.exit_code_by_key.items():
        diff = get_diff_for_mutant(key, path=path) if code == 0 else None
        out[key] = {"code": code, "diff": diff}
json.dump(out, sys.stdout)
"""


def _toml_value(v: Any) -> str:
    return json.dumps(v)  # strings, numbers and lists of strings are valid TOML as JSON


def _scratch(name: str, suite: str, spec: dict[str, Any]) -> tuple[Path, list[str]]:
    """A copy of src/ and tests/ with a pyproject.toml holding pytest's settings and mutmut's."""
    d = WORK / suite / name.replace(" ", "_")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    shutil.copytree(ROOT / "src", d / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", d / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "artifacts"))
    tests = list(spec["tests"]) + (list(spec["new"]) if suite == "after" else [])
    # the project's own pyproject (pytest's settings) minus any [tool.mutmut] table, plus ours
    own = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "",
                 (ROOT / "pyproject.toml").read_text())
    lines = [own.rstrip(), "", "[tool.mutmut]", 'source_paths = ["src"]',
              f"only_mutate = {_toml_value([spec['file']])}",
              f"pytest_add_cli_args_test_selection = {_toml_value(tests)}",
              'pytest_add_cli_args = ["-p", "no:cacheprovider"]', ""]
    (d / "pyproject.toml").write_text("\n".join(lines))
    return d, tests


def _dotted(file: str) -> str:
    return file.removeprefix("src/").removesuffix(".py").replace("/", ".")


def run_module(name: str, suite: str, spec: dict[str, Any], children: int) -> dict[str, Any]:
    d, tests = _scratch(name, suite, spec)
    if not tests:  # nothing to run (mutmut would run the whole suite): counted when merged
        print(f"  {suite:6s} {name:12s} no fast tests: every mutant counts as not killed")
        return {"file": spec["file"], "functions": spec["functions"] or "all", "tests": [],
                **dict.fromkeys(COUNTS, 0), "score": 0.0, "seconds": 0.0, "survivors": [],
                "untested": True}
    patterns = [f"{_dotted(spec['file'])}.x_{f}*" for f in spec["functions"] or []]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the mutants, not src/
    env["OMP_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run([str(MUTMUT), "run", "--max-children", str(children), *patterns],
                          cwd=d, env=env, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    (d / "mutmut.log").write_text(proc.stdout[-20000:] + "\n" + proc.stderr[-20000:])
    dump = subprocess.run([str(PY), "-c", _DUMP], cwd=d, env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0 or dump.returncode != 0:
        raise SystemExit(f"{name}: mutmut run failed (exit {proc.returncode}), see "
                         f"{d / 'mutmut.log'}\n{dump.stderr[-2000:]}")
    mutants = json.loads(dump.stdout)
    if spec["functions"]:
        keep = tuple(f".x_{f}__mutmut_" for f in spec["functions"])
        mutants = {k: v for k, v in mutants.items() if any(s in k for s in keep)}
    counts = dict.fromkeys(COUNTS, 0)
    survivors = []
    for key, m in sorted(mutants.items(), key=lambda kv: _natural(kv[0])):
        status = STATUS.get(m["code"], "other")
        counts["mutants"] += 1
        counts[status if status in counts else "other"] += 1
        if status == "survived":
            survivors.append({"name": key, "diff": _short_diff(m["diff"])})
    print(f"  {suite:6s} {name:12s} {counts['killed'] + counts['timeout']}/{counts['mutants']} "
          f"killed in {secs:.0f} s", flush=True)
    return {"file": spec["file"], "functions": spec["functions"] or "all", "tests": tests,
            **counts, "score": _score(counts), "seconds": round(secs, 1),
            "survivors": survivors}


def _natural(key: str) -> tuple[str, int]:
    head, _, num = key.rpartition("__mutmut_")
    return head, int(num) if num.isdigit() else 0


def _short_diff(diff: str | None) -> str:
    """Only the changed lines of mutmut's unified diff."""
    if not diff:
        return ""
    return "\n".join(ln for ln in diff.splitlines()
                     if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


def _inline(diff: str) -> str:
    """A changed-lines diff on one line: `- old` → `+ new`."""
    parts = [" ".join(ln.split()).replace("`", "'") for ln in diff.splitlines()]
    return " → ".join(f"`{p}`" for p in parts) or "(no diff)"


def _score(c: dict[str, int]) -> float:
    return round((c["killed"] + c["timeout"]) / c["mutants"], 4) if c["mutants"] else 0.0


def total(modules: dict[str, dict[str, Any]]) -> dict[str, Any]:
    t = {k: sum(m[k] for m in modules.values()) for k in COUNTS}
    return {**t, "score": _score(t),
            "seconds": round(sum(m["seconds"] for m in modules.values()), 1)}


def write_md(res: dict[str, Any], path: Path) -> None:
    after, before = res["after"], res["before"]
    # results written before the harness held "python" and "cpus" instead of "machine"
    where = res.get("machine") or f"Python {res['python']}, {res['cpus']} CPUs"
    lines = [
        "# Mutation check of the pure core", "",
        f"`benchmarks/robustness/bench_mutation.py`: {res['tool']} {res['version']}, {where}, "
        f"{res['max_children']} workers at nice 10. "
        "Each module's mutants run against only the fast unit tests mapped to it; `before` is "
        "the suite without `tests/**/test_*mutants.py`, `after` with them, on the same "
        "sources. Score = (killed + timeout) / mutants; a mutant no mapped test reaches "
        "counts as not killed.", "",
        *[f"- {name}: measured {' to '.join(dict.fromkeys([s['dates'][0], s['dates'][-1]]))}"
          f", {s['wall_seconds']:.0f} s of mutmut runs"
          + (f", load average {s['load'][0]}–{s['load'][1]} (2 cores shared with other jobs)"
             if s.get("load") else "") for name, s in (("before", before), ("after", after))],
        "",
        "| module | functions | mutants | killed before | killed after | survived after "
        "| no test reaches it (after) | timeout | score before | score after | wall s (after) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in after["modules"].items():
        b = before["modules"].get(name, {})
        funcs = m["functions"] if m["functions"] == "all" else ", ".join(m["functions"])
        lines.append(f"| {name} (`{m['file'].removeprefix('src/howtocap/')}`) | {funcs} | "
                     f"{m['mutants']} | {b.get('killed', '-')} | {m['killed']} | "
                     f"{m['survived']} | {m['no_tests']} | {m['timeout']} | "
                     f"{b.get('score', 0):.1%} | "
                     f"{m['score']:.1%} | {m['seconds']:.0f} |")
    bt, at = before["total"], after["total"]
    lines.append(f"| **total** | | {at['mutants']} | {bt['killed']} | {at['killed']} | "
                 f"{at['survived']} | {at['no_tests']} | {at['timeout']} | {bt['score']:.1%} | "
                 f"{at['score']:.1%} "
                 f"| {at['seconds']:.0f} |")
    lines += ["", "## Notes", "",
              "- mutmut 3 mutates function bodies only: module-level constants (the reply "
              "parser's and the chatter test's regexes) are never mutated, so `chatter` "
              "measures `is_chatter` alone.",
              "- Writing the test for a first-run survivor (the odd-quote rule of `clean_text`) "
              "found a real bug: a caption that ends in a quoted phrase loses its closing "
              "quote (`tests/caption/test_mutants.py`, a strict xfail until it is fixed)."]
    for name, m in before["modules"].items():
        part = m.get("integration_partial")
        if m.get("untested") and part:
            checked = part["killed"] + part["survived"] + part["timeout"]
            lines.append(
                f"- {name}: no fast test reached it before; its only tests "
                f"({', '.join(f'`{t}`' for t in part['tests'])}) run whole caption pipelines "
                f"(~33 s a mutant). The first run tried them and was stopped for time after "
                f"{part['seconds']:.0f} s: of {checked} mutants checked {part['killed']} "
                f"killed, {part['survived']} survived; {part['no_tests']} were in functions "
                "those tests never call.")
    lines += ["", "## Test files per module", ""]
    for name, m in after["modules"].items():
        lines.append(f"- {name}: " + ", ".join(f"`{t}`" for t in m["tests"]))
    survivors = [s for m in after["modules"].values() for s in m["survivors"]]
    eq = [s for s in survivors if s["name"] in EQUIVALENT]
    args_only = [s for s in survivors if s["name"] not in EQUIVALENT
                 and ARGUMENT_ONLY.search(s["diff"].split("\n+", 1)[-1])]
    rest = [s for s in survivors if s not in eq and s not in args_only]
    lines += ["", "## Survivors read and judged equivalent (no behaviour changes)", ""]
    lines += [f"- `{s['name']}`: {EQUIVALENT[s['name']]}; {_inline(s['diff'])}"
              for s in eq] or ["None listed."]
    lines += ["", f"## Argument-only survivors ({len(args_only)}, not reviewed one by one)", "",
              "An argument dropped or set to None (`dtype=`, `strict=`, `sort_keys=`...) "
              "where the default does the same on the inputs the code is given: mostly "
              "equivalent, listed so the claim can be checked.", ""]
    lines += [f"- `{s['name']}`: {_inline(s['diff'])}" for s in args_only] or ["None."]
    lines += ["", f"## Other survivors ({len(rest)})", "",
              "Not killed and not judged equivalent: each is a candidate for a test (or a "
              "string/message change no test should pin).", ""]
    lines += [f"- `{s['name']}`: {_inline(s['diff'])}" for s in rest] or ["None."]
    path.write_text("\n".join(lines) + "\n")


def file_hash(name: str) -> str:
    """What a module's mutants are made from: results on other sources are not comparable."""
    return hashlib.blake2b((ROOT / MODULES[name]["file"]).read_bytes(),
                           digest_size=8).hexdigest()


def run_suite(suite: str, names: list[str], children: int) -> dict[str, Any]:
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    mods = {}
    for n in names:
        load, date = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        mods[n] = run_module(n, suite, MODULES[n], children)
        mods[n].update(sources=file_hash(n), date=date,
                       load=[round(load, 2), round(os.getloadavg()[0], 2)])
    return {"modules": mods, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def finish(res: dict[str, Any]) -> None:
    """Untested modules take their mutant count from the other suite; totals; the headline."""
    for suite, other in (("before", "after"), ("after", "before")):
        for name, m in res.get(suite, {}).get("modules", {}).items():
            twin = res.get(other, {}).get("modules", {}).get(name)
            if m.get("untested") and twin:
                m["mutants"] = m["no_tests"] = twin["mutants"]
    for suite in ("before", "after"):
        if suite in res:  # a suite may combine modules measured in several runs
            mods = res[suite]["modules"].values()
            res[suite]["total"] = total(res[suite]["modules"])
            dates = sorted({m["date"] for m in mods if m.get("date")})
            loads = [x for m in mods for x in (m.get("load") or [])]
            res[suite].update(dates=dates, wall_seconds=res[suite]["total"]["seconds"],
                              load=[min(loads), max(loads)] if loads else None)
    res["total"] = res.get("after", res.get("before"))["total"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(MODULES),
                    help="comma-separated subset of: " + ", ".join(MODULES))
    ap.add_argument("--suite", choices=("both", "before", "after"), default="both")
    ap.add_argument("--update", action="store_true",
                    help="keep the existing results of suites/modules not run now (only "
                         "where their sources are unchanged): re-run one module or one suite")
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--out", default=str(OUT / "mutation"))
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the .md from the .json (after editing EQUIVALENT)")
    args = ap.parse_args()
    out = Path(args.out)
    if args.render:
        write_md(json.loads(out.with_suffix(".json").read_text()), out.with_suffix(".md"))
        return
    names = [n.strip() for n in args.modules.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        raise SystemExit(f"unknown modules {unknown}; choose from {list(MODULES)}")
    os.nice(10)  # the machine is shared; mutmut's workers inherit this
    suites = ("before", "after") if args.suite == "both" else (args.suite,)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"tool": "mutmut", "version": version("mutmut"),
                           "machine": machine(),
                           "max_children": args.max_children}
    for suite in suites:
        res[suite] = run_suite(suite, names, args.max_children)
    res["wall_seconds"] = round(time.perf_counter() - t0, 1)
    if args.update and out.with_suffix(".json").exists():  # read at the end: it may be new
        old = json.loads(out.with_suffix(".json").read_text())
        for suite in ("before", "after"):
            if suite not in old:
                continue
            kept = {n: m for n, m in old[suite]["modules"].items()
                    if n in MODULES and m.get("sources") == file_hash(n)
                    and n not in res.get(suite, {}).get("modules", {})}
            if suite not in res:
                res[suite] = {k: v for k, v in old[suite].items() if k != "modules"}
                res[suite]["modules"] = {}
            res[suite]["modules"] = {n: res[suite]["modules"].get(n) or kept[n]
                                     for n in MODULES if n in res[suite]["modules"] or n in kept}
    finish(res)
    for suite, other in (("before", "after"), ("after", "before")):
        if suite not in res:
            res[suite] = res[other]
            res["note"] = f"{suite} not measured: shows {other}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    write_md(res, out.with_suffix(".md"))
    print(f"score before {res['before']['total']['score']:.1%}, after "
          f"{res['after']['total']['score']:.1%}; wrote {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
