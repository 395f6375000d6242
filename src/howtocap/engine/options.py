"""How a stage runs, declared once: every stage command's runner and batching flags are the
fields of these two models (``cli.options`` turns a field with a description into a flag with
its default, bounds and help), and each builds what the engine takes from them (``Shard``:
``--shard K/N`` read).

Light to import (no pandas, no Ray) so that ``howtocap --help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from howtocap.engine.runners import RUNNERS, Runner, make_runner
from howtocap.engine.stage import BATCH_SECONDS, BATCH_SIZE, MAX_ATTEMPTS, SHARD_SIZE
from howtocap.errors import HowtocapError

ONE_FLAG = {"negatable": False}  # `--redo` alone, no `--no-redo`


@dataclass(frozen=True)
class Shard:
    """``K/N``: this worker owns the run's shards k with k mod N = K. N machines on one
    shared run directory split the work without talking to each other."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str | None) -> Shard | None:
        if not text:
            return None
        try:
            k, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise HowtocapError(f"--shard takes K/N (e.g. 0/8), got {text!r}") from None
        if not 0 <= k < n:
            raise HowtocapError(f"--shard {text}: need 0 <= K < N")
        return cls(k, n)

    def owns(self, k: int) -> bool:
        return k % self.count == self.index


class RunnerConfig(BaseModel):
    """Where and how much of a run a command's stages run, and what they redo."""

    workers: int | None = Field(None, ge=1, description=(
        "Videos in parallel (local: threads; ray: actors). Default: each stage's own (1 per "
        "model; --concurrency for an LLM server)."))
    processes: int = Field(1, ge=1, description=(
        "Processes on this machine, each taking whole shards in turn (claims keep them "
        "apart): use the cores for CPU-bound work such as many requests to a fast LLM "
        "server. A run of one shard uses one."))
    runner: Literal[RUNNERS] = Field("local", description=(  # type: ignore[valid-type]
        "Where stages run: local (threads in this process) or ray (Ray Data; needs "
        "howtocap\\[ray])."))
    ray_address: str | None = Field(None, description=(
        "--runner ray: none starts a local Ray instance; 'auto' or ray://host:port joins a "
        "cluster."))
    ray_gpus_per_stage: str | None = Field(None, description=(
        "--runner ray: GPUs per worker by stage kind, e.g. encoder=0.25,asr=0.5,llm=1."))
    shard: str | None = Field(None, description=(
        "K/N: process only this machine's share of the run's shards of videos (shard k when "
        "k mod N = K); for align, run once without --shard afterwards to filter."))
    redo: bool = Field(False, json_schema_extra=ONE_FLAG, description=(
        "The run's results were made with other settings: recompute this stage and clear the "
        "stages computed from it (caption -> align)."))
    retry_failed: bool = Field(False, json_schema_extra=ONE_FLAG, description=(
        "Retry videos that failed before (else they stay failed; see `howtocap status`)."))
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description=(
        "--retry-failed: leave a video alone once it has failed this many times."))
    quiet: bool = Field(False, description="No progress bar.")

    def make_runner(self) -> Runner:
        """The runner (Ray loads only when a stage runs on it)."""
        return make_runner(self.runner, workers=self.workers, processes=self.processes,
                           ray_address=self.ray_address, ray_gpus=self.ray_gpus_per_stage)

    def shard_part(self) -> Shard | None:
        """``--shard K/N`` read (one line when it is not K/N)."""
        return Shard.parse(self.shard)

    def stage_args(self) -> dict[str, Any]:
        """The keywords every step's ``*_run`` takes from this."""
        return {"runner": self.make_runner(), "shard": self.shard_part(),
                "progress": not self.quiet, "redo": self.redo,
                "retry_failed": self.retry_failed, "max_attempts": self.max_attempts}


class BatchConfig(BaseModel):
    """How a stage's work is cut into shards and committed chunks: a kill loses the chunk in
    flight; ``shard_size`` applies to a run directory made now."""

    batch_size: int = Field(BATCH_SIZE, ge=1, description=(
        "Commit finished videos in chunks of at most this many (a file per table per chunk, "
        "joined when their shard is finished; a kill loses the chunk in flight)."))
    batch_seconds: float = Field(BATCH_SECONDS, ge=0, description=(
        "Commit a chunk once its first result waited this long, full or not."))
    shard_size: int | None = Field(None, ge=1, description=(
        "Videos per shard of a run directory this command makes (the unit of work and of "
        "--shard K/N; a file per table each). An existing run directory keeps its own. "
        f"Default {SHARD_SIZE}."))
