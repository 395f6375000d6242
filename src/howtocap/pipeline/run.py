"""The composition above the steps: ``howtocap run`` (the whole pipeline in one resumable call —
subtitles, LLM captions, alignment scoring (per-video stages), then the align filter, a reduce
step) and ``howtocap status`` over every step's stages, in pipeline order.
The only module that knows every step; the steps know the engine, the engine knows none."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run, align_stage, recorded_reference
from howtocap.align.stage import AlignStage
from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.caption.stage import CaptionStage
from howtocap.download.config import DownloadConfig
from howtocap.download.run import download_run, drop_media
from howtocap.download.stage import DownloadStage
from howtocap.encoders.defaults import ENCODER
from howtocap.engine.core import MAX_ATTEMPTS, Shard, StageSummary
from howtocap.engine.graph import StageGraph
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.engine.status import status_of
from howtocap.framecaps.stage import FrameCapsStage
from howtocap.frames.stage import FramesStage
from howtocap.io.inputs import resolve_videos, select_videos
from howtocap.shots.stage import ShotsStage
from howtocap.signals.config import SignalsConfig
from howtocap.signals.stage import SignalsStage
from howtocap.subtitles.stage import SubtitlesStage
from howtocap.tdr.stage import TdrFramesStage

# Every step's stages in pipeline order (the order `howtocap status` lists them in); what feeds
# what is derived from their declared reads and writes (``engine.graph``).
PIPELINE = (DownloadStage, SubtitlesStage, CaptionStage, FramesStage, ShotsStage, SignalsStage,
            AlignStage, FrameCapsStage, TdrFramesStage)


def stage_graph() -> StageGraph:
    return StageGraph(PIPELINE)


# `howtocap status`'s throughput columns: the counts the stages report (``StageOutput.metrics``)
# per wall second (audio seconds per second = audio hours per hour)
RATES = {"audio_hours_per_hour": "audio_seconds", "llm_tokens_per_s": "llm_tokens",
         "captions_per_s": "captions", "frames_per_s": "frames",
         "download_bytes_per_s": "bytes"}


def run_status(run_dir: str | Path) -> dict[str, Any]:
    """``howtocap status DIR``: per stage done / failed / pending, failures by cause, attempts,
    wall time and throughput (``engine.status.status_of`` over every step's stages)."""
    return status_of(run_dir, stage_graph(), RATES)


def run_pipeline(inputs: Sequence[str | Path] | None, out: str | Path, *,
                 caption: CaptionRunConfig | None = None, align: AlignConfig | None = None,
                 encoders: Sequence[str] = (ENCODER,), runner: Runner | None = None,
                 shard: Shard | None = None, force: bool = False, device: str | None = None,
                 llm: Any | None = None, progress: bool = True, redo: bool = False,
                 retry_failed: bool = False, max_attempts: int = MAX_ATTEMPTS,
                 download: DownloadConfig | None = None, batching: BatchConfig | None = None,
                 signals: bool | SignalsConfig = False) -> list[StageSummary]:
    """Caption every video (or every video of ``caption.subtitles`` when ``inputs`` is empty),
    then (``align.within_shot``) detect shots, then (``signals``: True for the run's recorded
    or default settings) score visual signals, then align; one summary per stage. Each stage
    skips what is done, so the same call resumes a killed run; with a ``shard`` only its
    videos are processed and the filter waits for a final run without one. Settings are
    checked before any work (``redo``: recompute the changed stages and those downstream).
    Remote inputs are downloaded first; without ``download.keep_media`` a fetched video is
    deleted once align used its frames (not the default filter's reference videos)."""
    caption = caption or CaptionRunConfig()
    align = align or AlignConfig()
    download = download or DownloadConfig()
    rundir = RunDir(out, create=False,
                    shard_size=batching.shard_size if batching is not None else None)
    check = [align_stage(rundir, list(encoders), align, device=device)]
    retry = {"retry_failed": retry_failed, "max_attempts": max_attempts, "redo": redo,
             "batching": batching}
    summaries: list[StageSummary] = []
    fetched: list[str] = []
    if inputs:
        inputs = items = resolve_videos(inputs)  # resolved once; caption_run takes items
        if any(it.remote for it in items):  # only what --ids / --limit select is fetched
            items = select_videos(items, caption.ids, caption.limit)
            fetched = [it.video_id for it in items if it.remote]
            inputs, got = download_run(items, out, download, runner=runner,
                                       progress=progress, shard=shard,
                                       refetch_missing=download.keep_media, **retry)
            summaries.append(got)
            if not inputs:  # every download failed: nothing for the later stages
                return summaries
    summaries += caption_run(inputs, out, caption, force=force, progress=progress,
                             llm=llm, runner=runner, shard=shard, also_check=check, **retry)
    if align.within_shot:  # align keeps windows inside shots: the shots stage first
        from howtocap.shots.run import shots_run

        summaries.append(shots_run(rundir, runner=runner, progress=progress, shard=shard,
                                   batching=batching))
    if signals is not False:  # after shots: their rows are its windows
        from howtocap.signals.run import signals_run

        summaries.append(signals_run(rundir, None if signals is True else signals,
                                     runner=runner, progress=progress, shard=shard, **retry))
    summaries.append(align_run(rundir, list(encoders), align, runner=runner, device=device,
                               progress=progress, shard=shard, shots_ready=align.within_shot,
                               **retry))
    if fetched and not download.keep_media:
        keep = set(recorded_reference(rundir, align)[1])
        aligned = rundir.done(AlignStage.name, fetched)
        drop_media(rundir, [vid for vid, ok in zip(fetched, aligned, strict=True)
                            if ok and vid not in keep])
    return summaries
