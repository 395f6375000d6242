"""HowToCaption's second round: fine-tune on round-1 pairs, then align with both encoders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run
from howtocap.engine.rundir import RunDir
from howtocap.io.inputs import resolve_inputs
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.train.api import train
from tests.support.cli import run_cli
from tests.support.stages import write_rows


@pytest.mark.slow
def test_finetune_then_realign_with_original_and_checkpoint(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    rd = RunDir(tmp_path / "run")
    rows = []
    for i in range(3):
        steps = DEFAULT_STEPS[3 * i:3 * i + 3]
        v = make_narrated_video(videos, f"v{i}", steps, seconds_per_step=3.0, fps=5, size=96,
                                audio=False, subtitles=None)
        rows += [{"video_id": v.video_id, "start": s.start, "end": s.start + 8.0,
                  "text": s.caption, "source": "llm", "block": 0, "model": "reference"}
                 for s in v.steps]
    rd.record_videos(resolve_inputs([videos]))
    write_rows(rd, "captions", pd.DataFrame(rows))

    first = align_run(rd, ["default"], AlignConfig(quantile=0.8), progress=False)
    assert first.done == 3 and first.ok
    alone = pd.read_parquet(rd.root / "aligned")  # the original encoder alone
    # the fine-tune for the second round: HowToCaption's recipe with L_align (alpha 0.1)
    res = train(rd.root, out_dir=tmp_path / "round1", encoder="default", epochs=1,
                recipe="second-round", batch_size=4, frames_per_clip=2, eval_frames=2,
                queue_size=16, eval_fraction=0.2, train_params="residual", progress=False)
    ckpt = tmp_path / "round1" / "ckpt" / "last.pt"
    assert ckpt.exists() and res.n_train_clips > 0
    assert "reg" in res.history[-1]  # L_align was on

    # the CLI, as a user types it: the original and the fine-tuned encoder, averaged
    out = run_cli("align", str(rd.root), "--encoder", "default", "--encoder", str(ckpt),
                  "--quantile", "0.8", "--redo", "--quiet", timeout=300)
    assert out.returncode == 0, out.stderr
    aligned = pd.read_parquet(rd.root / "aligned")
    assert len(aligned) == len(rows)
    names = aligned["encoders"].iloc[0].split(",")
    assert names[0] == "default-v1" and names[1].startswith("default-v1+ft-")
    # the fine-tuned encoder counts: the scores are not the original encoder's alone
    both = aligned.merge(alone, on=["video_id", "text"], suffixes=("", "_alone"))
    assert len(both) == len(rows)
    assert not np.allclose(both["score"], both["score_alone"], rtol=0, atol=1e-6)
    # --quantile 0.8 keeps the best 80 % of the new scores
    assert aligned["kept"].tolist() == (
        aligned["score"] >= np.quantile(aligned["score"], 0.2)).tolist()
