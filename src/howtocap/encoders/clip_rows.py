"""Clips' rows of the per-second frame-embedding cache: what WebDataset shards of ``content:
embeddings`` store. The shard writer imports no model, so its caller hands it a ``ClipRows``,
which creates the encoder on first use (a bad ``--encoder`` is reported once the run directory
and options have passed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from howtocap.encoders import create
from howtocap.encoders.base import Encoder
from howtocap.encoders.cache import frame_embeddings
from howtocap.encoders.defaults import ENCODER
from howtocap.encoders.windows import rows_covering
from howtocap.io.pairs import Clip


class ClipRows:
    """``meta()`` describes the embeddings (recorded in the export's ``meta.json``); calling it
    on one video's clips gives each clip's rows and the fields its sample's JSON records."""

    fps = 1.0

    def __init__(self, encoder: str | Encoder = ENCODER, *, device: str | None = None) -> None:
        named = isinstance(encoder, str)
        self.spec = encoder if named else str(getattr(encoder, "spec", encoder.name))
        self.device, self._encoder = device, None if named else encoder

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = create(self.spec, device=self.device)
        return self._encoder

    def meta(self) -> dict[str, Any]:
        enc = self.encoder
        return {"encoder": self.spec, "encoder_name": enc.name, "dim": int(enc.dim),
                "fps": self.fps}

    def __call__(self, clips: list[Clip], cache_dir: Path
                 ) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Rows ``lo:hi`` of the video's cached embeddings for every clip (one video's clips;
        raises ``InputError`` when the video does not decode)."""
        fe = frame_embeddings(clips[0].video_path, self.encoder, fps=self.fps,
                              cache_dir=cache_dir)
        emb = np.asarray(fe.emb)
        lo, hi = rows_covering(np.array([c.start for c in clips]),
                               np.array([c.end for c in clips]), len(emb), fe.fps)
        return [(emb[a:b], {"rows": [int(a), int(b)], "fps": fe.fps, "partial": fe.partial})
                for a, b in zip(lo, hi, strict=True)]
