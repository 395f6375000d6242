"""Constrained decoding: the model can only write ``<int>s: <one sentence>`` lines.

Small models answer the paper's prompt with a paragraph and no timestamps about as often as
not; a grammar makes every reply parse. The same language is given twice, as GBNF for
llama.cpp and as a regex for vLLM's structured outputs, and ``parse.parse_reply`` reads both.

Shape choices, measured on Qwen2.5-Coder (``benchmarks/results/llm.md``): the reply may end
after any line (a forced newline never lets the model stop: it pads with invented steps);
commas only between words (else runs of commas); words up to 24 characters (a tight cap glues
words). ``STEP_GBNF``/``STEP_REGEX`` (``grammar = "steps"``, issue #40) also forbid a line to
open with a word of ``NO_OPENING`` (also before an apostrophe, "I'm"): the first-person
retelling ("So now I'm adding…") is not writable, the line must begin with the action.
"""

from __future__ import annotations

MAX_LINES = 40
MAX_WORDS = 24
NO_OPENING = ("i", "we", "you", "so", "and", "but", "if")

_CHARS = "A-Za-z0-9'%/&-"  # a word's characters after its first


def _line_gbnf(first: str) -> str:
    return rf"""root ::= line ("\n" line){{0,{MAX_LINES - 1}}} "\n"?
line ::= stamp "s: " {first} (sep word){{0,{MAX_WORDS - 1}}} [.!]
stamp ::= [0-9]{{1,5}}
word ::= [A-Za-z0-9] [{_CHARS}]{{0,23}}
sep ::= " " | ", "
"""


CAPTION_GBNF = _line_gbnf("word")

_WORD = rf"[A-Za-z0-9][{_CHARS}]{{0,23}}"


def _line_regex(first: str) -> str:
    line = rf"[0-9]{{1,5}}s: {first}(?:,? {_WORD}){{0,{MAX_WORDS - 1}}}[.!]"
    return rf"{line}(?:\n{line}){{0,{MAX_LINES - 1}}}\n?"


CAPTION_REGEX = _line_regex(_WORD)


def _both(c: str) -> str:
    return c.upper() + c.lower() if c.isalpha() else c


def _openings(words: tuple[str, ...], prefix: str = "") -> list[tuple[str, str, bool]]:
    """A first word that is none of ``words`` (nor one of them before an apostrophe), as
    alternatives ``(fixed prefix, excluded next characters, prefix may end the word)``: after
    the prefix either the word ends or comes a character not excluded, then any tail."""
    nexts = sorted({w[len(prefix)] for w in words if len(w) > len(prefix)})
    ends_forbidden = prefix in words
    out = [(prefix, "".join(nexts) + ("'" if ends_forbidden else ""),
            bool(prefix) and not ends_forbidden)]
    for c in nexts:
        out += _openings(tuple(w for w in words if w.startswith(prefix + c)), prefix + c)
    return out


def _class(excluded: str, first: bool) -> str:
    """A character class of word characters (a first character: letters and digits) minus
    ``excluded`` in both cases; written out, as GBNF has no class subtraction."""
    base = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + \
        [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    if not first:
        base += ["'", "%", "/", "&"]
    drop = {ch for e in excluded for ch in _both(e)}
    keep = "".join(ch for ch in base if ch not in drop)
    return "[" + keep + ("-" if not first else "") + "]"


def _first_word(words: tuple[str, ...]) -> tuple[str, str]:
    """The GBNF rule body and the regex of a first word that is not an opening in ``words``."""
    gbnf, regex = [], []
    for prefix, excluded, may_end in _openings(words):
        fixed = "".join(f"[{_both(c)}]" for c in prefix)
        nxt = _class(excluded, first=not prefix)
        tail = 23 - len(prefix) - 1
        body = f"{nxt}[{_CHARS}]{{0,{tail}}}" if tail > 0 else nxt
        gbnf.append(f"{fixed} {body}".strip() if prefix else body)
        regex.append(f"{fixed}{body}")
        if may_end:
            gbnf.append(fixed)
            regex.append(fixed)
    return " | ".join(f"( {g} )" for g in gbnf), "(?:" + "|".join(regex) + ")"


_FIRST_GBNF, _FIRST_REGEX = _first_word(NO_OPENING)
STEP_GBNF = _line_gbnf("first") + f"first ::= {_FIRST_GBNF}\n"
STEP_REGEX = _line_regex(_FIRST_REGEX)
