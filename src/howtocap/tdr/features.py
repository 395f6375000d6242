"""TDR frame features over many videos: the ``tdr_frames`` stage through ``run_stage`` (resume,
claims, one line per broken video), then each finished video's rows read back as arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from howtocap.encoders.defaults import ENCODER
from howtocap.engine.core import StageSummary, run_stage
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.subtitles.policy import ASR_MODE
from howtocap.tdr.config import EVERY
from howtocap.tdr.stage import TDR_TABLE, TdrFramesStage


@dataclass
class FrameFeatures:
    """One video's sampled frames: times (n,), transcripts, image and text embeddings (n, d)."""

    times: np.ndarray
    transcripts: list[str]
    image: np.ndarray
    text: np.ndarray


def tdr_features_run(items: Sequence[VideoItem], root: str | Path, *, encoder: str = ENCODER,
                     every: float = EVERY, window: float | None = None,
                     subtitles: str | None = None,
                     asr: str = ASR_MODE, asr_model: str = "default", device: str | None = None,
                     model: Any | None = None, runner: Runner | None = None,
                     progress: bool = True) -> tuple[StageSummary, dict[str, FrameFeatures]]:
    """Features for every item (done videos are read back, not recomputed); failed videos are
    in the summary and missing from the dict."""
    from howtocap.encoders.cache import encoder_slug

    if every <= 0 or (window is not None and window <= 0):
        raise HowtocapError(f"--every and --window must be positive, got {every}, {window}")
    # one run directory per (encoder, sampling) so features of other settings never mix
    rundir = RunDir(Path(root) / f"{encoder_slug(encoder)}-every{every:g}-win{(window or every):g}")
    rundir.configs.write("tdr_frames", {"encoder": encoder, "every": every,
                                       "window": window or every, "asr": asr,
                                       "subtitles": subtitles})
    source = None
    if subtitles:
        from howtocap.io.subtitles import SubtitleSource

        source = SubtitleSource.open(subtitles, cache_dir=rundir.cache_dir / "subtitles",
                                     select={it.video_id for it in items})
    stage = TdrFramesStage(encoder, every=every, window=window, asr_mode=asr,  # type: ignore[arg-type]
                           asr_model=asr_model, source=source, device=device, model=model)
    summary = run_stage(rundir, list(items), stage, runner=runner, progress=progress)
    feats: dict[str, FrameFeatures] = {}
    ids = [it.video_id for it in items]
    done = rundir.done(stage.name, ids, TDR_TABLE)
    wanted = {v for v, ok in zip(ids, done, strict=True) if ok}
    for k in sorted({int(s) for s, ok in zip(rundir.shard_of(ids), done, strict=True) if ok}):
        rows = rundir.read_shard(TDR_TABLE, k)  # a shard file at a time, not the table
        if rows is None:
            continue
        for vid, df in rows.to_pandas().groupby("video_id", sort=False):
            if str(vid) in wanted and not df.empty:
                feats[str(vid)] = FrameFeatures(
                    df["time"].to_numpy(np.float64), [str(t) for t in df["transcript"]],
                    np.stack([np.asarray(v, np.float32) for v in df["image"]]),
                    np.stack([np.asarray(v, np.float32) for v in df["text"]]))
    return summary, {v: feats[v] for v in ids if v in feats}  # in the items' order
