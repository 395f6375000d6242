"""Alignment scoring of one video: its captions against every shifted window of its frames.

The scores do not depend on the filter, so they are the stage's output (``align_scores``); the
global filter is the step's reduce step, in ``align.run``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.align.config import AlignConfig
from howtocap.align.filter import align_video, empty_aligned
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.schemas import Rows, kept_captions

SCORES = "align_scores"
_REF_LOCK = threading.Lock()


class AlignStage(BaseStage):
    name = "align"
    reads = ("captions",)
    writes = (SCORES,)
    reads_cache = ("frames",)  # the frames step's embeddings (filled here when missing)
    reduce_writes = ("aligned",)  # the global filter over every video's scores (``run``)
    resources = Resources(kind="encoder", models=True)
    columnar = True  # captions in as plain columns (``schemas.Rows``): no frame per video

    def __init__(self, encoders: Sequence[str], cfg: AlignConfig, cache_dir: Path, *,
                 device: str | None = None, models: Sequence[Any] | None = None,
                 models_from_names: bool = False,
                 reference: pd.DataFrame | None = None, clip_videos: Sequence[str] = (),
                 clips: tuple[list[np.ndarray], list[str]] | None = None,
                 shots_settings: dict[str, Any] | None = None) -> None:
        """``models``: encoders already built (given, not ``models_from_names``: their names
        identify them). ``reference``/``clip_videos``/``clips``: the default filter's null
        captions, clip videos and clips (per encoder, with each clip's video).
        ``within_shot``: also reads ``shots``, made with ``shots_settings`` (fingerprinted)."""
        if cfg.within_shot:  # an instance's declaration: the graph reads it (engine.graph)
            self.reads = (*self.reads, "shots")
        self.shots_settings = dict(shots_settings or {})
        self.reference = (reference[["video_id", "text"]].astype(str).reset_index(drop=True)
                          if reference is not None else pd.DataFrame(columns=["video_id", "text"]))
        self._ref_embs: list[np.ndarray] | None = None
        self.clip_videos = sorted(map(str, clip_videos))
        self.clips = clips
        # the clips as float64 and their videos as an array, made once per worker
        self._clips64: tuple[list[np.ndarray], np.ndarray] | None = None
        self.encoders = list(encoders)
        self.models_from_names = models_from_names or models is None
        self.cfg, self.cache_dir, self.device = cfg, Path(cache_dir), device
        self._models = list(models) if models is not None else None  # built by the caller

    def load(self) -> None:
        if self._models is None:
            from howtocap.encoders import create

            self._models = [create(n, device=self.device) for n in self.encoders]

    def fingerprint(self) -> dict[str, Any]:
        """The encoders (by weights) and the scoring settings; not the filter, which is a
        reduce step over every video's scores and re-runs freely."""
        from howtocap.encoders.identity import encoder_identity

        encs = [encoder_identity(n) for n in self.encoders] if self.models_from_names else \
            [{"name": m.name} for m in self._models or []]
        c = self.cfg
        ref = hash_text(self.reference.to_csv(index=False, header=False)) \
            if len(self.reference) else 0
        return {**super().fingerprint(), "encoders": encs,
                "reference": {"captions": len(self.reference), "hash": format(ref, "016x"),
                              "clip_videos": self.clip_videos},
                "scoring": {"offset_seconds": c.offset_seconds, "offset_step": c.offset_step,
                            "clip_seconds": c.clip_seconds, "fps": c.fps,
                            "renormalize": c.renormalize,
                            **({"within_shot": True, "shots": self.shots_settings}
                               if c.within_shot else {})}}

    def process(self, video: VideoInput) -> StageOutput:
        from howtocap.encoders.cache import frame_embeddings_multi

        caps = _kept_columns(video.tables["captions"])  # rejected rows are never aligned
        if len(caps["start"]) == 0:
            return StageOutput({SCORES: empty_aligned()})
        path = video.item.video_path
        if path is None or not str(path):
            raise HowtocapError(f"{video.video_id}: no video file known for this video (give "
                                "`howtocap align DIR --videos FOLDER_OR_MANIFEST`)")
        if not Path(path).is_file():
            raise InputError(path, "video file not found")
        models = self._models or []
        frames = frame_embeddings_multi(Path(path), [m.frame_encoder for m in models],
                                        fps=self.cfg.fps, cache_dir=self.cache_dir)
        if not frames or min(len(f.emb) for f in frames) == 0:
            raise InputError(path, "no video frames could be decoded")
        shots = None
        if self.cfg.within_shot:
            table = video.tables.get("shots")
            if table is None or len(table) == 0:
                raise InputError(path, "no shots for this video (--within-shot: its shots "
                                       "stage failed, see `howtocap status`)")
            shots = sorted(zip(np.asarray(table["start"], dtype=float).tolist(),
                               np.asarray(table["end"], dtype=float).tolist(), strict=True))
        texts = [str(t) for t in caps["text"]]
        text_embs = [np.asarray(m.encode_texts(texts), dtype=np.float32) for m in models]
        return StageOutput({SCORES: align_video(video.video_id, caps, frames, text_embs,
                                                [m.name for m in models], self.cfg,
                                                [m.pool_clips for m in models],
                                                self._reference_embs(models),
                                                self.reference["video_id"].tolist(),
                                                *self._clips_f64(),
                                                shots=shots)},
                           metrics={"frames": float(len(frames[0].emb)),
                                    "captions": float(len(texts))})

    def _clips_f64(self) -> tuple[list[np.ndarray] | None, np.ndarray | None]:
        """The reference clips in float64, converted once per worker: ``reference_z`` would
        otherwise convert the whole bank (thousands of clips) for every video."""
        if self.clips is None:
            return None, None
        with _REF_LOCK:
            if self._clips64 is None:
                self._clips64 = ([np.ascontiguousarray(c, dtype=np.float64)
                                  for c in self.clips[0]],
                                 np.asarray(self.clips[1], dtype=object))
        return self._clips64

    def _reference_embs(self, models: Sequence[Any]) -> list[np.ndarray] | None:
        """The reference captions' text embeddings, per encoder, computed once per worker."""
        if len(self.reference) == 0:
            return None
        with _REF_LOCK:  # module-level: a stage is pickled to Ray actors
            if self._ref_embs is None:
                texts = self.reference["text"].tolist()
                # float32 as encoded, held as float64: converted once, not per video
                self._ref_embs = [np.asarray(np.asarray(m.encode_texts(texts),
                                                        dtype=np.float32), dtype=np.float64)
                                  for m in models]
        return self._ref_embs


def _kept_columns(table: pd.DataFrame | Rows) -> dict[str, Any]:
    """A video's kept captions (not ``rejected``) as plain columns, from ``Rows`` (the
    engine's columnar read) or a frame (a caller's own table)."""
    if isinstance(table, pd.DataFrame):
        df = kept_captions(table)
        return {c: df[c].to_numpy() for c in df.columns}
    cols = {c: table[c] for c in table.cols if c != "rejected"}
    if "rejected" not in table.cols:
        return cols
    keep = [not r or r != r for r in table["rejected"]]  # "" or None/NaN: kept
    if all(keep):
        return cols
    idx = np.flatnonzero(keep)
    return {c: (v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx])
            for c, v in cols.items()}
