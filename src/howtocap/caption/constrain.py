"""Constrained decoding: the model can only write ``<int>s: <one sentence>`` lines.

Small models answer the paper's prompt with a paragraph and no timestamps about as often as
not; a grammar makes every reply parse. The same language is given twice, as GBNF for
llama.cpp and as a regex for vLLM's structured outputs, and ``parse.parse_reply`` reads both.

Shape choices, measured on Qwen2.5-Coder (see ``benchmarks/results/llm.md``): the reply may end
after any complete line (a grammar that forces a newline after every line never lets the model
stop, and it pads with invented steps); commas only between words (else runs of commas);
words up to 24 characters (a tight cap glues words together).
"""

from __future__ import annotations

MAX_LINES = 40
MAX_WORDS = 24

CAPTION_GBNF = rf"""root ::= line ("\n" line){{0,{MAX_LINES - 1}}} "\n"?
line ::= stamp "s: " word (sep word){{0,{MAX_WORDS - 1}}} [.!]
stamp ::= [0-9]{{1,5}}
word ::= [A-Za-z0-9] [A-Za-z0-9'%/&-]{{0,23}}
sep ::= " " | ", "
"""

_WORD = r"[A-Za-z0-9][A-Za-z0-9'%/&-]{0,23}"
CAPTION_REGEX = (rf"[0-9]{{1,5}}s: {_WORD}(?:,? {_WORD}){{0,{MAX_WORDS - 1}}}[.!]"
                 rf"(?:\n[0-9]{{1,5}}s: {_WORD}(?:,? {_WORD}){{0,{MAX_WORDS - 1}}}[.!])"
                 rf"{{0,{MAX_LINES - 1}}}\n?")
