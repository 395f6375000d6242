"""The MEE batches with and without intra-video negatives (HowTo100M Table 3's switch)."""

from __future__ import annotations

from pathlib import Path

import torch

from howtocap.io.pairs import Clip
from howtocap.train.data import grouped_batches
from howtocap.train.losses import max_margin_ranking


def _clips(per_video: list[int]) -> list[Clip]:
    return [Clip(f"v{v}", Path(f"v{v}.mp4"), float(k), float(k + 1), [f"caption {v} {k}"])
            for v, n in enumerate(per_video) for k in range(n)]


def test_one_clip_per_video_means_no_same_video_pair_in_a_batch() -> None:
    clips = _clips([5, 3, 5, 1, 4, 5, 2, 5, 5, 5])  # 40 clips, 5 batches
    for epoch in range(3):
        batches = grouped_batches(clips, 8, 1, epoch, seed=0)
        assert len(batches) == 5 and all(len(b) <= 8 for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(len(clips)))
        for b in batches:
            vids = [clips[i].video_id for i in b]
            assert len(set(vids)) == len(vids), vids
    # the grouped arm does put clips of one video together
    grouped = grouped_batches(clips, 8, 4, 0, seed=0)
    assert any(len({clips[i].video_id for i in b}) < len(b) for b in grouped)


def test_without_intra_video_negatives_every_negative_weighs_the_same() -> None:
    clips = _clips([4] * 8)
    torch.manual_seed(0)
    spread = grouped_batches(clips, 8, 1, 0, seed=1)[0]
    grouped = grouped_batches(clips, 8, 4, 0, seed=1)[0]
    sim = torch.randn(8, 8)
    vids = [clips[i].video_id for i in spread]
    assert torch.allclose(max_margin_ranking(sim, vids), max_margin_ranking(sim, None))
    vids = [clips[i].video_id for i in grouped]
    assert not torch.allclose(max_margin_ranking(sim, vids), max_margin_ranking(sim, None))


def test_a_video_with_more_clips_than_batches_still_gives_every_clip_once() -> None:
    clips = _clips([9, 1, 1])
    batches = grouped_batches(clips, 4, 1, 0, seed=0)
    assert len(batches) == 3
    assert sorted(i for b in batches for i in b) == list(range(11))
