"""A pre-warmed Python that forks one child per ``howtocap`` command line (a zygote).

Each CLI test used to start ``python -m howtocap.cli`` afresh and pay the import of the
pipeline (torch, pandas, pyarrow, ...) every time: seconds of CPU per call, hundreds of calls.
This script imports those modules once, then reads one request per line on stdin and forks a
child per request. The child does what ``python -m howtocap.cli`` does — the argv, environment
and working directory of the request, fd 0 from /dev/null, fd 1 and 2 into the given files,
``runpy`` of ``howtocap.cli`` as ``__main__`` — and exits through the normal interpreter exit
(atexit hooks, flushing, finalizers, an uncaught exception's traceback and exit 1), so the test
sees the same output and exit code. The zygote answers ``pid`` then the raw wait status; a
child that crashes or is killed only ends itself.
Run as a file: ``python zygote.py MODULE[:FUNCTION]...``; a request may name more to preload.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys


def _child(req: dict) -> None:
    """Become ``python -m howtocap.cli ARGS`` (never returns to the request loop)."""
    import runpy

    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    null = os.open(os.devnull, os.O_RDONLY)  # fd 0 and 1 were the zygote's request pipes
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    sys.path[0] = os.getcwd()  # what ``python -m`` puts first
    sys.argv = ["howtocap", *req["args"]]
    runpy.run_module("howtocap.cli", run_name="__main__", alter_sys=True)
    sys.exit(0)


def preload(names: list[str], done: set[str]) -> None:
    """Import each MODULE (or call MODULE:FUNCTION, a cached model load) not done yet."""
    todo = [name for name in names if name not in done]
    for name in todo:
        mod, _, fn = name.partition(":")
        obj = importlib.import_module(mod)
        if fn:
            getattr(obj, fn)()
        done.add(name)
    if todo:
        gc.collect()
        gc.freeze()  # the children's collections (and exit) skip the imported modules' objects


def main() -> None:
    done: set[str] = set()
    preload(sys.argv[1:], done)
    requests, answers = sys.stdin, sys.stdout
    print("ready", file=answers, flush=True)
    for line in requests:
        req = json.loads(line)
        preload(req.get("preload", []), done)  # the first heavy command pays it, once
        pid = os.fork()
        if pid == 0:
            _child(req)
        print(pid, file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        print(status, file=answers, flush=True)


if __name__ == "__main__":
    main()
