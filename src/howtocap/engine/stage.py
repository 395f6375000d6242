"""The one shape every per-video stage takes (as video2dataset's subsamplers): it declares the
tables it reads and writes, loads its models once per worker in ``setup`` and maps one video's
inputs to its outputs or an error in ``process``: no paths, no status, no progress.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from howtocap.errors import HowtocapError, ModelOutputError, ServiceError, ServiceUnavailable

if TYPE_CHECKING:  # pandas is not imported at CLI start-up (`howtocap --help`)
    import pandas as pd

    from howtocap.schemas import Rows

# How a stage's work is cut (``options.BatchConfig``), here where the CLI reads them without pandas
BATCH_SIZE = 1000  # videos a chunk of a shard commits at most
BATCH_SECONDS = 60.0  # a chunk is committed once its oldest result waited this long
SHARD_SIZE = 1000  # videos a shard holds unless the run directory was made with another
MAX_ATTEMPTS = 3  # a failed video is retried (--retry-failed) until it failed this often
# Bump when a stage's output format changes in a way old parts cannot be mixed with.
SCHEMA_VERSION = 2

# A video's tables: frames, or plain columns (``schemas.Rows``) on the text-only path
Tables = dict[str, "pd.DataFrame | Rows"]


@dataclass
class StageOutput:
    """A video's tables: done (status ``ok``), with caveats ("2 of 5 LLM blocks gave no
    caption") that the status table and the console show."""

    tables: Tables
    warnings: list[str] = field(default_factory=list)
    # counts for throughput in `howtocap status` (audio_seconds, frames, llm_tokens, …)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class VideoInput:
    """One video as a stage sees it: its files, and its rows of the tables the stage reads."""

    item: Any  # an ``io.inputs.VideoItem``; the engine reads only its ``video_id``
    tables: Tables = field(default_factory=dict)

    @property
    def video_id(self) -> str:
        return self.item.video_id


@dataclass(frozen=True)
class Resources:
    """What one worker of a stage needs (Ray honours it). ``models``: for long-lived actors;
    ``kind``: its group for ``--ray-gpus-per-stage asr=0.5``."""

    kind: str = "cpu"
    cpus: float = 1.0
    gpus: float = 0.0
    models: bool = False
    threads: int = 1  # videos in flight per worker (an HTTP client keeps its requests busy)
    remote: bool = True  # False: stays in the driver process (an HTTP client to a server)


class Stage(Protocol):
    name: str  # its key in the status table
    reads: tuple[str, ...]  # per-video tables it is given
    writes: tuple[str, ...]  # per-video tables it returns; the first is its main table
    resources: Resources

    def setup(self) -> None: ...

    def process(self, video: VideoInput) -> StageOutput: ...


class BaseStage:
    """``setup`` runs ``load`` once per worker, however many threads call it."""

    name: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    # What the stage graph (``engine.graph``) is derived from besides the tables: caches outside
    # them, and the tables its reduce step makes (cleared with its results by ``--redo``)
    reads_cache: ClassVar[tuple[str, ...]] = ()
    writes_cache: ClassVar[tuple[str, ...]] = ()
    reduce_writes: ClassVar[tuple[str, ...]] = ()
    # True: its inputs come as ``schemas.Rows`` (a shard file's column slices), not frames
    columnar: ClassVar[bool] = False
    resources: Resources = Resources()

    def load(self) -> None:
        """Load models (override); called once per worker."""

    def unload(self) -> None:
        """Free what ``load`` took and no later step needs (override)."""

    def _setup_guard(self) -> threading.Lock:
        return self.__dict__.setdefault("_setup_lock", threading.Lock())

    def setup(self) -> None:
        with self._setup_guard():
            if not self.__dict__.get("_ready"):
                self.load()
                self._ready = True

    def release(self) -> None:
        """``unload`` once the stage's videos are done; the next ``setup`` loads again."""
        with self._setup_guard():
            if self.__dict__.pop("_ready", False):
                self.unload()

    def __getstate__(self) -> dict[str, object]:
        """A stage travels to workers as its settings: private attributes (models, locks)
        arrive empty and ``setup`` loads the models there."""
        return {k: (None if k.startswith("_") else v) for k, v in self.__dict__.items()
                if k not in ("_setup_lock", "_ready")}

    def process(self, video: VideoInput) -> StageOutput:
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes this stage's output (its hash: the rows' ``config_id``)."""
        return {"stage": self.name, "schema": SCHEMA_VERSION}


@dataclass
class VideoResult:
    """What a worker sends back for one video (plain data: it crosses process boundaries)."""

    video_id: str
    ok: bool
    message: str = ""
    tables: Tables = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    internal: str = ""  # traceback of an unexpected error (logged, never shown as the line)
    fatal: bool = False  # a service every video needs is down: stop the run, record nothing
    cause: str = ""  # of a failure: bad input | model output | service | internal
    metrics: dict[str, float] = field(default_factory=dict)


def one_line(exc: BaseException) -> str:
    """A user mistake reads as its message; anything else as ``Type: message``, one line."""
    msg = str(exc) if isinstance(exc, HowtocapError) else f"{type(exc).__name__}: {exc}"
    return " ".join(msg.split())[:500] or type(exc).__name__


CAUSES = ("bad input", "model output", "service", "internal")


def failure_cause(exc: BaseException) -> str:
    """Why a video failed, from the exception's type (grouped by `howtocap status`)."""
    if isinstance(exc, (ServiceError, ServiceUnavailable, ConnectionError, TimeoutError)):
        return "service"
    if isinstance(exc, ModelOutputError):
        return "model output"
    if isinstance(exc, HowtocapError):
        return "bad input"  # a user-facing problem with this video's files or rows
    return "internal"


def run_one(stage: Stage, video: VideoInput) -> VideoResult:
    """``stage.process`` on one video, every failure turned into a result (never raised)."""
    t0 = time.perf_counter()
    try:
        stage.setup()
        return _done(video, stage.process(video), t0)
    except Exception as exc:  # one video's failure must not stop the batch
        return _failed(video, exc, t0)


async def arun_one(stage: Any, video: VideoInput) -> VideoResult:
    """``run_one`` for a stage written as ``async def aprocess`` (the captioning stage)."""
    t0 = time.perf_counter()
    try:
        stage.setup()
        return _done(video, await stage.aprocess(video), t0)
    except Exception as exc:
        return _failed(video, exc, t0)


def _done(video: VideoInput, out: StageOutput, t0: float) -> VideoResult:
    return VideoResult(video.video_id, True, "; ".join(out.warnings), out.tables,
                       list(out.warnings), time.perf_counter() - t0, metrics=dict(out.metrics))


def _failed(video: VideoInput, exc: Exception, t0: float) -> VideoResult:
    """A failed video's result (called in the ``except`` block: the traceback is there)."""
    seconds = time.perf_counter() - t0
    if isinstance(exc, ServiceUnavailable):  # not this video's fault: the run stops, see core
        return VideoResult(video.video_id, False, one_line(exc), seconds=seconds, fatal=True)
    internal = "" if isinstance(exc, HowtocapError) else traceback.format_exc()
    return VideoResult(video.video_id, False, one_line(exc), seconds=seconds,
                       internal=internal, cause=failure_cause(exc))
