"""A parser process of ``caption.filler.ParserPool``: reads length-prefixed JSON requests
(``{"texts": [...], "batch_size": n, "kind": "verdict" | "imperative" | "step"}``) on stdin
and answers each with one answer a text, in order: the filler verdict, the imperative rewrite,
or both from one parse (``caption.imperative.JUDGES``).

Its first message is ``{"ready": true}`` once the parser is loaded (or ``{"error": ...}``), so
the pool reports a missing model before any video. It exits at end of input.
"""

from __future__ import annotations

import sys

from howtocap.caption.filler import load_parser, read_message, send_message
from howtocap.caption.imperative import JUDGES
from howtocap.errors import HowtocapError


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # thinc imports torch when it can (slow, and memory in every worker); the parse never uses
    # it, and nothing imported above has imported it yet (spaCy loads in ``load_parser``)
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]

    try:
        nlp = load_parser(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None)
    except HowtocapError as exc:
        send_message(out, {"error": str(exc)})
        return
    send_message(out, {"ready": True})
    while (req := read_message(inp)) is not None:
        docs = nlp.pipe(req["texts"], batch_size=int(req.get("batch_size", 256)))
        answer = JUDGES[req.get("kind", "verdict")]
        send_message(out, [answer(doc) for doc in docs])


if __name__ == "__main__":
    main()
