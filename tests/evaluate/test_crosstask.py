"""CrossTask step localisation: the release reader, the ordered DP, recall, the CLI end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from howtocap.cli import add_commands
from howtocap.errors import HowtocapError, InputError
from howtocap.evaluate.crosstask import (
    dp_inference,
    evaluate_crosstask,
    gt_matrix,
    independent_inference,
    read_annotation,
    read_release,
    step_recall,
)
from howtocap.evaluate.crosstask_samples import write_crosstask_release
from howtocap.metrics import crosstask_recall


# -- the dynamic program -------------------------------------------------------------------
def _brute_force(scores: np.ndarray) -> float:
    """Best sum over every strictly increasing choice of one second per step."""
    t_len, k_len = scores.shape
    return max(scores[list(c), np.arange(k_len)].sum()
               for c in itertools.combinations(range(t_len), k_len))


def test_dp_matches_brute_force_on_random_cases() -> None:
    rng = np.random.default_rng(0)
    for trial in range(400):
        t_len = int(rng.integers(1, 10))
        k_len = int(rng.integers(1, min(t_len, 5) + 1))
        scores = rng.normal(size=(t_len, k_len))
        if trial % 4 == 0:
            scores = np.round(scores)  # many ties
        sec = dp_inference(scores)
        assert sec.shape == (k_len,)
        assert np.all(np.diff(sec) > 0) and sec[0] >= 0 and sec[-1] < t_len
        assert scores[sec, np.arange(k_len)].sum() == pytest.approx(_brute_force(scores))


def test_dp_needs_a_second_per_step() -> None:
    assert dp_inference(np.ones((3, 3))).tolist() == [0, 1, 2]
    with pytest.raises(HowtocapError, match="2 seconds cannot hold 3 steps"):
        dp_inference(np.ones((2, 3)))


def test_dp_and_independent_on_hand_made_cases() -> None:
    # Video 1 shows step 2 (seconds 0-1) before step 1 (seconds 3-4): the scores peak exactly
    # there, so the independent argmax "finds" both steps although they are out of order; the
    # ordered DP can only place one of them inside its interval.
    gt1 = np.zeros((6, 2), bool)
    gt1[0:2, 1] = True
    gt1[3:5, 0] = True
    s1 = np.full((6, 2), 0.1)
    s1[3, 0], s1[0, 1] = 0.9, 0.8
    # Video 2 is in canonical order, but step 1 also scores high on a late, wrong second: the
    # independent argmax takes it; the DP, needing step 2 afterwards, places step 1 right.
    gt2 = np.zeros((8, 2), bool)
    gt2[1:3, 0] = True
    gt2[4:6, 1] = True
    s2 = np.full((8, 2), 0.1)
    s2[1, 0], s2[7, 0], s2[5, 1] = 0.6, 0.7, 0.9

    assert independent_inference(s1).tolist() == [3, 0]
    assert dp_inference(s1).tolist() == [3, 4]  # 0.9 + 0.1 beats 0.1 + 0.8 or 0.8 + ...
    assert independent_inference(s2).tolist() == [7, 5]
    assert dp_inference(s2).tolist() == [1, 5]

    tasks = ["a", "b"]
    ind = step_recall([independent_inference(s) for s in (s1, s2)], [gt1, gt2], tasks)
    dp = step_recall([dp_inference(s) for s in (s1, s2)], [gt1, gt2], tasks)
    assert ind["per_task"]["a"]["recall"] == 100.0 and dp["per_task"]["a"]["recall"] == 50.0
    assert ind["per_task"]["b"]["recall"] == 50.0 and dp["per_task"]["b"]["recall"] == 100.0
    # the independent path is the existing metric, step for step
    old = crosstask_recall([s1, s2], [gt1, gt2], tasks)
    assert old["per_task"] == {t: r["recall"] for t, r in ind["per_task"].items()}


def test_recall_averages_over_tasks_not_videos() -> None:
    """Task a: 1 of 1 step in one video; task b: 1 of 4 steps over three videos -> 62.5."""
    g = np.eye(4, dtype=bool)
    hit = np.arange(4)
    miss = np.array([1, 2, 3, 0])
    one = np.zeros((4, 4), bool)
    one[0, 0] = True
    r = step_recall([hit, miss, miss, hit], [one, g, g, one], ["a", "b", "b", "b"])
    assert r["per_task"]["a"] == {"recall": 100.0, "hits": 1, "steps": 1}
    assert r["per_task"]["b"] == {"recall": 100.0 * 1 / 9, "hits": 1, "steps": 9}
    assert r["recall"] == pytest.approx((100.0 + 100.0 / 9) / 2)


# -- the release reader --------------------------------------------------------------------
def _write_release(root: Path) -> Path:
    """A small release in the real layout, with its quirks: ids starting with ``_``/``-``, a
    repeated step, a related task's video, and the file ending with a blank line."""
    (root / "annotations").mkdir(parents=True)
    (root / "tasks_primary.txt").write_text(
        "23521\nMake Jello Shots\nhttps://www.wikihow.com/Make-Jello-Shots\n3\n"
        "pour water,add jello,stir mixture\n\n"
        "16815\nJack Up a Car\nhttps://www.wikihow.com/Jack-Up-a-Car\n2\n"
        "brake on,raise jack\n\n")
    (root / "videos_val.csv").write_text(
        "23521,_uAZw6L_R5g,https://www.youtube.com/watch?v=_uAZw6L_R5g\n"
        "23521,-Xk3nVq9aB0,https://www.youtube.com/watch?v=-Xk3nVq9aB0\n"
        "16815,carvid00001,https://www.youtube.com/watch?v=carvid00001\n"
        "16815,noannot0001,https://www.youtube.com/watch?v=noannot0001\n"
        "16815,broken00001,https://www.youtube.com/watch?v=broken00001\n"
        "40567,relatedtask,https://www.youtube.com/watch?v=relatedtask\n")
    (root / "videos.csv").write_text("23521,trainvid001,https://www.youtube.com/watch?v=x\n")
    ann = root / "annotations"
    (ann / "23521__uAZw6L_R5g.csv").write_text("1,1.50,3.20\n2,5.00,6.00\n1,8.00,8.90\n")
    (ann / "23521_-Xk3nVq9aB0.csv").write_text("3,2.00,4.00\n")
    (ann / "16815_carvid00001.csv").write_text("1,0.00,2.00\n2,3.00,5.00\n")
    (ann / "16815_broken00001.csv").write_text("1,0.00,2.00\nstep two,3.00,5.00\n")
    return root


def test_reader_on_the_real_format(tmp_path: Path) -> None:
    rel = read_release(_write_release(tmp_path / "rel"), "val")
    assert list(rel.tasks) == ["23521", "16815"]
    assert rel.tasks["23521"].steps == ["pour water", "add jello", "stir mixture"]
    assert rel.tasks["16815"].title == "Jack Up a Car"
    assert [v.video_id for v in rel.videos] == ["_uAZw6L_R5g", "-Xk3nVq9aB0", "carvid00001",
                                                "noannot0001", "broken00001"]
    assert rel.other_task_videos == 1
    assert [v.video_id for v in read_release(tmp_path / "rel", "all").videos][0] == "trainvid001"

    path = rel.annotation_path(rel.videos[0])
    assert path.name == "23521__uAZw6L_R5g.csv"
    seg = read_annotation(path, 3)
    assert seg.tolist() == [[0, 1.5, 3.2], [1, 5.0, 6.0], [0, 8.0, 8.9]]
    y = gt_matrix(seg, 8, 3)  # the video has 8 seconds: the repeat at 8-9 s is cut off
    assert np.flatnonzero(y[:, 0]).tolist() == [1, 2, 3]  # floor(1.5)..ceil(3.2)
    assert np.flatnonzero(y[:, 1]).tolist() == [5]
    assert not y[:, 2].any()


def test_broken_release_files_are_one_line(tmp_path: Path) -> None:
    root = _write_release(tmp_path / "rel")
    with pytest.raises(InputError) as exc:
        read_annotation(root / "annotations" / "16815_broken00001.csv", 2)
    msg = str(exc.value)
    assert "\n" not in msg and "16815_broken00001.csv: line 2" in msg and "numbers" in msg
    with pytest.raises(InputError, match=r"line 1: step 3 outside 1..2"):
        read_annotation(root / "annotations" / "23521_-Xk3nVq9aB0.csv", 2)
    (root / "tasks_primary.txt").write_text("23521\nMake Jello Shots\nurl\n4\na,b,c\n\n")
    with pytest.raises(InputError, match="declares 4 steps but lists 3"):
        read_release(root)
    (root / "tasks_primary.txt").unlink()
    with pytest.raises(InputError, match="tasks_primary.txt: annotation file does not exist"):
        read_release(root)


# -- evaluation end to end -----------------------------------------------------------------
def _crafted_features(root: Path, feat: Path, encoder_name: str) -> None:
    """Per-second features that score > 0 against exactly the annotated step (the direction
    the step texts' pseudo-inverse gives) and 0 against every step elsewhere (zero rows)."""
    from howtocap.encoders import create

    enc = create(encoder_name, device="cpu")
    rel = read_release(root)
    feat.mkdir()
    for v in rel.videos:
        if v.video_id == "noannot0001":
            continue  # no features either: only the missing annotation is reported for it
        if v.video_id == "carvid00001":
            continue  # annotation but no features
        steps = rel.tasks[v.task_id].steps
        only = np.linalg.pinv(enc.encode_texts(steps).astype(np.float64))  # (dim, steps)
        x = np.zeros((10, enc.dim), np.float32)
        ann = rel.annotation_path(v)
        try:
            seg = read_annotation(ann, len(steps))
        except InputError:
            seg = np.zeros((0, 3))
        for k, s, e in seg:
            x[int(s):int(np.ceil(e))] = only[:, int(k)]
        np.save(feat / f"{v.video_id}.npy", x)


@pytest.mark.slow
def test_cli_with_features_reports_and_skips_broken_videos(tmp_path: Path,
                                                           tiny_clip: str) -> None:
    root = _write_release(tmp_path / "rel")
    _crafted_features(root, tmp_path / "feat", tiny_clip)
    app = typer.Typer()
    add_commands(app, "eval")
    out = tmp_path / "eval.json"
    res = CliRunner().invoke(app, ["--benchmark", "crosstask", "--annotations", str(root),
                                   "--features", str(tmp_path / "feat"), "--encoder",
                                   tiny_clip, "--out", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    # only task 23521 has evaluable videos: _uAZw6L_R5g (steps 1, 2 annotated) and
    # -Xk3nVq9aB0 (step 3). Perfect features: both inferences find all 3 annotated steps.
    assert r["n_videos"] == 2 and list(r["per_task"]) == ["23521"]
    assert r["per_task"]["23521"]["steps"] == 3
    assert r["recall_by_inference"]["independent"] == 100.0
    assert r["recall_by_inference"]["dp"] == 100.0
    errors = {e["video_id"]: e["error"] for e in r["skipped"]["errors"]}
    assert set(errors) == {"carvid00001", "noannot0001", "broken00001"}
    assert errors["noannot0001"].endswith("16815_noannot0001.csv: no annotation file")
    assert "16815_broken00001.csv: line 2" in errors["broken00001"]
    assert errors["carvid00001"].endswith("carvid00001.npy: no features for this video")
    assert r["skipped"]["other_task_videos"] == 1

    # a user mistake is one line and exit code 2
    bad = CliRunner().invoke(app, ["--benchmark", "crosstask", "--annotations",
                                   str(tmp_path / "nowhere"), "--features",
                                   str(tmp_path / "feat"), "--encoder", tiny_clip])
    assert bad.exit_code == 2
    assert "nowhere: CrossTask release folder does not exist" in bad.output
    assert "Traceback" not in bad.output
    # flags of the other benchmarks are refused, not silently ignored (and the reverse)
    mixed = CliRunner().invoke(app, ["--benchmark", "crosstask", "--annotations", str(root),
                                     "--features", str(tmp_path / "feat"), "--frames", "4"])
    assert mixed.exit_code == 2 and "takes no --frames" in mixed.output
    mixed = CliRunner().invoke(app, ["--benchmark", "msrvtt", "--annotations", str(root),
                                     "--split", "all"])
    assert mixed.exit_code == 2 and "takes no --split" in mixed.output


@pytest.mark.slow
def test_cli_end_to_end_on_generated_videos(tmp_path: Path, tiny_clip: str) -> None:
    fx = write_crosstask_release(tmp_path, videos_per_task=1, n_tasks=2,
                                 seconds_per_segment=2.0, size=64, fps=2, p_swap=0.0,
                                 p_drop=0.0, seed=1)
    assert len(fx.videos) == 2 and fx.videos[0].video_id.startswith("_")
    app = typer.Typer()
    add_commands(app, "eval")
    out = tmp_path / "eval.json"
    cache = tmp_path / "cache"
    args = ["-b", "crosstask", "--annotations", str(fx.release), "--videos",
            str(fx.videos_dir), "--encoder", tiny_clip, "--cache-dir", str(cache),
            "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["n_videos"] == 2 and r["skipped"]["videos"] == 0
    assert any((cache / "frames").rglob("*.npz"))  # frames went through the shared cache

    # recompute from scratch: frame embeddings, scores, brute-force ordered placement and the
    # known step times of the generated videos (not the annotation files)
    from howtocap.encoders import create
    from howtocap.encoders.cache import frame_embeddings
    from howtocap.evaluate.crosstask_samples import TASKS

    enc = create(tiny_clip, device="cpu")
    want: dict[str, float] = {}
    for v in fx.videos:
        steps = next(s for t, _, s in TASKS if t == v.task_id)
        x = np.asarray(frame_embeddings(v.video_path, enc, cache_dir=tmp_path / "c2").emb,
                       np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        scores = x @ enc.encode_texts([text for _, text in steps]).T
        best = _brute_force(scores)
        choice = next(c for c in itertools.combinations(range(len(x)), len(steps))
                      if np.isclose(scores[list(c), np.arange(len(steps))].sum(), best))
        hits = sum(int(s) <= choice[k] < int(np.ceil(e)) for k, s, e in v.segments)
        want[v.task_id] = 100.0 * hits / len(v.segments)
    got = {t: p["recall"] for t, p in r["per_task"].items()}
    assert got == pytest.approx(want)
    assert r["recall"] == pytest.approx(np.mean(list(want.values())))

    # a second run reads the frame cache and gives the same numbers
    again = evaluate_crosstask(fx.release, fx.videos_dir, tiny_clip, cache_dir=cache,
                               progress=False, show=False)
    assert again["per_task"] == r["per_task"]
