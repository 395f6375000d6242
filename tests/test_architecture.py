"""The architecture doc's rules, checked by reading every module's imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "howtocap"


def imports(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def modules(*parts: str) -> list[Path]:
    base = PKG.joinpath(*parts)
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def offenders(files: list[Path], *banned: str) -> dict[str, list[str]]:
    bad = {}
    for f in files:
        hits = sorted(m for m in imports(f) if any(m == b or m.startswith(b + ".")
                                                   for b in banned))
        if hits:
            bad[str(f.relative_to(PKG))] = hits
    return bad


def test_stages_never_import_the_pipeline_or_the_cli() -> None:
    stage_code = (modules("stages") + modules("stage") + modules("llm") + modules("align")
                  + modules("framecaps") + modules("asr"))
    assert offenders(stage_code, "howtocap.pipeline", "howtocap.cli", "howtocap.cliutil",
                     "typer") == {}


def test_io_and_library_code_never_import_the_cli() -> None:
    library = [f for f in PKG.rglob("*.py")
               if f.name not in ("cli.py", "cliutil.py", "align_cli.py", "__main__.py")
               and not f.name.endswith("_cli.py")]
    assert offenders(modules("io"), "howtocap.cli", "howtocap.cliutil", "typer",
                     "howtocap.pipeline") == {}
    assert offenders(library, "typer", "howtocap.cli", "howtocap.cliutil") == {}


def test_runners_never_touch_the_run_directory() -> None:
    assert offenders(modules("pipeline", "runners"), "howtocap.rundir") == {}


def test_encoders_and_training_do_not_import_each_other_in_a_cycle() -> None:
    enc_to_train = offenders(modules("encoders"), "howtocap.train")
    train_to_enc = offenders(modules("train", "checkpoint"), "howtocap.encoders")
    assert not (enc_to_train and train_to_enc), (enc_to_train, train_to_enc)


def test_only_rundir_knows_the_layout() -> None:
    """Run-directory paths (``DIR/parts``, ``DIR/config``, ``DIR/logs``, ``DIR/index``,
    status records) are spelled in rundir.py only; everyone else asks ``RunDir``."""
    layout = re.compile(r"""(?:root|run_dir|rd|rundir|out_dir)\s*/\s*["'](?:parts|config|logs|"""
                        r"""index|cache)["']|/\s*["']status["']""")
    spelled = {}
    for f in PKG.rglob("*.py"):
        if f.name != "rundir.py" and (hits := layout.findall(f.read_text())):
            spelled[str(f.relative_to(PKG))] = hits
    assert spelled == {}
