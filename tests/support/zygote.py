"""A pre-warmed Python that forks one child per ``howtocap`` command line (a zygote).

Each CLI test used to start ``python -m howtocap.cli`` afresh and pay the import of the
pipeline (torch, pandas, pyarrow, ...) every time: seconds of CPU per call, hundreds of calls.
This script imports those modules once, then reads one request per line on stdin and forks a
child per request. The child does what ``python -m howtocap.cli`` does — the argv, environment
and working directory of the request, fd 0 from /dev/null, fd 1 and 2 into the given files,
``runpy`` of ``howtocap.cli`` as ``__main__`` — and exits through the normal interpreter exit
(atexit hooks, flushing, finalizers, an uncaught exception's traceback and exit 1), so the test
sees the same output and exit code. The zygote answers ``pid PID`` at once and ``exit PID
STATUS`` (the raw wait status) when that child ends, so several children can run at once (the
kill tests signal one while it runs); a child that crashes or is killed only ends itself.
Run as a file: ``python zygote.py MODULE[:FUNCTION]...``; a request may name more to preload.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import sys


def _child(req: dict, wakeup: tuple[int, int]) -> None:
    """Become ``python -m howtocap.cli ARGS`` (never returns to the request loop)."""
    import runpy

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wakeup:
        os.close(fd)
    if req.get("cores"):  # the first N of the cores the zygote may use
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:req["cores"]])
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
        try:
            obj = importlib.import_module(mod)
        except ModuleNotFoundError as exc:  # gone in a refactor: only a speed-up is lost
            if exc.name != mod:
                raise
            done.add(name)
            continue
        if fn:
            getattr(obj, fn)()
        done.add(name)
    if todo:
        gc.collect()
        gc.freeze()  # the children's collections (and exit) skip the imported modules' objects


def main() -> None:
    done: set[str] = set()
    preload(sys.argv[1:], done)
    answers = sys.stdout
    wakeup = os.pipe()  # SIGCHLD writes a byte here: select wakes up to reap the child
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    print("ready", file=answers, flush=True)
    buf, live = b"", set()
    while True:
        ready = select.select([0, wakeup[0]], [], [])[0]
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
        while live:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            live.discard(pid)
            print("exit", pid, status, file=answers, flush=True)
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # the test process closed us: what it left running goes too
            for pid in live:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            preload(req.get("preload", []), done)  # the first heavy command pays it, once
            pid = os.fork()
            if pid == 0:
                _child(req, wakeup)
            live.add(pid)
            print("pid", pid, file=answers, flush=True)


if __name__ == "__main__":
    main()
