"""A parser process of ``caption.filler.ParserPool``: reads length-prefixed JSON requests
(``{"texts": [...], "batch_size": n}``) on stdin and answers each with the verdicts, in order.

Its first message is ``{"ready": true}`` once the parser is loaded (or ``{"error": ...}``), so
the pool reports a missing model before any video. It exits at end of input.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any, BinaryIO


def _send(out: BinaryIO, obj: object) -> None:
    data = json.dumps(obj).encode()
    out.write(struct.pack(">I", len(data)) + data)
    out.flush()


def _recv(inp: BinaryIO) -> Any | None:
    head = inp.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    return json.loads(inp.read(size))


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # thinc imports torch when it can (seconds and ~200 MB a process); the parse never uses it
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    from howtocap.caption.filler import load_parser, verdict
    from howtocap.errors import HowtocapError

    try:
        nlp = load_parser(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None)
    except HowtocapError as exc:
        _send(out, {"error": str(exc)})
        return
    _send(out, {"ready": True})
    while (req := _recv(inp)) is not None:
        docs = nlp.pipe(req["texts"], batch_size=int(req.get("batch_size", 256)))
        _send(out, [verdict(doc) for doc in docs])


if __name__ == "__main__":
    main()
