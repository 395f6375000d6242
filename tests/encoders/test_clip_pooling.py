"""One clip pooling for every consumer: ``Encoder.pool_clips``, on a real MEE checkpoint.

The checkpoint is written here in the format of the layout before the models moved out of
``train/`` (its description names ``howtocap.train.mee.JointEmbedding``), so the test also
proves that such checkpoints still load.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from howtocap.align.config import AlignConfig
from howtocap.align.filter import window_scores
from howtocap.encoders import create
from howtocap.encoders.cache import frame_embeddings
from howtocap.encoders.checkpoint import FORMAT, META_NAME, signature
from howtocap.encoders.mee import JointEmbedding, MEEEncoder
from howtocap.encoders.windows import window_means
from howtocap.evaluate.benchmarks import EvalSample
from howtocap.evaluate.embed import video_embeddings
from howtocap.io.video import sample_frames, segment_times
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.search.index import clip_vectors, frame_matrix
from howtocap.train.tiny import make_tiny_clip

START, END = 0.0, 4.0  # two steps (two photographs): the frames really differ


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("pooling")
    video = make_narrated_video(root, "v0", DEFAULT_STEPS[:3], seconds_per_step=2.0, fps=4,
                                size=48, audio=False, subtitles=None).video_path
    spec = make_tiny_clip(root / "clip", width=16, dim=8, image_size=32, patch_size=16)
    base = create(spec, device="cpu")
    with torch.random.fork_rng():
        torch.manual_seed(3)
        joint = JointEmbedding(base.dim, base.dim, 12)
    meta = {"format": FORMAT, "model": "mee", "encoder": spec,
            "class": "howtocap.train.mee.JointEmbedding",  # where the class lived before
            "signature": signature(joint), "video_dim": base.dim, "text_dim": base.dim,
            "dim": 12}
    ckpt = root / "run" / "ckpt"
    ckpt.mkdir(parents=True)
    torch.save({"model": joint.state_dict(), "epoch": 3, "step": 9, "meta": meta},
               ckpt / "last.pt")
    (ckpt / META_NAME).write_text(json.dumps(meta))
    return video, spec, ckpt / "last.pt"


def _align(enc, rows: np.ndarray) -> np.ndarray:
    """The clip embedding align scores: unit 'texts' make the scores the window embedding."""
    eye = np.eye(enc.dim, dtype=np.float32)
    cfg = AlignConfig(offset_seconds=0, clip_seconds=END - START)
    scores, _ = window_scores(rows, eye, np.full(enc.dim, START), END, cfg, enc.pool_clips)
    return scores[:, 0]


@pytest.mark.slow
def test_align_eval_and_search_embed_an_mee_clip_the_same_way(setup, tmp_path: Path) -> None:
    video, spec, pt = setup
    enc = create(str(pt), device="cpu")  # an old-layout checkpoint loads
    assert isinstance(enc, MEEEncoder) and enc.name.endswith("+ft-x-e3")
    assert enc.frame_encoder is enc.base and enc.pooling == "max"
    # align and search read the same frame cache (the base encoder's rows): identical vectors
    cache = tmp_path / "cache"
    fe = frame_embeddings(video, enc.frame_encoder, fps=1.0, cache_dir=cache)
    rows = frame_matrix(video, enc, fps=1.0, cache_dir=cache)
    assert np.array_equal(rows, np.asarray(fe.emb, dtype=np.float32))
    v_align = _align(enc, np.asarray(fe.emb)).astype(np.float32)
    v_search = clip_vectors(enc, rows, np.array([START]), np.array([END]), 1.0)[0]
    assert np.array_equal(v_align, v_search)
    # eval decodes the clip's frames itself (4 at the second centres) and pools them the same
    ev = video_embeddings([EvalSample("v0", video, "x", START, END)], enc, n_frames=4,
                          progress=False)
    assert ev.ok.all()
    frames = sample_frames(video, segment_times(START, END, 4), size=enc.image_size)
    exact = enc.frame_encoder.encode_images(frames)  # the same frames, not rounded to fp16
    assert np.allclose(ev.emb[0], _align(enc, exact), atol=1e-6)
    assert np.allclose(ev.emb[0], clip_vectors(enc, exact, np.array([START]), np.array([END]),
                                               1.0)[0], atol=1e-6)
    # the pooling it was trained with (max, then the unit), not the mean of unit frame vectors
    with torch.no_grad():
        trained = joint_video(enc, exact.max(0))
    assert np.allclose(ev.emb[0], trained, atol=1e-6)
    mean = enc.encode_images(frames).mean(0)
    assert np.abs(mean / np.linalg.norm(mean) - trained).max() > 0.02


def joint_video(enc: MEEEncoder, pooled: np.ndarray) -> np.ndarray:
    x = torch.nn.functional.normalize(torch.from_numpy(pooled.astype(np.float32)), dim=-1)
    return enc.joint.video_unit(x).numpy()


@pytest.mark.slow
def test_a_plain_encoder_pools_the_mean_everywhere(setup, tmp_path: Path) -> None:
    video, spec, _ = setup
    enc = create(spec, device="cpu")
    assert enc.frame_encoder is enc and enc.pooling == "mean"
    rows = frame_matrix(video, enc, fps=1.0, cache_dir=tmp_path / "cache")
    lo, hi = np.array([0]), np.array([4])
    want = window_means(rows, lo, hi, renormalize=True)[0]  # search's unit clip vectors
    align = window_means(rows, lo, hi, AlignConfig().renormalize)[0]  # align's setting
    assert np.allclose(_align(enc, rows), align, atol=1e-12)
    assert np.allclose(clip_vectors(enc, rows, np.array([START]), np.array([END]), 1.0)[0],
                       want, atol=1e-6)
    frames = sample_frames(video, segment_times(START, END, 4), size=enc.image_size)
    ev = video_embeddings([EvalSample("v0", video, "x", START, END)], enc, n_frames=4,
                          progress=False)
    mean = enc.encode_images(frames).mean(0)
    assert np.allclose(ev.emb[0], mean / np.linalg.norm(mean), atol=1e-6)
