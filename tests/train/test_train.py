"""Training: losses by hand, the gated unit, real tiny training runs on generated videos."""

from __future__ import annotations

import csv
import math
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from howtocap.encoders.dual import DualModel
from howtocap.encoders.mee import GatedEmbeddingUnit
from howtocap.errors import HowtocapError
from howtocap.io.pairs import build_clips, read_pairs
from howtocap.io.video import sample_frames
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.train.api import train
from howtocap.train.data import epoch_draws
from howtocap.train.losses import frozen_copy_regulariser, info_nce, max_margin_ranking
from tests.support.stages import write_rows
from tests.support.tiny_models import (
    EpochKilled,
    TinyEncoder,
    ddp_worker,
    kill_at_epoch_end,
    weights,
)


# -- losses ----------------------------------------------------------------------------------
def test_info_nce_equals_hand_computation():
    g = torch.Generator().manual_seed(0)
    t = F.normalize(torch.randn(3, 4, generator=g), dim=-1)
    v = F.normalize(torch.randn(3, 4, generator=g), dim=-1)
    scale = 7.0
    sim = (t @ v.T).tolist()
    hand = 0.0
    for i in range(3):
        row = [scale * s for s in sim[i]]
        col = [scale * sim[j][i] for j in range(3)]
        hand += -(row[i] - math.log(sum(math.exp(x) for x in row)))
        hand += -(col[i] - math.log(sum(math.exp(x) for x in col)))
    hand /= 2 * 3
    assert float(info_nce(t, v, scale)) == pytest.approx(hand, rel=1e-5)
    # gathered form with this batch as rank 1 of two equals scoring against the whole batch
    t2, v2 = torch.cat([v, t]), torch.cat([t, v])
    ref = float(info_nce(t, v, scale, text_all=t2, video_all=v2, offset=3))
    logits = scale * t @ v2.T
    ce = F.cross_entropy(logits, torch.arange(3) + 3)
    ce2 = F.cross_entropy(scale * v @ t2.T, torch.arange(3) + 3)
    assert ref == pytest.approx(float(0.5 * (ce + ce2)), rel=1e-6)


def test_max_margin_weights_half_of_negatives_on_same_video():
    sim = torch.tensor([[0.50, 0.45, 0.30, 0.10],
                        [0.20, 0.60, 0.55, 0.00],
                        [0.10, 0.30, 0.40, 0.35],
                        [0.00, 0.20, 0.38, 0.70]], requires_grad=True)
    vids = ["a", "a", "b", "b"]
    m = 0.1

    def h(i, j):  # hinge of text i vs clip j plus clip i vs text j
        s = sim.detach()
        return float(max(0.0, m + s[i, j] - s[i, i]) + max(0.0, m + s[j, i] - s[i, i]))

    same = {0: [1], 1: [0], 2: [3], 3: [2]}
    hand = 0.0
    for i in range(4):
        other = [j for j in range(4) if j != i and j not in same[i]]
        hand += 0.5 * sum(h(i, j) for j in same[i]) / len(same[i])
        hand += 0.5 * sum(h(i, j) for j in other) / len(other)
    loss = max_margin_ranking(sim, vids, margin=m)
    assert loss.item() == pytest.approx(hand / 4, rel=1e-6)
    plain = sum(h(i, j) for i in range(4) for j in range(4) if j != i) / (4 * 3)
    assert max_margin_ranking(sim, None, margin=m).item() == pytest.approx(plain, rel=1e-6)
    # with every hinge active, the single same-video negative of a text weighs as much as both
    # other-video ones together: gradient 2:1
    flat = torch.full((4, 4), 0.05).fill_diagonal_(0.0).requires_grad_(True)
    max_margin_ranking(flat, vids, margin=m).backward()
    assert flat.grad[0, 1].item() == pytest.approx(2 * flat.grad[0, 2].item(), rel=1e-6)
    assert flat.grad[0, 2].item() == pytest.approx((0.25 + 0.25) / 4, rel=1e-6)


def test_regulariser_zero_grad_at_init_and_pulls_back_after_drift():
    enc = TinyEncoder()
    model = DualModel(enc)
    frozen = DualModel(TinyEncoder())
    frozen.load_state_dict(model.state_dict())
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (4, 2, 32, 32, 3), dtype=np.uint8)
    texts = ["pour the coffee", "brush the cat", "launch rocket", "count coins"]
    t, v, _ = model(frames, texts)
    with torch.no_grad():
        tr, vr, _ = frozen(frames, texts)
    reg = frozen_copy_regulariser(t, v, tr, vr)
    reg.backward()
    assert reg.item() == pytest.approx(0.0, abs=1e-6)
    grads = [p.grad.abs().max().item() for p in model.parameters() if p.grad is not None]
    assert grads and max(grads) < 1e-4
    # drift, then the regulariser alone moves the weights back towards the frozen copy
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.3 * torch.randn_like(p))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    values = []
    for _ in range(20):
        t, v, _ = model(frames, texts)
        reg = frozen_copy_regulariser(t, v, tr, vr)
        values.append(reg.item())
        opt.zero_grad()
        reg.backward()
        opt.step()
    assert values[0] > 0.01
    assert values[-1] < 0.5 * values[0]


def test_gated_unit_formula():
    unit = GatedEmbeddingUnit(5, 3)
    x = torch.randn(4, 5)
    w1, b1 = unit.fc.weight.detach(), unit.fc.bias.detach()
    w2, b2 = unit.gate.weight.detach(), unit.gate.bias.detach()
    h = x @ w1.T + b1
    y = h * torch.sigmoid(h @ w2.T + b2)
    expect = y / y.norm(dim=-1, keepdim=True)
    assert torch.allclose(unit(x), expect, atol=1e-6)
    assert torch.allclose(unit(x).norm(dim=-1), torch.ones(4), atol=1e-6)


# -- data ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def videos(tmp_path_factory) -> list:
    out = tmp_path_factory.mktemp("train-videos")
    vids = []
    for v in range(4):
        steps = [DEFAULT_STEPS[(v * 3 + k) % len(DEFAULT_STEPS)] for k in range(4)]
        vids.append(make_narrated_video(out, f"vid{v}", steps, seconds_per_step=2.0, fps=4,
                                        size=48, audio=False, subtitles=None))
    return vids


def write_pairs(path: Path, videos: list, extra: list[dict] | None = None) -> Path:
    rows = []
    for sv in videos:
        for s in sv.steps:
            rows.append({"video_id": sv.video_id, "video_path": str(sv.video_path),
                         "caption": s.caption, "start": s.start, "end": s.end})
            rows.append({"video_id": sv.video_id, "video_path": str(sv.video_path),
                         "caption": s.narration, "start": s.start, "end": s.end})
    rows += extra or []
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["video_id", "video_path", "caption", "start", "end"])
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.mark.slow
def test_captions_grouped_per_clip_and_one_drawn_per_epoch(videos, tmp_path):
    ps = build_clips(read_pairs(write_pairs(tmp_path / "p.csv", videos)), log=None)
    assert len(ps.clips) == 16 and all(len(c.captions) == 2 for c in ps.clips)
    assert ps.n_pairs == 32
    d0 = epoch_draws(ps.clips, 0, 0, 4)
    d1 = epoch_draws(ps.clips, 1, 0, 4)
    assert sorted(d.clip for d in d0) == list(range(16))  # each clip once per epoch
    assert d0 == epoch_draws(ps.clips, 0, 0, 4)  # reproducible
    assert d0 != d1
    assert {d.caption for d in d0 + d1} == {0, 1}
    for d in d0:
        c = ps.clips[d.clip]
        assert all(c.start <= t <= c.end for t in d.times) and len(d.times) == 4


@pytest.mark.slow
def test_missing_and_unreadable_videos_skipped_and_counted(videos, tmp_path, capsys):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"this is not a video" * 10)
    extra = [{"video_id": "gone", "video_path": str(tmp_path / "nope.mp4"), "caption": "x y",
              "start": 0, "end": 2},
             {"video_id": "gone", "video_path": str(tmp_path / "nope.mp4"), "caption": "z",
              "start": 2, "end": 4},
             {"video_id": "broken", "video_path": str(bad), "caption": "a b", "start": 0,
              "end": 2}]
    res = train(write_pairs(tmp_path / "p.csv", videos[:2], extra), out_dir=tmp_path / "run",
                encoder=TinyEncoder(), epochs=1, batch_size=4, lr=1e-3, eval_fraction=0,
                frames_per_clip=2, progress=False)
    assert set(res.skipped_videos) == {"gone", "broken"}
    assert res.skipped_pairs == 3
    assert res.n_pairs == 16 and res.n_train_clips == 8
    err = capsys.readouterr().err
    assert "skipped 2 video(s), 3 pair(s)" in err
    assert "nope.mp4" in err and "broken.mp4" in err


@pytest.mark.slow
def test_empty_training_set_is_a_clear_error(tmp_path):
    header_only = tmp_path / "empty.csv"
    header_only.write_text("video_id,video_path,caption,start,end\n")
    with pytest.raises(HowtocapError, match="no usable caption–clip pairs"):
        train(header_only, out_dir=tmp_path / "r1", encoder=TinyEncoder(), progress=False)
    all_missing = tmp_path / "missing.csv"
    all_missing.write_text("video_id,video_path,caption,start,end\nv,gone.mp4,hello,0,2\n")
    with pytest.raises(HowtocapError, match=r"1 video\(s\) skipped"):
        train(all_missing, out_dir=tmp_path / "r2", encoder=TinyEncoder(), progress=False)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("id,path\nv,x.mp4\n")
    with pytest.raises(HowtocapError, match="wrong.csv: CSV of pairs needs columns"):
        train(wrong, out_dir=tmp_path / "r3", encoder=TinyEncoder(), progress=False)


# -- training runs ---------------------------------------------------------------------------
KW = dict(epochs=4, batch_size=6, lr=3e-3, frames_per_clip=2, eval_fraction=0.25, warmup=0.1,
          progress=False)


@pytest.mark.slow
def test_dual_trains_loss_decreases_and_logs(videos, tmp_path):
    res = train(write_pairs(tmp_path / "p.csv", videos), out_dir=tmp_path / "run",
                encoder=TinyEncoder(), frames="pixels", **KW)
    losses = [r["loss"] for r in res.history if r["epoch"] > 0]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert res.history[0]["epoch"] == 0 and "R@1" in res.history[0]
    assert res.n_eval_clips == 4 and res.n_train_clips == 12
    log = pd.read_csv(tmp_path / "run" / "train_log.csv")
    assert list(log["epoch"]) == [0, 1, 2, 3, 4]
    assert log["R@5"].notna().all()
    assert (tmp_path / "run" / "train_log.png").stat().st_size > 5000
    assert (tmp_path / "run" / "ckpt" / "howtocap_checkpoint.json").exists()
    import json

    cfg = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert cfg["frames"] == "pixels" and cfg["train_clips"] == 12 and cfg["lr"] == 3e-3
    assert list((tmp_path / "run" / "cache" / "pixels").glob("*/*.npy"))


@pytest.mark.slow
def test_resume_continues_exactly(videos, tmp_path):
    pairs = write_pairs(tmp_path / "p.csv", videos)
    kw = {**KW, "epochs": 2}
    full = train(pairs, out_dir=tmp_path / "full", encoder=TinyEncoder(), **kw)

    with pytest.raises(EpochKilled):
        train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(),
              on_epoch_end=kill_at_epoch_end, **kw)
    with pytest.raises(HowtocapError, match="pass --resume"):
        train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(), **kw)
    res = train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(), resume=True, **kw)
    assert res.resumed_from == 1 and res.epochs_run == 1
    a, b = weights(full.checkpoint), weights(res.checkpoint)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    assert [r["epoch"] for r in res.history] == [0, 1, 2]
    assert res.history[-1]["loss"] == pytest.approx(full.history[-1]["loss"], abs=1e-6)
    # the weights really moved (resume is not trivially equal to the start)
    init = DualModel(TinyEncoder()).state_dict()
    assert any(not torch.allclose(init[k], a[k]) for k in a)


@pytest.mark.slow
def test_wrong_architecture_checkpoint_is_a_clear_error(videos, tmp_path):
    pairs = write_pairs(tmp_path / "p.csv", videos[:2])
    kw = {**KW, "epochs": 1, "eval_fraction": 0}
    train(pairs, out_dir=tmp_path / "run", encoder=TinyEncoder(16), **kw)
    with pytest.raises(HowtocapError) as e:
        train(pairs, out_dir=tmp_path / "run", encoder=TinyEncoder(8), resume=True,
              epochs=2, batch_size=6, lr=3e-3, frames_per_clip=2, eval_fraction=0,
              progress=False)
    msg = str(e.value)
    assert "last.pt" in msg and "'tiny16'" in msg and "'tiny8'" in msg
    assert "\n" not in msg


@pytest.mark.slow
def test_ddp_two_processes_gloo(videos, tiny_clip, tmp_path):
    import torch.multiprocessing as mp

    pairs = write_pairs(tmp_path / "p.csv", videos)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_worker, args=(2, port, str(pairs), str(tmp_path / "ddp"), tiny_clip),
             nprocs=2)
    log = pd.read_csv(tmp_path / "ddp" / "train_log.csv")
    assert list(log["epoch"]) == [0, 1]
    # 12 training clips, 2 ranks x 2 batches of 3: the checkpoint records 2 optimizer steps
    ck = torch.load(tmp_path / "ddp" / "ckpt" / "last.pt", weights_only=True)
    assert ck["step"] == 2
    from howtocap.encoders import create

    init = DualModel(create(tiny_clip)).state_dict()
    assert any(not torch.allclose(init[k], ck["model"][k]) for k in init)
    # both ranks end with the same weights: DDP averaged their gradients every step
    r0 = torch.load(tmp_path / "ddp" / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "ddp" / "rank1.pt", weights_only=True)
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k
        assert torch.equal(r0[k], ck["model"][k]), k
    # and they equal one process training on the union batch (6 = 2 x 3 draws): the all-gather
    # gives InfoNCE every rank's negatives and routes gradients back correctly
    solo = train(pairs, out_dir=tmp_path / "solo", encoder=tiny_clip, epochs=1, batch_size=6,
                 lr=3e-3, frames_per_clip=2, eval_fraction=0.25, progress=False, device="cpu")
    one = solo.model.state_dict()
    # (attention key biases have an exactly-zero true gradient; Adam turns float noise in it
    # into full-size steps, so they cannot match)
    for k in r0:
        if not k.endswith("k_proj.bias"):
            assert torch.allclose(r0[k], one[k], atol=1e-5), k


@pytest.mark.slow
def test_pairs_from_run_directory_use_kept_rows_only(videos, tmp_path):
    from howtocap.engine.rundir import RunDir
    from howtocap.io.inputs import VideoItem
    from howtocap.schemas import conform

    rd = RunDir(tmp_path / "run")
    rd.record_videos([VideoItem(v.video_id, v.video_path) for v in videos[:2]])
    rows = []
    for v in videos[:2]:
        for k, s in enumerate(v.steps):
            rows.append({"video_id": v.video_id, "start": s.start, "end": s.end,
                         "text": s.caption, "orig_start": s.start, "orig_end": s.end,
                         "offset": 0.0, "score": 0.5, "kept": k != 3, "encoders": "x",
                         "source": "llm", "block": 0, "model": "m"})
    write_rows(rd, "aligned", conform(pd.DataFrame(rows), "aligned"))
    pairs = read_pairs(rd.root)
    assert len(pairs) == 6 and set(pairs["video_id"]) == {"vid0", "vid1"}
    # the table's folder (and one of its shard files) is the same source, with the run's paths
    pd.testing.assert_frame_equal(read_pairs(rd.root / "aligned"), pairs)
    pd.testing.assert_frame_equal(read_pairs(rd.table_files("aligned")[0]), pairs)
    assert pairs["video_path"].str.endswith(".mp4").all()
    assert videos[0].steps[3].caption not in set(pairs[pairs.video_id == "vid0"]["text"])
    with pytest.raises(HowtocapError, match="has no aligned or framecaps table"):
        read_pairs(tmp_path)


@pytest.mark.slow
def test_checkpoint_loads_through_the_encoder_factory(videos, tiny_clip, tmp_path):
    from howtocap.encoders import create

    res = train(write_pairs(tmp_path / "p.csv", videos), out_dir=tmp_path / "run",
                encoder=tiny_clip, epochs=2, batch_size=6, lr=1e-3, frames_per_clip=2,
                eval_fraction=0.25, progress=False)
    losses = [r["loss"] for r in res.history if r["epoch"] > 0]
    assert losses[-1] < losses[0]
    base = create(tiny_clip)
    for where in (res.checkpoint, res.checkpoint.parent):
        enc = create(str(where))
        assert enc.dim == base.dim and enc.name != base.name and "+ft-" in enc.name
        texts = ["pour coffee into a cup", "launch the rocket"]
        # the loaded encoder is the trained model: same embeddings, not the base model's
        trained = F.normalize(res.model.encoder.text_features(
            res.model.encoder.tokenize(texts)).float(), dim=-1).detach().numpy()
        np.testing.assert_allclose(enc.encode_texts(texts), trained, atol=1e-5)
        assert not np.allclose(enc.encode_texts(texts), base.encode_texts(texts), atol=1e-3)
    frames = sample_frames(videos[0].video_path, [0.5, 2.5], size=32)
    assert enc.encode_images(frames).shape == (2, base.dim)


@pytest.mark.slow
def test_mee_baseline_trains_on_cached_features_and_loads(videos, tiny_clip, tmp_path):
    from howtocap.encoders import create

    res = train(write_pairs(tmp_path / "p.csv", videos), out_dir=tmp_path / "mee", model="mee",
                encoder=tiny_clip, epochs=6, batch_size=6, lr=1e-2, eval_fraction=0.25,
                mee_dim=24, progress=False)
    losses = [r["loss"] for r in res.history if r["epoch"] > 0]
    assert losses[-1] < losses[0]
    assert sum(p.is_file() for p in (tmp_path / "mee" / "cache").rglob("*")) >= 3  # per video
    enc = create(str(res.checkpoint))
    assert enc.dim == 24
    emb = enc.encode_texts(["pour coffee", "launch the rocket"])
    assert emb.shape == (2, 24)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    frames = sample_frames(videos[0].video_path, [0.5], size=32)
    assert enc.encode_images(frames).shape == (1, 24)
    # a dual run cannot resume a mee checkpoint
    with pytest.raises(HowtocapError, match="checkpoint is a mee model"):
        train(write_pairs(tmp_path / "p.csv", videos), out_dir=tmp_path / "mee",
              encoder=tiny_clip, resume=True, epochs=7, progress=False)


@pytest.mark.slow
def test_train_params_freezes_everything_else(videos, tmp_path):
    pairs = write_pairs(tmp_path / "p.csv", videos[:2])
    res = train(pairs, out_dir=tmp_path / "run", encoder=TinyEncoder(), epochs=1,
                batch_size=4, lr=1e-2, frames_per_clip=2, eval_fraction=0, alpha=0,
                train_params=r"text_proj\.", progress=False)
    init, done = DualModel(TinyEncoder()).state_dict(), weights(res.checkpoint)
    changed = {k for k in init if not torch.equal(init[k], done[k])}
    assert changed == {"encoder.text_proj.weight", "encoder.text_proj.bias",
                       "logit_scale.log_scale"}
    fixed = train(pairs, out_dir=tmp_path / "fixed", encoder=TinyEncoder(), epochs=1,
                  batch_size=4, lr=1e-2, frames_per_clip=2, eval_fraction=0, temperature=0.05,
                  num_workers=2, progress=False)
    assert fixed.history[-1]["logit_scale"] == pytest.approx(20.0)
    init_scale = DualModel(TinyEncoder(), temperature=0.05).state_dict()["logit_scale.log_scale"]
    assert torch.equal(weights(fixed.checkpoint)["logit_scale.log_scale"], init_scale)
    with pytest.raises(HowtocapError, match="matches no parameter; names look like encoder"):
        train(pairs, out_dir=tmp_path / "r2", encoder=TinyEncoder(), train_params="nothing",
              progress=False)


@pytest.mark.slow
def test_cli_trains_and_reports_user_errors_in_one_line(videos, tiny_clip, tmp_path):
    import typer
    from typer.testing import CliRunner

    from howtocap.cli import add_commands

    app = typer.Typer()
    add_commands(app, "train")

    @app.command()
    def other() -> None:  # a second command so "train" is a sub-command, as in howtocap
        pass

    pairs = write_pairs(tmp_path / "p.csv", videos[:2])
    runner = CliRunner()
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", str(pairs), "--out", str(out), "--encoder", tiny_clip,
                            "--epochs", "1", "--batch-size", "4", "--frames-per-clip", "2",
                            "--eval-fraction", "0", "--frames", "pixels"])
    assert r.exit_code == 0, r.output
    assert (out / "ckpt" / "last.pt").exists() and (out / "train_log.csv").exists()
    r = runner.invoke(app, ["train", str(pairs), "--out", str(out), "--encoder", tiny_clip,
                            "--model", "mee", "--resume"])
    assert r.exit_code == 2
    assert "error:" in r.output and "checkpoint is a dual model" in r.output
    assert "Traceback" not in r.output
