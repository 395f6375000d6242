"""``howtocap run``: the whole pipeline in one resumable call — subtitles, LLM captions,
alignment scoring (per-video stages), then the align filter (a reduce step)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from howtocap.align import AlignConfig
from howtocap.engine.core import MAX_ATTEMPTS, Shard, StageSummary
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.pipeline.align import align_run, align_stage
from howtocap.pipeline.caption import CaptionRunConfig, caption_run


def run_pipeline(inputs: Sequence[str | Path] | None, out: str | Path, *,
                 caption: CaptionRunConfig | None = None, align: AlignConfig | None = None,
                 encoders: Sequence[str] = ("default",), runner: Runner | None = None,
                 shard: Shard | None = None, force: bool = False, device: str | None = None,
                 llm: Any | None = None, progress: bool = True, redo: bool = False,
                 retry_failed: bool = False, max_attempts: int = MAX_ATTEMPTS
                 ) -> list[StageSummary]:
    """Caption every video (or every video of ``caption.subtitles`` when ``inputs`` is empty),
    then align. Each stage skips what is done, so the same call resumes a killed run; with a
    ``shard`` only that shard's videos are processed and the filter waits for a final run
    without one. Every stage's settings are checked before any work (``redo``: recompute the
    stages whose settings changed, and those downstream). Returns one summary per stage."""
    caption = caption or CaptionRunConfig()
    align = align or AlignConfig()
    rundir = RunDir(out, create=False)
    check = [align_stage(rundir, list(encoders), align, device=device)]
    retry = {"retry_failed": retry_failed, "max_attempts": max_attempts, "redo": redo}
    summaries = list(caption_run(inputs, out, caption, force=force, progress=progress,
                                 llm=llm, runner=runner, shard=shard, also_check=check,
                                 **retry))
    summaries.append(align_run(rundir, list(encoders), align, runner=runner, device=device,
                               progress=progress, shard=shard, **retry))
    return summaries
