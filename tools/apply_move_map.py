"""Rewrite ``howtocap.<old>`` references after modules (and names) moved, from a mapping file.

Usage: ``python tools/apply_move_map.py [--map tools/move_map.txt] FILE...``

``move_map.txt`` holds one ``old.dotted new.dotted`` pair a line (``#`` starts a comment): a
moved module, or a moved name (``howtocap.pipeline.caption.CaptionRunConfig
howtocap.caption.config.CaptionRunConfig``) when a name left its module's company. The script
rewrites, in any text file:

* ``from old import a, b`` (split into one line per new module when the names went apart) and
  ``import old [as x]`` in Python files (parsed, so parenthesised imports work);
* every other dotted ``howtocap.old...`` (monkeypatch strings, docs, comments) and
  ``howtocap/old.py`` paths.

It is idempotent: a name that already resolves to a module of the new layout (a mapped value
or a file under ``src/``) is left alone, and a package that took an old module's name
(``howtocap.align``: the module ``align.py`` became the package ``align/``) is rewritten only
in the dotted forms that still reach into the old module. Run ``ruff check --fix --select I``
on the Python files afterwards to re-sort the import blocks.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOTTED = re.compile(r"\bhowtocap(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(r"\bhowtocap(?:/[A-Za-z_][A-Za-z0-9_]*)+\.py\b")


def load_map(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            old, new = line.split()
            out[old] = new
    return out


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the current source tree."""
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


class Mover:
    def __init__(self, mapping: dict[str, str]) -> None:
        self.map = mapping
        # new modules, and the modules a moved name went to (which may not exist yet)
        self.values = set(mapping.values()) | {v.rpartition(".")[0] for v in mapping.values()}

    def _bare_is_new(self, key: str) -> bool:
        """The old module's name is now a package that holds its code (align -> align/)."""
        return self.map[key].startswith(key + ".")

    def dotted(self, name: str) -> str:
        """The new spelling of a dotted reference (unchanged when it is already new)."""
        bits = name.split(".")
        for n in range(len(bits), 1, -1):
            prefix = ".".join(bits[:n])
            if prefix in self.map:
                if n == len(bits) and self._bare_is_new(prefix):
                    return name
                return ".".join([self.map[prefix], *bits[n:]])
            if prefix in self.values or is_module(prefix):
                return name
        return name

    def target(self, module: str, name: str) -> tuple[str, str]:
        """Where ``from module import name`` must now import ``name`` from."""
        full = f"{module}.{name}"
        if full in self.map and not (self._bare_is_new(full) and is_module(full)):
            mod, _, new_name = self.map[full].rpartition(".")
            return mod, new_name
        if is_module(full) and full not in self.map:
            return module, name  # a submodule of the new layout
        if module in self.map:  # a name of the old module (not one of the new package)
            return self.map[module], name
        return self.dotted(module), name


def _render_from(indent: str, module: str, names: list[str]) -> str:
    one = f"{indent}from {module} import {', '.join(names)}"
    if len(one) <= 100:
        return one
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {module} import (\n{body}{indent})"


def rewrite_imports(text: str, mover: Mover) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "howtocap" or node.module.startswith("howtocap.")):
            groups: dict[str, list[str]] = {}
            for alias in node.names:
                mod, name = mover.target(node.module, alias.name)
                shown = name if alias.asname is None and name == alias.name else \
                    f"{name} as {alias.asname or alias.name}"
                groups.setdefault(mod, []).append(shown)
            if list(groups) == [node.module] and all(
                    s == (a.name if a.asname is None else f"{a.name} as {a.asname}")
                    for s, a in zip(groups[node.module], node.names, strict=True)):
                continue
            first = lines[node.lineno - 1]
            indent = first[:len(first) - len(first.lstrip())]
            new = "\n".join(_render_from(indent, m, ns) for m, ns in groups.items())
            edits.append((node.lineno, node.end_lineno or node.lineno, new))
        elif isinstance(node, ast.Import):
            changed = False
            parts = []
            for alias in node.names:
                new_name = mover.dotted(alias.name)
                changed |= new_name != alias.name
                parts.append(new_name if alias.asname is None else
                             f"{new_name} as {alias.asname}")
            if changed:
                first = lines[node.lineno - 1]
                indent = first[:len(first) - len(first.lstrip())]
                tail = first.rstrip("\n").split("#", 1)
                comment = f"  #{tail[1]}" if len(tail) > 1 and node.lineno == node.end_lineno \
                    else ""
                edits.append((node.lineno, node.end_lineno or node.lineno,
                              f"{indent}import {', '.join(parts)}{comment}"))
    for start, end, new in sorted(edits, reverse=True):
        old_last = lines[end - 1]
        ending = "\n" if old_last.endswith("\n") else ""
        # keep the trailing comment of a one-line ``from`` import (a noqa)
        if start == end and "#" in old_last and " import " in old_last and "#" not in new:
            new += "  #" + old_last.rstrip("\n").split("#", 1)[1]
        lines[start - 1:end] = [new + ending]
    return "".join(lines)


def rewrite_text(text: str, mover: Mover) -> str:
    text = DOTTED.sub(lambda m: mover.dotted(m.group(0)), text)

    def path(m: re.Match[str]) -> str:
        dotted = m.group(0)[:-3].replace("/", ".")
        # ``howtocap/align.py`` is the old module even when ``howtocap/align/`` is a package now
        new = mover.map.get(dotted) or mover.dotted(dotted)
        if new == dotted:
            return m.group(0)
        if is_module(new) and (SRC.joinpath(*new.split(".")) / "__init__.py").is_file():
            return new.replace(".", "/") + "/__init__.py"
        return new.replace(".", "/") + ".py"

    return PATH.sub(path, text)


def apply(path: Path, mover: Mover) -> bool:
    text = path.read_text()
    new = rewrite_imports(text, mover) if path.suffix == ".py" else text
    new = rewrite_text(new, mover)
    if new != text:
        path.write_text(new)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--map", type=Path, default=ROOT / "tools" / "move_map.txt")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    mover = Mover(load_map(args.map))
    for f in args.files:
        if f.is_file() and apply(f, mover):
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
