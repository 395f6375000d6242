"""The real `howtocap` command in a child process, and the small inputs the CLI tests give it."""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HOWTOCAP = [sys.executable, "-m", "howtocap.cli"]

# What the zygote imports once: the command table for every command; the pipeline that
# caption/align/run load (torch, pandas, pyarrow) and the spaCy pipeline a caption run parses
# with in process (``--parse-workers 0``; ``nlp.load_spacy`` keeps it) on the first of those
# (a worker of ``make test-fast`` that only asks ``status`` does not pay for them). None of
# them reads the environment at import in a way the tests vary (a test that changes the
# environment gets a plain subprocess anyway).
PRELOAD = ("howtocap.cli",)
PIPELINE = ("caption", "align", "run")
PRELOAD_PIPELINE = ("howtocap.pipeline.run", "howtocap.align.run", "howtocap.caption.run",
                    "howtocap.encoders.embedded", "howtocap.caption.filler:load_parser")
_PER_TEST = {"PYTEST_CURRENT_TEST"}  # set by pytest for each test; no module reads it


def _compared(env: dict[str, str]) -> dict[str, str]:
    """The variables a preloaded import could read: not the per-test ones, nor Ray's (a
    local Ray start sets RAY_AUTH_MODE for the drivers that join it; Ray is not preloaded)."""
    return {k: v for k, v in env.items() if k not in _PER_TEST and not k.startswith("RAY_")}


class Zygote:
    """One pre-warmed ``tests/support/zygote.py`` per test process (each xdist worker starts
    its own); :meth:`run` is ``subprocess.run(HOWTOCAP + args, capture_output=True,
    text=True)`` without paying the imports again."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = _compared(env)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("zygote.py")), *PRELOAD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, bufsize=0)
        self.buf = b""
        self.tmp = tempfile.TemporaryDirectory(prefix="howtocap-zygote-")
        self.lock = threading.Lock()  # one request at a time: answers come back in order
        if self._line(None) != "ready":
            raise RuntimeError("the CLI zygote did not start")

    def serves(self, env: dict[str, str]) -> bool:
        """True when ``env`` is the environment the zygote imported under (but the per-test
        variables), so a child of it is the same as a fresh process."""
        return self.proc.poll() is None and _compared(env) == self.env

    def _line(self, timeout: float | None) -> str | None:
        """The next answer line, or None when ``timeout`` seconds pass first."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the CLI zygote ended")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def run(self, args: list[str], env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        with self.lock:
            return self._run(args, env, timeout)

    def _run(self, args: list[str], env: dict[str, str],
             timeout: float) -> subprocess.CompletedProcess[str]:
        out, err = Path(self.tmp.name, "stdout"), Path(self.tmp.name, "stderr")
        req = dict(args=args, env=env, cwd=os.getcwd(), stdout=str(out), stderr=str(err),
                   preload=PRELOAD_PIPELINE if args[:1] and args[0] in PIPELINE else ())
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        pid = int(self._line(None) or 0)
        status = self._line(timeout)
        if status is None:  # what subprocess.run does on a timeout: kill, wait, raise
            os.kill(pid, signal.SIGKILL)
            self._line(None)
            raise subprocess.TimeoutExpired([*HOWTOCAP, *args], timeout, *self._read(out, err))
        code = os.waitstatus_to_exitcode(int(status))
        return subprocess.CompletedProcess([*HOWTOCAP, *args], code, *self._read(out, err))

    @staticmethod
    def _read(*paths: Path) -> list[str]:
        enc = locale.getpreferredencoding(False)
        return [p.read_text(encoding=enc) for p in paths]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.tmp.cleanup()


_zygotes: dict[int, Zygote] = {}


def _zygote(env: dict[str, str]) -> Zygote | None:
    """This process's zygote, started on first use; None when it cannot serve ``env``."""
    z = _zygotes.get(os.getpid())
    if z is None:
        z = _zygotes[os.getpid()] = Zygote(env)
        atexit.register(z.close)
    return z if z.serves(env) else None


def vtt(cues: list[tuple[float, float, str]]) -> str:
    def ts(t: float) -> str:
        return f"00:{int(t // 60):02d}:{t % 60:06.3f}"

    return "WEBVTT\n\n" + "\n\n".join(f"{ts(a)} --> {ts(b)}\n{t}" for a, b, t in cues) + "\n"


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``howtocap ARGS`` as a separate process (a fork of the zygote when the environment is
    the usual one; HOWTOCAP_TEST_FRESH=1 starts each afresh): its exit code and text output,
    like ``subprocess.run``."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    zygote = None if os.environ.get("HOWTOCAP_TEST_FRESH") else _zygote(env)
    if zygote is not None:
        return zygote.run(list(args), env, timeout)
    return subprocess.run([*HOWTOCAP, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def add_video(folder: Path, name: str, base: Path, subtitle: str | None = None,
              ext: str = ".vtt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.mp4"
    path.write_bytes(base.read_bytes())
    if subtitle is not None:
        (folder / f"{name}{ext}").write_text(subtitle)
    return path


GOOD = vtt([(0.5, 2.0, "first we take two eggs and crack them into the bowl"),
            (2.5, 3.8, "then we whisk the eggs with a fork until smooth")])
