"""HowToCaption's training recipe: momentum model, queue, soft labels, crops, presets, and the
MEE baseline's one pooling in training, evaluation and alignment."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from howtocap.errors import HowtocapError
from howtocap.io.pairs import build_clips, read_pairs
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from howtocap.train.api import train
from howtocap.train.config import RECIPES, Recipe, RecipeName, TrainConfig, make_config
from howtocap.train.data import apply_crop, crop_box, epoch_draws
from howtocap.train.losses import (
    FeatureQueue,
    ema_update,
    info_nce,
    itc_targets,
    soft_info_nce,
)
from tests.support.tiny_models import EpochKilled, TinyEncoder, kill_at_epoch_end


# -- the parts, by hand -----------------------------------------------------------------------
def test_momentum_update_is_the_ema_of_trained_parameters():
    torch.manual_seed(0)
    online, mom = nn.Linear(3, 2), nn.Linear(3, 2)
    online.bias.requires_grad_(False)  # a frozen parameter is left alone
    w_m, b_m = mom.weight.detach().clone(), mom.bias.detach().clone()
    ema_update(online, mom, 0.9)
    assert torch.allclose(mom.weight, 0.9 * w_m + 0.1 * online.weight.detach(), atol=1e-7)
    assert torch.equal(mom.bias, b_m)
    ema_update(online, mom, 0.0)  # m = 0 copies the online weights
    assert torch.equal(mom.weight, online.weight)


def test_queue_is_fifo_of_fixed_size():
    q = FeatureQueue(5, 2)
    assert [len(x) for x in q.contents()] == [0, 0, 0]  # starts empty
    rows = torch.arange(14, dtype=torch.float32).view(7, 2)
    q.enqueue(rows[:3], -rows[:3], torch.tensor([0, 1, 2]))
    t, v, ids = q.contents()
    assert ids.tolist() == [0, 1, 2] and torch.equal(t, rows[:3]) and torch.equal(v, -rows[:3])
    q.enqueue(rows[3:7], -rows[3:7], torch.tensor([3, 4, 5, 6]))
    t, v, ids = q.contents()
    assert ids.tolist() == [2, 3, 4, 5, 6]  # the two oldest left, oldest first
    assert torch.equal(t, rows[2:7]) and int(q.count) == 5
    q.enqueue(rows, rows, torch.arange(10, 17))  # more than fits: only the newest 5
    assert q.contents()[2].tolist() == [12, 13, 14, 15, 16]
    q2 = FeatureQueue(5, 2)
    q2.load_state_dict(q.state_dict())  # travels in checkpoints
    assert torch.equal(q2.contents()[0], q.contents()[0])


def test_soft_label_targets_against_hand_computation():
    ids = torch.tensor([7, 9])
    key_ids = torch.tensor([7, 9, 7, 3])  # the batch, then a queue holding clip 7 again
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.5, 1.5, 0.0, 0.0]])
    got = itc_targets(ids, key_ids, logits, 0.6)
    e = np.exp(logits.numpy().astype(np.float64))
    soft = e / e.sum(1, keepdims=True)
    hard = np.array([[0.5, 0, 0.5, 0], [0, 1, 0, 0]])
    assert np.allclose(got.numpy(), 0.6 * soft + 0.4 * hard, atol=1e-6)
    assert np.allclose(got.sum(1).numpy(), 1.0)
    assert torch.equal(itc_targets(ids, key_ids, logits, 0.0), torch.tensor(hard).float())
    # the loss with targets, by hand
    g = torch.Generator().manual_seed(1)
    t = F.normalize(torch.randn(2, 4, generator=g), dim=-1)
    v = F.normalize(torch.randn(2, 4, generator=g), dim=-1)
    tk = F.normalize(torch.randn(4, 4, generator=g), dim=-1)
    vk = F.normalize(torch.randn(4, 4, generator=g), dim=-1)
    loss = soft_info_nce(t, v, 10.0, tk, vk, got, got)
    lt = -(torch.log_softmax(10 * t @ vk.T, 1) * got).sum(1).mean()
    lv = -(torch.log_softmax(10 * v @ tk.T, 1) * got).sum(1).mean()
    assert torch.allclose(loss, (lt + lv) / 2, atol=1e-6)
    # one-hot targets over the batch alone: exactly InfoNCE
    eye = itc_targets(ids, ids, None, 0.0)
    assert torch.allclose(soft_info_nce(t, v, 10.0, t, v, eye, eye), info_nce(t, v, 10.0),
                          atol=1e-6)


def test_crop_boxes_follow_scale_and_crop_resizes_back():
    rng = np.random.default_rng(0)
    boxes = [crop_box(rng, (0.5, 1.0)) for _ in range(300)]
    areas = np.array([w * h for _, _, w, h in boxes])
    assert areas.min() >= 0.5 - 1e-9 and areas.max() <= 1.0 + 1e-9
    assert all(x >= 0 and y >= 0 and x + w <= 1 + 1e-9 and y + h <= 1 + 1e-9
               for x, y, w, h in boxes)
    frames = np.zeros((2, 40, 40, 3), np.uint8)
    frames[:, :20, :20] = 255  # white top-left quadrant
    out = apply_crop(frames, (0.0, 0.0, 0.5, 0.5))  # exactly that quadrant, blown up
    assert out.shape == frames.shape and out.dtype == np.uint8 and out[:, 2:38, 2:38].min() > 250
    assert np.array_equal(apply_crop(frames, None), frames)


# -- presets and the typed config --------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_recipe_values_and_explicit_flags_override():
    h = make_config(out_dir="o", recipe="howtocaption")
    assert (h.optimizer, h.lr, h.weight_decay, h.batch_size) == ("adamw", 1e-6, 0.05, 128)
    assert (h.frames_per_clip, h.eval_frames) == (4, 12)
    assert (h.momentum, h.queue_size, h.soft_labels) == (0.995, 2048, 0.6)
    assert h.crop_scale == (0.5, 1.0) and h.alpha == 0.0 and h.recipe == "howtocaption"
    v = make_config(out_dir="o", recipe="ventura")
    assert (v.optimizer, v.lr, v.batch_size, v.frames_per_clip, v.epochs) == (
        "adam", 1e-4, 16, 10, 10)
    assert v.alpha == 0 and v.momentum == 0 and v.queue_size == 0
    assert v.warmup == 0.0  # cosine decay from the first step
    two = make_config(out_dir="o", recipe="second-round")
    assert two.alpha == 0.1
    assert two.model_dump(exclude={"alpha", "recipe"}) == h.model_dump(exclude={"alpha",
                                                                                  "recipe"})
    o = make_config(out_dir="o", recipe="howtocaption", lr=1e-4, queue_size=64, momentum=None)
    assert o.lr == 1e-4 and o.queue_size == 64 and o.momentum == 0.995
    assert make_config(out_dir="o").alpha == 0.0  # L_align is off unless asked for
    assert make_config(out_dir="o", model="mee").lr == 1e-3  # the model's default lr
    assert set(RECIPES) == set(get_args(RecipeName)) == {"howtocaption", "second-round",
                                                         "ventura"}
    assert all(isinstance(r, Recipe) for r in RECIPES.values())
    # a recipe sets only TrainConfig's fields, with TrainConfig's types
    for r in RECIPES.values():
        assert set(r.settings()) <= set(TrainConfig.model_fields)
        assert TrainConfig(out_dir="o", **r.settings()).model_dump(include=set(r.settings())) \
            == r.settings()


def _docs_recipe_table() -> dict[str, dict[str, str]]:
    """docs/train.md's recipe table: row name -> column (recipe or "no recipe") -> cell, a
    "=" cell replaced by the howtocaption column's."""
    section = (ROOT / "docs" / "train.md").read_text().split("## Recipes (`--recipe`)")[1]
    first = section[section.index("\n|") + 1:]
    lines = first[:first.find("\n\n")].splitlines()  # the first table only
    cols = [c.strip(" `") for c in lines[0].strip("|").split("|")][1:]
    table = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        row = dict(zip(cols, cells[1:], strict=True))
        table[cells[0]] = {c: row["howtocaption"] if x.startswith("=") else x
                           for c, x in row.items()}
    return table


def _documented(cell: dict[str, str]) -> dict:
    """The TrainConfig values a column of the table states."""
    opt = re.fullmatch(r"(AdamW|Adam) ([\d.e-]+)(?: \(mee [\d.e-]+\))?, "
                       r"(?:decay ([\d.]+)|no decay)", cell["optimizer, lr"])
    batch = re.fullmatch(r"(\d+), (\d+) / (\d+)", cell["batch, frames train / eval"])
    warm = re.fullmatch(r"(?:warmup (\d+) % \+ cosine|cosine from step 0)", cell["schedule"])
    blip = cell["momentum model, queue, soft labels"]
    crop = cell["random-resized crop (area)"]
    assert opt and batch and warm, cell
    mom, queue, soft = (0.0, 0, 0.0) if blip == "–" else (
        float(blip.split(", ")[0]), int(blip.split(", ")[1]), float(blip.split(", ")[2]))
    return {"optimizer": opt[1].lower(), "lr": float(opt[2]),
            "weight_decay": float(opt[3] or 0), "batch_size": int(batch[1]),
            "frames_per_clip": int(batch[2]), "eval_frames": int(batch[3]),
            "warmup": int(warm[1] or 0) / 100, "epochs": int(cell["epochs"].split()[0]),
            "momentum": mom, "queue_size": queue, "soft_labels": soft,
            "crop_scale": None if crop == "–" else tuple(float(x) for x in crop.split("–")),
            "alpha": float(cell["L_align `alpha`"].strip("*"))}


def test_each_preset_equals_what_the_docs_table_says():
    table = _docs_recipe_table()
    columns = {c for row in table.values() for c in row}
    assert columns == {*RECIPES, "no recipe"}  # a new recipe needs its column
    for col in columns:
        want = _documented({row: cells[col] for row, cells in table.items()})
        cfg = make_config(out_dir="o", recipe=None if col == "no recipe" else col)
        got = cfg.model_dump(include=set(want))
        got["eval_frames"] = cfg.eval_frames or cfg.frames_per_clip  # None: the training count
        assert got == want, col


@pytest.mark.slow
@pytest.mark.parametrize(("options", "line"), [
    ({"recipe": "blip"}, "--recipe must be howtocaption, second-round or ventura, not 'blip'"),
    ({"model": "clip4clip"}, "--model must be dual or mee, not 'clip4clip'"),
    ({"optimizer": "sgd"}, "--optimizer must be adamw or adam, not 'sgd'"),
    ({"frames": "gpu"}, "--frames must be decode, pixels or webdataset, not 'gpu'"),
    ({"epochs": "many"}, "--epochs: Input should be a valid integer"),
    ({"model": "mee", "recipe": "howtocaption"}, "--recipe howtocaption is a dual-encoder recipe"),
    ({"momentum": 1.5}, "--momentum: Input should be less than 1"),
    ({"crop_scale": (0.9, 0.2)}, "--crop-scale: needs two area fractions 0 < MIN <= MAX <= 1"),
])
def test_a_wrong_option_is_one_line_before_any_data_is_read(tmp_path, options, line):
    """Checked where it enters: the pairs file does not even exist, and the error is the
    option's, in one line."""
    with pytest.raises(HowtocapError) as e:
        train(tmp_path / "no-such-pairs.csv", out_dir=tmp_path / "o", encoder=TinyEncoder(),
              progress=False, **options)
    msg = str(e.value)
    assert msg.startswith(line) and "\n" not in msg
    assert not (tmp_path / "o").exists()


def test_several_wrong_options_share_one_line():
    with pytest.raises(HowtocapError) as e:
        make_config(out_dir="o", model="x", optimizer="y", shuffle_bufer=3)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.split("; ") == ["--model must be dual or mee, not 'x'",
                               "--optimizer must be adamw or adam, not 'y'",
                               "'shuffle_bufer' is not an option"]


def test_cli_reports_a_wrong_option_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from howtocap.cli import app

    pairs = tmp_path / "p.csv"
    pairs.write_text("video_id,video_path,caption,start,end\n")
    r = CliRunner().invoke(app, ["train", str(pairs), "--out", str(tmp_path / "o"),
                                 "--momentum", "1.5"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == ["error: --momentum: Input should be less than 1"]


# -- real tiny runs ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> list:
    out = tmp_path_factory.mktemp("recipe-videos")
    return [make_narrated_video(out, f"r{v}", [DEFAULT_STEPS[(v * 3 + k) % 12]
                                               for k in range(3)],
                                seconds_per_step=2.0, fps=4, size=48, audio=False,
                                subtitles=None) for v in range(3)]


def pairs_csv(path: Path, videos: list) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["video_id", "video_path", "caption", "start", "end"])
        for sv in videos:
            for s in sv.steps:
                w.writerow([sv.video_id, sv.video_path, s.caption, s.start, s.end])
    return path


SMALL = dict(epochs=2, batch_size=3, lr=3e-3, frames_per_clip=2, eval_frames=2, warmup=0.0,
             eval_fraction=0, frames="pixels", progress=False)


@pytest.mark.slow
def test_crops_only_change_the_frames_of_a_draw(videos, tmp_path):
    ps = build_clips(read_pairs(pairs_csv(tmp_path / "p.csv", videos)), log=None)
    plain = epoch_draws(ps.clips, 1, 0, 2)
    cropped = epoch_draws(ps.clips, 1, 0, 2, crop_scale=(0.5, 1.0))
    assert [(d.clip, d.caption, d.times) for d in plain] == \
        [(d.clip, d.caption, d.times) for d in cropped]
    assert all(d.crop is None for d in plain) and all(d.crop is not None for d in cropped)
    assert cropped == epoch_draws(ps.clips, 1, 0, 2, crop_scale=(0.5, 1.0))  # reproducible


@pytest.mark.slow
def test_momentum_queue_soft_labels_train_and_resume_exactly(videos, tmp_path):
    pairs = pairs_csv(tmp_path / "p.csv", videos)
    kw = {**SMALL, "recipe": "howtocaption", "queue_size": 5, "momentum": 0.9}
    full = train(pairs, out_dir=tmp_path / "full", encoder=TinyEncoder(), **kw)
    st = torch.load(full.checkpoint, weights_only=True)
    cfg = json.loads((tmp_path / "full" / "train_config.json").read_text())
    assert cfg["recipe"] == "howtocaption" and cfg["soft_labels"] == 0.6
    assert cfg["batch_size"] == 3 and cfg["queue_size"] == 5 and cfg["optimizer"] == "adamw"
    assert cfg["crop_scale"] == [0.5, 1.0] and cfg["alpha"] == 0.0
    # 9 clips, batches of 3: 6 steps of 3 queued -> the queue holds the last 5, all real clips
    q = FeatureQueue(5, TinyEncoder().dim)
    q.load_state_dict(st["queue"])
    _, v, ids = q.contents()
    assert int(q.count) == 5 and (ids >= 0).all()
    assert torch.allclose(v.norm(dim=1), torch.ones(5), atol=1e-5)
    # the momentum model trails the online one: different, but closer to it than the start
    init = {k: x.clone() for k, x in st["model"].items()}
    from howtocap.encoders.dual import DualModel

    start = DualModel(TinyEncoder()).state_dict()
    w = "encoder.text_proj.weight"
    online, mom, w0 = st["model"][w], st["momentum_model"][w], start[w]
    assert not torch.allclose(online, mom) and not torch.allclose(mom, w0)
    assert (mom - online).norm() < (w0 - online).norm()

    with pytest.raises(EpochKilled):
        train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(),
              on_epoch_end=kill_at_epoch_end, **kw)
    res = train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(), resume=True, **kw)
    assert res.resumed_from == 1 and res.epochs_run == 1
    st2 = torch.load(res.checkpoint, weights_only=True)
    for part in ("model", "momentum_model", "queue"):
        for k in st[part]:
            assert torch.allclose(st[part][k].float(), st2[part][k].float(), atol=1e-6,
                                  rtol=0), (part, k)
    assert any(not torch.allclose(init[k], start[k]) for k in start)
    # resuming without the queue the checkpoint was trained with is one clear line
    with pytest.raises(HowtocapError, match="queue"):
        train(pairs, out_dir=tmp_path / "cut", encoder=TinyEncoder(), resume=True,
              **{**kw, "queue_size": 7, "epochs": 3})


@pytest.mark.slow
def test_alpha_is_off_by_default_and_on_in_second_round(videos, tmp_path):
    pairs = pairs_csv(tmp_path / "p.csv", videos)
    plain = train(pairs, out_dir=tmp_path / "plain", encoder=TinyEncoder(),
                  **{**SMALL, "epochs": 1})
    assert "reg" not in plain.history[-1]  # no frozen copy, no L_align
    two = train(pairs, out_dir=tmp_path / "two", encoder=TinyEncoder(), recipe="second-round",
                queue_size=0, momentum=0.0, soft_labels=0.0,
                **{**SMALL, "epochs": 1, "eval_fraction": 0.34, "eval_frames": 3})
    cfg = json.loads((tmp_path / "two" / "train_config.json").read_text())
    row = two.history[-1]
    assert cfg["alpha"] == 0.1 and row["reg"] > 1e-4  # moved away from its frozen copy
    # L_align is in the optimised loss with weight alpha (the logged terms are step means)
    assert row["loss"] == pytest.approx(row["loss_main"] + 0.1 * row["reg"], rel=1e-6)
    assert plain.history[-1]["loss"] == plain.history[-1]["loss_main"]
    assert "R@1" in two.history[-1] and two.n_eval_clips == 3  # held-out video, 3 eval frames
    with pytest.raises(HowtocapError, match="--queue-size needs --momentum"):
        train(pairs, out_dir=tmp_path / "bad", encoder=TinyEncoder(), queue_size=8,
              **{**SMALL, "epochs": 1})


@pytest.mark.slow
def test_cli_recipe_with_override_and_mee_crop_warning(videos, tmp_path):
    import typer
    from typer.testing import CliRunner

    from howtocap.cli import add_commands
    from howtocap.train.tiny import make_tiny_clip

    spec = make_tiny_clip(tmp_path / "clip", width=16, dim=8, image_size=32, patch_size=16)
    app = typer.Typer()
    add_commands(app, "train")

    @app.command()
    def other() -> None:  # keeps "train" a sub-command
        pass

    pairs = pairs_csv(tmp_path / "p.csv", videos[:2])
    runner = CliRunner()
    r = runner.invoke(app, ["train", str(pairs), "--out", str(tmp_path / "v"), "--encoder", spec,
                            "--recipe", "ventura", "--epochs", "1", "--batch-size", "3",
                            "--frames-per-clip", "2", "--eval-fraction", "0", "--frames",
                            "pixels"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "v" / "train_config.json").read_text())
    assert (cfg["optimizer"], cfg["lr"], cfg["epochs"], cfg["batch_size"]) == ("adam", 1e-4, 1, 3)
    assert cfg["frames_per_clip"] == 2 and cfg["eval_frames"] == 10 and cfg["alpha"] == 0
    r = runner.invoke(app, ["train", str(pairs), "--out", str(tmp_path / "m"), "--encoder", spec,
                            "--model", "mee", "--epochs", "1", "--batch-size", "3",
                            "--eval-fraction", "0", "--crop-scale", "0.5", "1.0"])
    assert r.exit_code == 0, r.output
    assert "--crop-scale ignored: mee trains on cached frame embeddings" in r.output
    r = runner.invoke(app, ["train", str(pairs), "--out", str(tmp_path / "x"), "--encoder", spec,
                            "--crop-scale", "0.9", "0.2"])
    assert r.exit_code == 2 and "--crop-scale: needs two area fractions" in r.output
    assert "Traceback" not in r.output


# -- MEE: one pooling in training, evaluation and alignment ------------------------------------
@pytest.mark.slow
def test_mee_pooling_is_the_same_in_training_evaluation_and_alignment(videos, tmp_path):
    from howtocap.align.config import AlignConfig
    from howtocap.align.filter import window_scores
    from howtocap.encoders.cache import frame_embeddings
    from howtocap.encoders.mee import JointEmbedding, MEEEncoder, max_pool_clip
    from howtocap.evaluate.benchmarks import EvalSample
    from howtocap.evaluate.embed import video_embeddings

    base = TinyEncoder()
    with torch.random.fork_rng():
        torch.manual_seed(3)
        joint = JointEmbedding(base.dim, base.dim, 12)
    mee = MEEEncoder(base, joint).eval()
    sv = videos[0]
    start, end = 0.0, 4.0  # two steps (two photographs): frames really differ
    # training: per-second base embeddings from the frame cache, max-pooled, then the unit
    fe = frame_embeddings(sv.video_path, base, fps=1.0, cache_dir=tmp_path / "cache")
    with torch.no_grad():
        pooled = max_pool_clip(np.asarray(fe.emb), 1.0, start, end)
        v_train = joint(torch.from_numpy(pooled)[None], torch.zeros(1, base.dim))[0][0].numpy()
    # evaluation: frames at the clip's 4 second-centres, through the encoder
    ev = video_embeddings([EvalSample(sv.video_id, sv.video_path, "x", start, end)], mee,
                          n_frames=4, progress=False)
    assert ev.ok.all()
    assert float(v_train @ ev.emb[0]) > 0.995
    # alignment: the window [0, 4) scored with the MEE pooling, no shift
    text = np.eye(12, dtype=np.float32)  # unit "texts": the scores are the window embedding
    cfg = AlignConfig(offset_seconds=0, clip_seconds=end - start)
    scores, _ = window_scores(np.asarray(fe.emb), text, np.full(12, start), fe.duration, cfg,
                              mee.pool_clips)
    assert np.allclose(scores[:, 0], v_train, atol=1e-5)
    # what the issue found: averaging per-frame unit outputs is another embedding
    per_frame = mee.encode_images(np.stack([f for f in _frames(sv.video_path, [0.5, 1.5, 2.5,
                                                                                3.5])]))
    mean = per_frame.mean(0) / np.linalg.norm(per_frame.mean(0))
    err_eval, err_mean = np.abs(ev.emb[0] - v_train).max(), np.abs(mean - v_train).max()
    assert err_mean > 0.02 and err_mean > 5 * err_eval
    # and the frame cache of an MEE encoder is its base's (pooled before the unit)
    assert mee.frame_encoder is base and base.frame_encoder is base


def _frames(path: Path, times: list[float]) -> np.ndarray:
    from howtocap.io.video import sample_frames

    return sample_frames(path, times, size=32)


@pytest.mark.slow
def test_mee_alignment_stage_uses_max_pooling(videos, tmp_path):
    from howtocap.align.config import AlignConfig
    from howtocap.align.stage import AlignStage
    from howtocap.encoders.mee import JointEmbedding, MEEEncoder, max_pool_clip
    from howtocap.engine.stage import VideoInput
    from howtocap.io.inputs import VideoItem

    base = TinyEncoder()
    with torch.random.fork_rng():
        torch.manual_seed(4)
        mee = MEEEncoder(base, JointEmbedding(base.dim, base.dim, 12)).eval()
    sv = videos[1]
    caps = pd.DataFrame({"video_id": sv.video_id, "start": [0.0], "end": [4.0],
                         "text": ["brush the cat"], "source": "llm", "block": 0, "model": "m"})
    cfg = AlignConfig(offset_seconds=0, clip_seconds=4.0)
    stage = AlignStage([mee.name], cfg, tmp_path / "cache", models=[mee])
    item = VideoItem(sv.video_id, sv.video_path)
    out = stage.process(VideoInput(item, {"captions": caps}))
    score = float(out.tables["align_scores"]["score"].iloc[0])
    from howtocap.encoders.cache import frame_embeddings

    fe = frame_embeddings(sv.video_path, base, fps=1.0, cache_dir=tmp_path / "cache")
    v = mee.embed_pooled(max_pool_clip(np.asarray(fe.emb), 1.0, 0.0, 4.0))
    t = mee.encode_texts(["brush the cat"])[0]
    assert score == pytest.approx(float(t @ v), abs=1e-5)
