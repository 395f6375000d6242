"""Runners decide *where* a stage runs; they never read or write the run directory.

``map(stage, videos, emit)`` runs ``stage`` on every video and calls ``emit`` with each result
on the calling thread, which commits it: locally (threads, or coroutines for an ``async def
aprocess`` stage) or in Ray Data actor pools (``howtocap[ray]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any, ClassVar, Protocol

import numpy as np

from howtocap.engine.stage import Stage, VideoInput, VideoResult, arun_one, run_one
from howtocap.errors import HowtocapError

Emit = Callable[[VideoResult], None]
RUNNERS = ("local", "ray")


class Runner(Protocol):
    # stages run in this process: models the caller built can be handed to them (the caller
    # then loads them once, e.g. align's encoders, shared with its reduce step)
    in_process: bool

    def map(self, stage: Stage, videos: Iterator[VideoInput], emit: Emit) -> None: ...


@dataclass
class LocalRunner:
    """A thread pool in this process (sharing the models), or coroutines on ``event_loop()``
    for an ``async def aprocess`` stage. ``workers=None``: the stage's ``resources.threads``."""

    workers: int | None = None
    processes: int = 1  # processes taking whole shards in turn (``core.run_stage``)
    in_process: ClassVar[bool] = True

    def map(self, stage: Stage, videos: Iterator[VideoInput], emit: Emit) -> None:
        n = max(1, self.workers or getattr(stage.resources, "threads", 1))
        if n == 1:
            with collector_tuned():
                for video in videos:
                    emit(run_one(stage, video))
        elif hasattr(stage, "aprocess"):
            _coroutines(stage, n, videos, emit)
        else:
            with ThreadPoolExecutor(n, thread_name_prefix="howtocap-video") as pool:
                _in_flight(lambda v: pool.submit(run_one, stage, v), n, videos, emit)


def _in_flight(submit: Callable[[VideoInput], Future[VideoResult]], n: int,
               videos: Iterator[VideoInput], emit: Emit) -> None:
    """Hand out ``2n`` videos at most and emit each result on this thread as it finishes. Not
    ``wait(FIRST_COMPLETED)``: it hangs a waiter on every pending future for each result."""
    done: SimpleQueue[Future[VideoResult]] = SimpleQueue()
    live: set[Future[VideoResult]] = set()

    def take() -> VideoResult:
        fut = done.get()
        live.discard(fut)
        return fut.result()

    try:
        for video in videos:
            fut = submit(video)
            live.add(fut)
            fut.add_done_callback(done.put)
            if len(live) >= 2 * n:
                emit(take())
        while live:
            emit(take())
    finally:  # what was not started is dropped (a coroutine in flight: cancelled)
        for fut in live:
            fut.cancel()


@contextlib.contextmanager
def collector_tuned() -> Iterator[None]:
    """While videos run: what lives at the start (modules, indexes) is frozen out of full
    passes, and the young generation is collected every 10,000 allocations rather than 700;
    afterwards as before (what a caller froze stays frozen: a pre-forking parent's)."""
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen:
            gc.unfreeze()


_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)
_LOOP_LOCK = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop, on a daemon thread (started at first use, again in a
    forked child): the LLM clients keep their connections, slots and breakers on it."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True,
                             name="howtocap-event-loop").start()
            _LOOP = (os.getpid(), loop)
        return _LOOP[1]


def _coroutines(stage: Stage, n: int, videos: Iterator[VideoInput], emit: Emit) -> None:
    """Videos as coroutines on ``event_loop()``, ``n`` at a time: 32 threads blocking on their
    sockets cost the driver more in GIL hand-offs than the captioning."""
    with contextlib.suppress(Exception):  # arun_one reports a failed setup per video
        stage.setup()  # models load here, not on the loop
    loop = event_loop()
    running = asyncio.Semaphore(n)  # binds to the loop at its first wait

    async def one(video: VideoInput) -> VideoResult:
        async with running:
            return await arun_one(stage, video)

    with collector_tuned():
        _in_flight(lambda v: asyncio.run_coroutine_threadsafe(one(v), loop), n, videos, emit)


def parse_stage_resources(text: str | None) -> dict[str, float]:
    """``encoder=0.25,asr=0.5`` -> ``{"encoder": 0.25, "asr": 0.5}`` (one line on error)."""
    try:
        pairs = [part.split("=") for part in (text or "").split(",") if part.strip()]
        out = {key.strip(): float(value) for key, value in pairs}
    except ValueError:  # no "=", two of them, or not a number
        out = {"": 0.0}
    if "" in out:
        raise HowtocapError(f"--ray-gpus-per-stage takes KIND=GPUS,… (e.g. "
                            f"encoder=0.25,asr=0.5), got {text!r}")
    return out


class _StageActor:
    """One Ray actor: the stage's models load once, in ``__init__``, then serve every batch."""

    def __init__(self, stage: bytes) -> None:
        self.stage: Stage = pickle.loads(stage)
        with contextlib.suppress(Exception):  # run_one sets up again, reporting per video
            self.stage.setup()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        return _run_batch(batch, self.stage)


def _run_batch(batch: dict[str, Any], stage: Stage | bytes) -> dict[str, Any]:
    if isinstance(stage, bytes):  # a plain task: no models to keep
        stage = pickle.loads(stage)
    results = [pickle.dumps(run_one(stage, pickle.loads(v))) for v in batch["video"]]
    return {"result": np.array(results, dtype=object)}


@dataclass
class RayRunner:
    """Ray Data: an actor pool for stages that hold models, tasks for the rest; an HTTP client
    stage stays here. ``address``: None starts a local Ray; ``auto`` or ``ray://host:port``
    joins a cluster. Videos go in windows of ``window``: claims and memory stay bounded."""

    address: str | None = None
    workers: int | None = None  # actors (or concurrent tasks) per stage
    gpus: dict[str, float] = field(default_factory=dict)  # per resource kind
    cpus_per_worker: float | None = None
    window: int = 2000
    in_process: ClassVar[bool] = False  # stages travel to actors as their settings

    def _init(self) -> Any:
        try:
            import ray
        except ImportError:
            raise HowtocapError("--runner ray needs Ray: pip install 'howtocap[ray]'") from None
        if ray.is_initialized():
            return ray
        import logging

        # our progress bar and one-line errors are the console; Ray's own lines go to its log
        # files (set these variables to see them)
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.ERROR)
        try:
            ray.init(self.address or None, ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise HowtocapError(f"cannot reach Ray at {self.address or 'a new local instance'}"
                                f": {' '.join(str(exc).split())[:200]}") from None
        from ray.data import DataContext

        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        return ray

    def _size(self, ray: Any) -> int:
        return self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, stage: Stage, videos: Iterator[VideoInput], emit: Emit) -> None:
        res = stage.resources
        if not getattr(res, "remote", True):
            LocalRunner().map(stage, videos, emit)
            return
        ray = self._init()
        from ray import cloudpickle  # by value, so a stage defined in a script travels too

        payload = cloudpickle.dumps(stage)
        gpus = self.gpus.get(res.kind, res.gpus)
        cpus = self.cpus_per_worker if self.cpus_per_worker is not None else res.cpus
        while window := list(itertools.islice(videos, self.window)):
            ds = ray.data.from_items([{"video": pickle.dumps(v)} for v in window],
                                     override_num_blocks=min(len(window), 4 * self._size(ray)))
            common: dict[str, Any] = {"batch_size": 1, "num_cpus": cpus, "num_gpus": gpus,
                                      "batch_format": "numpy"}
            size = min(self._size(ray), len(window))
            if res.models:
                ds = ds.map_batches(_StageActor, fn_constructor_kwargs={"stage": payload},
                                    compute=ray.data.ActorPoolStrategy(size=size), **common)
            else:
                ds = ds.map_batches(_run_batch, fn_kwargs={"stage": payload},
                                    compute=ray.data.TaskPoolStrategy(size=size), **common)
            for row in ds.iter_rows():
                emit(pickle.loads(row["result"]))


def make_runner(name: str = "local", *, workers: int | None = None, processes: int = 1,
                ray_address: str | None = None, ray_gpus: str | None = None) -> Runner:
    """A runner from the CLI's ``--runner`` choice."""
    if name == "local":
        return LocalRunner(workers, max(1, processes))
    if name == "ray":
        return RayRunner(address=ray_address, workers=workers,
                         gpus=parse_stage_resources(ray_gpus))
    raise HowtocapError(f"unknown runner {name!r}; choose one of: {', '.join(RUNNERS)}")
