"""Runners decide *where* a stage runs; they never read or write the run directory.

``map(stage, videos, emit)`` runs ``stage`` on every video the iterator yields and calls
``emit`` with each result on the calling thread, which commits it. The local runner uses a
thread pool in this process, or, for a stage written as ``async def aprocess`` (captioning
through an LLM server), coroutines on the process's one event loop; the Ray runner
(``howtocap[ray]``) a Ray Data pipeline whose actor pools hold the models, on a laptop or a
cluster. ``--shard K/N`` is not a runner: it
only narrows the videos, so it combines with either.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import os
import pickle
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import Any, ClassVar, Protocol, TypeVar

from howtocap.engine.stage import Stage, VideoInput, VideoResult, arun_one, run_one
from howtocap.errors import HowtocapError

Emit = Callable[[VideoResult], None]
T = TypeVar("T")
RUNNERS = ("local", "ray")


class Runner(Protocol):
    # stages run in this process: models the caller built can be handed to them (the caller
    # then loads them once, e.g. align's encoders, shared with its reduce step)
    in_process: bool

    def map(self, stage: Stage, videos: Iterator[VideoInput], emit: Emit) -> None: ...


@dataclass
class LocalRunner:
    """A thread pool in this process (the models are shared by its threads; stages that
    hold one model serialise on it themselves). ``workers=None``: the stage's own choice
    (``resources.threads``, e.g. the requests in flight to an LLM server)."""

    workers: int | None = None
    processes: int = 1  # processes taking whole shards in turn (``core.run_stage``)
    in_process: ClassVar[bool] = True

    def map(self, stage: Stage, videos: Iterator[VideoInput], emit: Emit) -> None:
        n = max(1, self.workers or getattr(stage.resources, "threads", 1))
        if n == 1:
            with collector_tuned():
                for video in videos:
                    emit(run_one(stage, video))
            return
        if hasattr(stage, "aprocess"):
            _Coroutines(stage, n).map(videos, emit)
            return
        _Workers(stage, n).map(videos, emit)


@contextlib.contextmanager
def collector_tuned() -> Iterator[None]:
    """While videos run in this thread: what lives at the start (modules, the run's
    indexes) is left out of the collector's full passes (each walked all of it again), and
    the young generation is collected every 10,000 allocations rather than 700, so a
    video's short-lived objects die before a pass looks at them (0.97 -> 0.45 CPU s of
    collections per 10,000 text-only videos). Objects freed by reference counting go at
    once as ever; afterwards everything is collected as before."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


_STOP = object()  # a worker's signal to end


class _Raised:
    """What escaped ``run_one`` in a worker (not an ``Exception``: those are results),
    re-raised on the calling thread."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Workers:
    """``n`` threads that take videos from one queue and put results on another.

    Why not ``ThreadPoolExecutor`` and ``wait(pending, FIRST_COMPLETED)``: that wait hangs a
    waiter on every pending future (2n of them) for each result, and every submit makes a
    future and takes the pool's locks; on a text-only run of ~1,000 videos/s that was a
    quarter of a ms of the driver's CPU per video. Here a result costs one put and one get
    on C-implemented ``SimpleQueue``s, and the caller sleeps on the one queue.
    """

    def __init__(self, stage: Stage, n: int) -> None:
        self.stage = stage
        self.n = n
        self.todo: SimpleQueue[Any] = SimpleQueue()
        self.done: SimpleQueue[VideoResult | _Raised] = SimpleQueue()
        self.threads: list[threading.Thread] = []

    def _work(self) -> None:
        get, put, stage = self.todo.get, self.done.put, self.stage
        while (video := get()) is not _STOP:
            try:
                put(run_one(stage, video))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
                put(_Raised(exc))

    def _result(self) -> VideoResult:
        res = self.done.get()
        if isinstance(res, _Raised):
            raise res.exc
        return res

    def map(self, videos: Iterator[VideoInput], emit: Emit) -> None:
        out = 0  # videos handed out, their results not yet emitted
        try:
            for video in videos:  # at most 2n in flight: claims are taken as work starts
                if len(self.threads) < self.n and out >= len(self.threads):
                    t = threading.Thread(target=self._work, daemon=True,
                                         name=f"howtocap-video-{len(self.threads)}")
                    t.start()
                    self.threads.append(t)
                self.todo.put(video)
                out += 1
                if out >= 2 * self.n:
                    emit(self._result())
                    out -= 1
            while out:
                emit(self._result())
                out -= 1
        finally:  # what was not started is dropped; what runs is waited for
            while True:
                try:
                    self.todo.get_nowait()
                except Empty:
                    break
            for _ in self.threads:
                self.todo.put(_STOP)
            for t in self.threads:
                t.join()


_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)
_LOOP_LOCK = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop, on a daemon thread of its own (started at first use,
    again in a forked child). The LLM clients keep their connections, slots and breakers on
    it, so every caller, thread or coroutine, shares them."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True,
                             name="howtocap-event-loop").start()
            _LOOP = (os.getpid(), loop)
        return _LOOP[1]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``event_loop()`` and wait for its value (from any other thread)."""
    loop = event_loop()
    if threading.current_thread().name == "howtocap-event-loop":
        coro.close()
        raise RuntimeError("run_sync called on the event loop: await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on this thread, with no event loop: for a coroutine whose every
    await returns at once (a blocking model called in place), where ``run_sync``'s two thread
    hops a call would be most of the cost. One that would wait raises ``RuntimeError``."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("run_inline: the coroutine waited; run it with run_sync")


class _Coroutines:
    """Videos as coroutines (``stage.aprocess``) on ``event_loop()``: ``n`` at a time (as ``n``
    threads would), ``2n`` handed out; results come back through a queue and are emitted on
    the calling thread as they finish. Why not
    a thread per video: a text-only run over HTTP waits on the server, not the CPU, and 32
    threads blocking on their sockets cost the driver more in GIL hand-offs than the
    captioning itself (benchmarks/speed/bench_driver.py)."""

    def __init__(self, stage: Stage, n: int) -> None:
        self.stage, self.n = stage, n

    def map(self, videos: Iterator[VideoInput], emit: Emit) -> None:
        with contextlib.suppress(Exception):  # arun_one reports a failed setup per video
            self.stage.setup()  # models load here, not on the loop
        loop = event_loop()
        running = asyncio.Semaphore(self.n)  # binds to the loop at its first wait

        async def one(video: VideoInput) -> VideoResult:
            async with running:
                return await arun_one(self.stage, video)

        done: SimpleQueue[Future[VideoResult]] = SimpleQueue()
        live: set[Future[VideoResult]] = set()

        def take() -> VideoResult:
            fut = done.get()
            live.discard(fut)
            return fut.result()

        with collector_tuned():
            try:
                for video in videos:  # claims are taken as work starts: 2n in flight at most
                    fut = asyncio.run_coroutine_threadsafe(one(video), loop)
                    live.add(fut)
                    fut.add_done_callback(done.put)
                    if len(live) >= 2 * self.n:
                        emit(take())
                while live:
                    emit(take())
            finally:  # what is in flight is abandoned (cancelled): its videos are not done
                for fut in live:
                    fut.cancel()


def parse_stage_resources(text: str | None) -> dict[str, float]:
    """``encoder=0.25,asr=0.5`` -> ``{"encoder": 0.25, "asr": 0.5}`` (one line on error)."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        try:
            if not sep or not key.strip():
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise HowtocapError(f"--ray-gpus-per-stage takes KIND=GPUS,… (e.g. "
                                f"encoder=0.25,asr=0.5), got {text!r}") from None
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
    import numpy as np

    if isinstance(stage, bytes):  # a plain task: no models to keep
        stage = pickle.loads(stage)
    results = [pickle.dumps(run_one(stage, pickle.loads(v))) for v in batch["video"]]
    return {"result": np.array(results, dtype=object)}


@dataclass
class RayRunner:
    """Ray Data: a dataset of video items, ``map_batches`` over an actor pool for stages that
    hold models (ASR, the embedded LLM, encoders) and plain tasks for the rest; a stage that
    is an HTTP client (``--llm-url``) stays in this process with its bounded concurrency.

    ``address``: None starts a local Ray instance; ``auto`` or ``ray://host:port`` joins a
    cluster (video files must then be readable at the same paths on every node). Videos go
    to Ray in windows of ``window``, so claims and memory stay bounded; each window starts
    fresh actors (their ``setup`` runs once per window and actor).
    """

    address: str | None = None
    workers: int | None = None  # actors (or concurrent tasks) per stage
    gpus: dict[str, float] = field(default_factory=dict)  # per resource kind
    cpus_per_worker: float | None = None
    window: int = 2000
    _started: bool = False
    in_process: ClassVar[bool] = False  # stages travel to actors as their settings

    def _init(self) -> Any:
        try:
            import ray
        except ImportError:
            raise HowtocapError("--runner ray needs Ray: pip install 'howtocap[ray]'") from None
        if not ray.is_initialized():
            import logging

            # our progress bar and one-line errors are the console; Ray's own lines go to its
            # log files (set these variables to see them)
            os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
            os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
            for name in ("ray", "ray.data"):
                logging.getLogger(name).setLevel(logging.ERROR)
            kw: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                  "include_dashboard": False, "logging_level": "ERROR"}
            if self.address:
                kw["address"] = self.address
            try:
                ray.init(**kw)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a new local instance"
                raise HowtocapError(f"cannot reach Ray at {where}: "
                                    f"{' '.join(str(exc).split())[:200]}") from None
            self._started = True
            from ray.data import DataContext

            ctx = DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
        return ray

    def _size(self, ray: Any) -> int:
        if self.workers:
            return self.workers
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

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
