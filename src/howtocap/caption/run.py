"""``howtocap caption``: each video's subtitles (or ASR), then LLM captions — two stages
(``subtitles.stage``, ``caption.stage``) over the videos, a window of shards at a time.

This module only orchestrates: which videos, which settings (validated, then recorded in
``DIR/config/caption.json``), resume. The stages do the work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.stage import CaptionStage
from howtocap.engine.core import (
    MAX_ATTEMPTS,
    Shard,
    StageSummary,
    prepare_stages,
    run_stage,
)
from howtocap.engine.memory import give_back_memory
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.engine.stage import Stage
from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VideoItem, read_id_list, resolve_videos, select_videos
from howtocap.subtitles.stage import SubtitlesStage

if TYPE_CHECKING:
    from howtocap.io.subtitles import SubtitleSource


WINDOW = 50_000  # videos taken through both stages at a time (``caption_run``)


@dataclass
class _Videos:
    """The run's videos: the items of the inputs (video files), or, text-only, the ids of
    the subtitle source, read from it and made into ``VideoItem`` s a window at a time (a
    HowTo100M source lists 1.2M videos: no list of every id, let alone of items)."""

    items: list[VideoItem] | None = None
    source: SubtitleSource | None = None
    extra: list[str] | None = None  # --ids the source lacks (each reported as a failure)

    def __len__(self) -> int:
        if self.items is not None:
            return len(self.items)
        return (self.source.count() if self.source is not None else 0) + len(self.extra or [])

    def video_ids(self) -> Iterator[str]:
        if self.items is not None:
            return (it.video_id for it in self.items)
        return (vid for ids in self.id_arrays(WINDOW) for vid in ids.to_pylist())

    def id_arrays(self, size: int) -> Iterator[Any]:
        """Text-only: the ids in order (the source's, then ``extra``) as Arrow arrays, at most
        ``size`` at a time."""
        have = self.source.count() if self.source is not None else 0
        for lo in range(0, have, size):
            yield self.source.id_array(lo, min(lo + size, have))  # type: ignore[union-attr]
        extra = self.extra or []
        for lo in range(0, len(extra), size):
            yield pa.array(extra[lo:lo + size], pa.string())

    def record(self, rundir: RunDir) -> None:
        """``videos.parquet``: text-only from the source's id columns, no item a video."""
        rundir.record_videos(self.items if self.items is not None else self.id_arrays(WINDOW))

    def windows(self, rundir: RunDir, size: int) -> Iterator[list[VideoItem]]:
        """The videos in the run's shard order, the videos of about ``size`` (whole shards)
        at a time: each shard is taken through both stages once."""
        per = max(1, size // rundir.shard_size)
        n = rundir.shard_count()
        if self.items is not None:
            ks = rundir.shard_of([it.video_id for it in self.items])
            for lo in range(0, n, per):
                yield [it for it, k in zip(self.items, ks, strict=True)
                       if lo <= k < lo + per]
            return
        every = len(self) == rundir.video_count()  # the run's videos are the source's
        for lo in range(0, n, per):
            ids = pa.concat_arrays([rundir.shard_videos(k).column(0).combine_chunks()
                                    for k in range(lo, min(n, lo + per))])
            ours = np.ones(len(ids), dtype=bool) if every else self._holds(ids)
            yield [VideoItem(vid, None) for vid, ok in zip(ids.to_pylist(), ours, strict=True)
                   if ok]

    def _holds(self, ids: pa.Array) -> np.ndarray:
        """Which of the run's ``ids`` are this call's: the source's and the ``extra`` ones
        (one lookup a window, not a video)."""
        held = self.source.holds(ids) if self.source is not None \
            else np.zeros(len(ids), dtype=bool)
        extra = pc.is_in(ids, value_set=pa.array(self.extra or [], pa.string()))
        return held | extra.to_numpy(zero_copy_only=False)


def _items_and_source(inputs: Sequence[str | Path] | None, rundir: RunDir,
                      config: CaptionRunConfig, progress: bool
                      ) -> tuple[_Videos, SubtitleSource | None]:
    """The videos to caption and the ``--subtitles`` source, after ``--ids`` / ``--limit``;
    no ``inputs``: text-only, the source's videos (ids only, rows read in their turn)."""
    from howtocap.io.subtitles import SubtitleSource

    ids = config.ids
    wanted = (read_id_list(ids) if isinstance(ids, (str, Path)) else list(dict.fromkeys(ids))) \
        if ids is not None else None
    cache = rundir.cache_dir / "subtitles"
    if inputs:
        items = select_videos(resolve_videos(inputs), wanted, config.limit)
        if not items:
            raise HowtocapError("--ids selects none of the input videos")
        source = SubtitleSource.open(config.subtitles, cache_dir=cache,
                                     select={it.video_id for it in items}) \
            if config.subtitles else None
        return _Videos(items=items), source
    if not config.subtitles:
        raise HowtocapError("nothing to caption: give video files, folders or manifest CSVs, "
                            "or --subtitles SRC to caption from subtitles alone")
    if config.vlm is not None:
        raise HowtocapError("--vlm-url sends video frames, and a --subtitles run without "
                            "INPUTS has no video files; give the videos (or a manifest CSV "
                            "naming them) or use --llm-url")
    if config.asr == "always":
        raise HowtocapError("--asr always transcribes video files, and a --subtitles run "
                            "without INPUTS has none; use --asr auto or never, or give the "
                            "videos")
    source = SubtitleSource.open(config.subtitles, cache_dir=cache, limit=config.limit,
                                 select=set(wanted) if wanted is not None else None,
                                 progress=progress)
    extra: list[str] = []
    if wanted is not None and config.limit is None:  # reported per video: not in the source
        held = source.holds(pa.array(wanted, pa.string()))
        extra = [vid for vid, ok in zip(wanted, held, strict=True) if not ok]
    if not source.count() and not extra:
        raise InputError(config.subtitles, "holds no videos" + (" of --ids" if wanted else ""))
    return _Videos(source=source, extra=extra), source


def caption_run(inputs: Sequence[str | Path] | None, out: str | Path,
                config: CaptionRunConfig, *, force: bool = False, progress: bool = True,
                llm: Any | None = None, runner: Runner | None = None,
                shard: Shard | None = None, redo: bool = False, retry_failed: bool = False,
                max_attempts: int = MAX_ATTEMPTS,
                also_check: Sequence[Stage] = (),
                window: int | None = None, batching: BatchConfig | None = None
                ) -> tuple[StageSummary, StageSummary]:
    """Every input video (of this ``shard``; no ``inputs``: every video of
    ``config.subtitles``, text-only) gets subtitles and LLM captions; returns the two stages'
    summaries. ``llm``: a model already built. The videos go through both stages ``window``
    at a time, so what the stages keep per video is a window's, not the run's.

    Other settings than the run's are refused before anything is written (``redo``:
    recompute). ``also_check``: later stages of the same command, checked now too so a
    refusal comes before any work."""
    rundir = RunDir(out, create=False,  # a user mistake leaves no empty run directory
                    shard_size=batching.shard_size if batching is not None else None)
    videos, source = _items_and_source(inputs, rundir, config, progress)
    subs_stage = SubtitlesStage(config.asr, config.asr_model, source=source)
    cap_stage = CaptionStage(config.llm, config.caption, model=llm, vlm=config.vlm,
                             parse_workers=config.parse_workers)
    if also_check and not redo:
        prepare_stages(rundir, [subs_stage, cap_stage, *also_check], check_only=True)
    ids = prepare_stages(rundir, [subs_stage, cap_stage], redo=redo)
    rundir.root.mkdir(parents=True, exist_ok=True)
    videos.record(rundir)
    give_back_memory(collect=False)  # the ids of recording the videos (no cycles)
    rundir.configs.write("caption", config.model_dump())
    if force:
        for stage in (subs_stage, cap_stage):
            rundir.forget(stage.name, videos.video_ids())
    opts = {"runner": runner, "shard": shard, "progress": progress,
            "retry_failed": retry_failed, "max_attempts": max_attempts, "batching": batching}
    summaries: list[StageSummary] = []
    # Another pass only when a corrupt file was found (and dropped); a torn subtitles file
    # keeps its shard out of the first pass, so its captions file is first checked in the
    # second: each table found corrupt can cost a pass.
    for _ in range(4):
        subs, caps = StageSummary(subs_stage.name), StageSummary(cap_stage.name)
        for items in videos.windows(rundir, window or WINDOW):
            subs.add(run_stage(rundir, items, subs_stage, cid=ids[subs_stage.name], **opts))
            done = rundir.done(subs_stage.name, [it.video_id for it in items],
                                     "subtitles")
            ready = [it for it, ok in zip(items, done, strict=True) if ok]
            del items, done
            caps.add(run_stage(rundir, ready, cap_stage, cid=ids[cap_stage.name], **opts))
            # what align reads next is checked now (page checksums, once a file): a corrupt
            # captions file is dropped and redone by the second pass, not found by align
            rundir.done(cap_stage.name, [it.video_id for it in ready], "captions")
            del ready
        cap_stage.release()  # its parser processes: not needed by align
        if summaries:  # the redone videos count as done by this call
            subs, caps = (first.absorb(again) for first, again in zip(summaries,
                                                                       (subs, caps),
                                                                       strict=True))
        summaries = [subs, caps]
        if source is not None:
            source.close()  # reopened (not converted again) if a second pass needs it
        give_back_memory()
        rejected = rejected_counts(rundir)  # reads every captions file: a corrupt one is
        if not rundir.corrupted:  # dropped here and redone by the second pass
            break
        rundir.corrupted.clear()
    rundir.configs.write("caption", {**config.model_dump(), "rejected": rejected})
    return subs, caps


def rejected_counts(rundir: RunDir) -> dict[str, int]:
    """Captions rejected as showing nothing, by reason (``caption.filler``), over the whole run;
    only the ``rejected`` column is read."""
    df = rundir.table("captions", ["rejected"])
    if "rejected" not in df.columns:
        return {}
    why = df["rejected"]
    counts = why[why.fillna("") != ""].value_counts()
    return {str(k): int(n) for k, n in counts.items()}
