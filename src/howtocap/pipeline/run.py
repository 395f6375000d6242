"""``howtocap run``: the whole pipeline in one resumable call — subtitles, LLM captions,
alignment scoring (per-video stages), then the align filter (a reduce step)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from howtocap.align import AlignConfig
from howtocap.pipeline.align import align_run
from howtocap.pipeline.caption import CaptionRunConfig, caption_run
from howtocap.pipeline.core import Shard, StageSummary
from howtocap.pipeline.runners import Runner
from howtocap.rundir import RunDir


def run_pipeline(inputs: Sequence[str | Path] | None, out: str | Path, *,
                 caption: CaptionRunConfig | None = None, align: AlignConfig | None = None,
                 encoders: Sequence[str] = ("default",), runner: Runner | None = None,
                 shard: Shard | None = None, force: bool = False, device: str | None = None,
                 llm: Any | None = None, progress: bool = True) -> list[StageSummary]:
    """Caption every video (or every video of ``caption.subtitles`` when ``inputs`` is empty),
    then align. Each stage skips what is done, so the same call resumes a killed run; with a
    ``shard`` only that shard's videos are processed and the filter waits for a final run
    without one. Returns one summary per stage."""
    caption = caption or CaptionRunConfig()
    summaries = list(caption_run(inputs, out, caption, force=force, progress=progress,
                                 llm=llm, runner=runner, shard=shard))
    summaries.append(align_run(RunDir(out, create=False), list(encoders), align or AlignConfig(),
                               runner=runner, device=device, progress=progress, shard=shard))
    return summaries
