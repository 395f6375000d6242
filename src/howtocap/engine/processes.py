"""Tasks in several processes on one machine (``--processes N``, as datatrove's local executor):
each claims, commits and finishes whole shards itself; this one hands them out, shows progress
and adds up the counts. The processes fork from a server that imported the stage's module.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

SHARED: dict[str, Any] = {}  # in a worker: ``run_tasks``' shared values, and ``events`` (a queue)


def _start(values: dict[str, Any], events: Any) -> None:
    SHARED.update(values, events=events)


def portable(obj: Any) -> bool:
    """Whether ``obj`` (a stage) can be rebuilt in another process from its settings alone:
    what its ``__getstate__`` empties (a model its caller built) holds nothing yet."""
    travels = obj.__getstate__()
    if any(v is not None and travels.get(k) is None for k, v in vars(obj).items()
           if k in travels):
        return False
    try:
        pickle.dumps(obj)
    except Exception:  # noqa: BLE001 - any reason it cannot travel: it stays here
        return False
    return True


def run_tasks(fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]], n: int, *,
              shared_values: dict[str, Any], preload: list[str],
              on_event: Callable[..., None], on_result: Callable[[Any], bool]) -> None:
    """``fn(*task)`` for every task in ``n`` processes; each event a task puts on
    ``SHARED["events"]`` goes to ``on_event`` here, each result to ``on_result`` (False: start
    no more tasks). A task's exception is raised here."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    events = ctx.Queue()

    def drain(timeout: float) -> None:
        try:
            on_event(*events.get(timeout=timeout))
            while True:
                on_event(*events.get_nowait())
        except queue.Empty:
            pass

    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_start,
                             initargs=(shared_values, events)) as pool:
        pending: set[Future[Any]] = {pool.submit(fn, *task) for task in tasks}
        try:
            while pending:
                drain(0.1)
                finished, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
                for fut in finished:
                    if not fut.cancelled() and not on_result(fut.result()):
                        for f in pending:
                            f.cancel()
        finally:
            for f in pending:
                f.cancel()
    drain(0)  # what the last tasks sent while the pool closed
