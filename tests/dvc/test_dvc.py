"""`howtocap dvc-eval`: tIoU matching, the COCO caption metrics (real pycocoevalcap, real Java
when present), the no-Java path, one-line errors and the CLI end to end."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from howtocap.dvc import caption_pairs, detection, evaluate, tiou
from howtocap.dvc.data import load_ground_truth, load_predictions
from howtocap.dvc.scoring import ascii_only, java_path, ptb_tokenize, python_tokenize
from howtocap.errors import HowtocapError, InputError

needs_java = pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime")

# Ground truth: v has three steps, w has one and gets no predictions.
GT_SEGS = {"v": [(0, 10, "crack the eggs into a bowl"), (10, 20, "whisk the eggs with milk"),
                 (30, 40, "pour the mixture into the hot pan")],
           "w": [(0, 5, "slice the bread")]}
# Hand-made prediction; tIoUs with (g0, g1, g2): p0 (.8, 0, 0), p1 (0, 8/12, 0),
# p2 (1/3, 1/3, 0), p3 (0, 0, 0), p4 (0, 0, .8).
PRED_SEGS = {"v": [(0, 8, "crack the eggs into a bowl"), (12, 22, "whisk the eggs with milk"),
                   (5, 15, "add some salt"), (50, 60, "serve the omelette"),
                   (31, 39, "pour the mixture into the hot pan")]}


def youcook2(segs: dict, subset: str = "validation") -> dict:
    return {"database": {v: {"annotations": [{"id": i, "segment": [s, e], "sentence": t}
                                             for i, (s, e, t) in enumerate(ss)],
                             "duration": 60.0, "recipe_type": "113", "subset": subset}
                         for v, ss in segs.items()}}


def activitynet(segs: dict) -> dict:
    return {v: {"duration": 60.0, "timestamps": [[s, e] for s, e, _ in ss],
                "sentences": [t for *_, t in ss]} for v, ss in segs.items()}


def results(segs: dict) -> dict:
    return {"version": "VERSION 1.0", "results": {
        v: [{"timestamp": [s, e], "sentence": t} for s, e, t in ss] for v, ss in segs.items()}}


def test_tiou_by_hand():
    assert tiou([0, 8], [0, 10]) == pytest.approx(0.8)
    assert tiou([12, 22], [10, 20]) == pytest.approx(8 / 12)
    assert tiou([5, 15], [10, 20]) == pytest.approx(1 / 3)
    assert tiou([50, 60], [30, 40]) == 0.0


def test_caption_pairs_and_detection_against_a_hand_made_prediction():
    p, g = PRED_SEGS["v"], GT_SEGS["v"]
    assert caption_pairs(p, g, 0.3) == [(0, 0), (1, 1), (2, 0), (2, 1), (3, None), (4, 2)]
    assert caption_pairs(p, g, 0.7) == [(0, 0), (1, None), (2, None), (3, None), (4, 2)]
    assert caption_pairs(p, g, 0.9) == [(i, None) for i in range(5)]
    # (recall, precision): covered references / 3, covered predictions / 5
    assert detection(p, g, 0.3) == pytest.approx((3 / 3, 4 / 5))
    assert detection(p, g, 0.5) == pytest.approx((3 / 3, 3 / 5))
    assert detection(p, g, 0.7) == pytest.approx((2 / 3, 2 / 5))
    assert detection(p, g, 0.9) == pytest.approx((0.0, 0.0))
    assert detection([], g, 0.3) == (0.0, 0.0)


def test_recall_precision_averaged_over_videos_and_thresholds():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = evaluate(results(PRED_SEGS), youcook2(GT_SEGS), meteor=False)
        r2 = evaluate(results(PRED_SEGS), activitynet(GT_SEGS), meteor=False)
        bare = evaluate(results(PRED_SEGS)["results"], youcook2(GT_SEGS), meteor=False)
    # w has no predictions: recall 0, precision 0, so each threshold's mean is half of v's.
    assert r["per_tiou"]["0.3"]["Recall"] == pytest.approx(0.5)
    assert r["per_tiou"]["0.3"]["Precision"] == pytest.approx(0.4)
    assert r["per_tiou"]["0.7"]["Recall"] == pytest.approx(1 / 3)
    assert r["scores"]["Recall"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4 / 2)
    assert r["scores"]["Precision"] == pytest.approx((0.8 + 0.6 + 0.4 + 0) / 4 / 2)
    p, rec = r["scores"]["Precision"], r["scores"]["Recall"]
    assert r["scores"]["F1"] == pytest.approx(2 * p * rec / (p + rec))
    assert r["per_video"]["w"]["Bleu_4"] == 0.0 and r["per_video"]["w"]["Recall"] == 0.0
    assert r["scores"]["METEOR"] is None and r["meteor"] is None
    assert r["counts"] == {"gt_videos": 2, "gt_segments": 4, "pred_videos": 1,
                           "gt_videos_with_predictions": 1, "predictions": 5,
                           "gt_form": "youcook2", "split": None, "max_proposals": 1000}
    assert any("1 of 2 ground-truth videos have no predictions" in str(w.message)
               for w in caught)
    # the same ground truth in ActivityNet Captions form gives the same numbers
    assert r2["scores"] == r["scores"] and r2["counts"]["gt_form"] == "activitynet"
    assert bare["scores"] == r["scores"]  # a bare {vid: [...]} prediction reads the same
    # max_proposals keeps the first N predictions: p0 and p1 only
    r3 = evaluate(results(PRED_SEGS), youcook2({"v": GT_SEGS["v"]}), tious=(0.5,),
                  meteor=False, max_proposals=2)
    assert r3["scores"]["Recall"] == pytest.approx(2 / 3)
    assert r3["scores"]["Precision"] == pytest.approx(1.0)


def test_split_keeps_one_subset():
    gt = youcook2({"v": GT_SEGS["v"]})
    gt["database"].update(youcook2({"w": GT_SEGS["w"]}, subset="training")["database"])
    r = evaluate(results(PRED_SEGS), gt, tious=(0.5,), split="validation", meteor=False)
    assert r["counts"]["gt_videos"] == 1 and r["scores"]["Recall"] == pytest.approx(1.0)
    with pytest.raises(HowtocapError, match="no ground-truth video has that subset.*training"):
        evaluate(results(PRED_SEGS), gt, split="testing", meteor=False)
    with pytest.raises(HowtocapError, match="no 'subset'"):
        evaluate(results(PRED_SEGS), activitynet(GT_SEGS), split="validation", meteor=False)


@needs_java
@pytest.mark.slow  # METEOR's JVM loads its paraphrase table (~10 s idle, more under load)
def test_metrics_identical_vs_disjoint_captions_with_java():
    """Real PTB tokenizer and METEOR 1.5 (JVM): identical captions score the maximum, captions
    sharing no word score 0, on the same matched segments."""
    gt = {"same": [(0, 10, "Crack the eggs into a bowl."), (10, 20, "Whisk them with milk.")],
          "diff": [(0, 10, "Crack the eggs into a bowl."), (10, 20, "Whisk them with milk.")]}
    pred = {"same": gt["same"],
            "diff": [(0, 10, "Preheat an oven."), (10, 20, "Slice some bread.")]}
    r = evaluate(results(pred), youcook2(gt), tious=(0.5,))
    same, diff = r["per_video"]["same"], r["per_video"]["diff"]
    assert r["tokenizer"].startswith("ptb") and r["meteor"].startswith("METEOR 1.5")
    for m in ("Bleu_1", "Bleu_4", "METEOR", "ROUGE_L"):
        assert same[m] == pytest.approx(1.0, abs=1e-6), m
        assert diff[m] == pytest.approx(0.0, abs=1e-6), m
    assert same["CIDEr"] > 1.0 and diff["CIDEr"] == pytest.approx(0.0, abs=1e-9)
    assert r["scores"]["METEOR"] == pytest.approx(0.5, abs=1e-6)
    assert r["warnings"] == []


@needs_java
def test_python_tokenizer_matches_ptb_on_caption_like_text():
    sents = ["Add the chopped onion to the pan.", "Stir until it's thick, then don't stop!",
             "Mix 1/2 cup of flour (all-purpose) with 3.5 g salt...",
             "Cut the bread; spread \"butter\" on it: done?", "You can't miss it -- bake 20-25 min",
             "Heat to 180°C & serve"]
    sents = [ascii_only(s) for s in sents]
    assert [python_tokenize(s) for s in sents] == ptb_tokenize(sents, java_path())


def test_without_java_meteor_is_null_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no java on it
    assert java_path() is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = evaluate(results({"v": GT_SEGS["v"]}), youcook2({"v": GT_SEGS["v"]}), tious=(0.5,))
    notes = [str(w.message) for w in caught]
    assert len(notes) == 1 and "java not found: METEOR not computed" in notes[0]
    assert r["warnings"] == notes
    assert r["scores"]["METEOR"] is None and r["tokenizer"].startswith("python")
    assert r["scores"]["Bleu_4"] == pytest.approx(1.0, abs=1e-6)
    assert r["scores"]["ROUGE_L"] == pytest.approx(1.0)


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"),
    ("{not json", "not valid JSON"),
    ('{"results": {"v": {"timestamp": [0, 1]}}}', "results\\['v'\\]: Input should be a valid list"),
    ('{"results": {"v": [{"timestamp": [5, 1], "sentence": "x"}]}}', "end 1 is before start 5"),
    ('{"results": {"v": [{"timestamp": [0], "sentence": "x"}]}}',
     "\\['timestamp'\\]\\[1\\]: Field required \\(got \\[0\\]\\)"),
    ('{"results": {"v": [{"timestamp": [0, 1]}]}}', "\\['sentence'\\]: Field required"),
    ('{"version": "1.0", "external_data": {}}', "no 'results' key"),
])
def test_broken_prediction_files_are_one_line(tmp_path, content, problem):
    path = tmp_path / "pred.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=problem) as exc:
        load_predictions(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("content", "problem"), [
    ('{"database": {"v": {"duration": 3}}}',
     "database\\['v'\\]\\['annotations'\\]: Field required"),
    ('{"database": {"v": {"annotations": [{"segment": [0, 1]}]}}}',
     "\\['sentence'\\]: Field required"),
    ('{"v": {"timestamps": [[0, 1]], "sentences": []}}', "1 timestamps but 0 sentences"),
    ('{"v": [1, 2]}', "neither"),
    ('[1, 2]', "expected a JSON object"),
])
def test_broken_ground_truth_files_are_one_line(tmp_path, content, problem):
    path = tmp_path / "gt.json"
    path.write_text(content)
    with pytest.raises(InputError, match=problem) as exc:
        load_ground_truth(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_cli_end_to_end(tmp_path, monkeypatch):
    import typer

    from howtocap.cli import add_commands

    app = typer.Typer()
    app.callback()(lambda: None)
    add_commands(app, "dvc-eval")
    monkeypatch.setenv("PATH", str(tmp_path))  # fast and deterministic: no JVM
    gt = youcook2(GT_SEGS)
    gt["database"]["t"] = youcook2({"t": [(0, 3, "x")]}, "training")["database"]["t"]
    pred = write_json(tmp_path / "captions.json", results(PRED_SEGS))
    gt_path = write_json(tmp_path / "yc2.json", gt)
    out = tmp_path / "out" / "dvc.json"
    runner = CliRunner()
    res = runner.invoke(app, ["dvc-eval", "--pred", str(pred), "--gt", str(gt_path), "--out",
                              str(out), "--split", "validation"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["counts"]["gt_videos"] == 2 and data["counts"]["split"] == "validation"
    assert data["scores"]["Recall"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4 / 2)
    assert data["scores"]["METEOR"] is None and data["inputs"]["gt"] == str(gt_path)
    assert "java not found" in res.output and str(out) in res.output
    assert "CIDEr" in res.output and "Recall" in res.output

    # user mistakes: exit 2, one line naming the file or option, no traceback
    for args, msg in [(["--pred", str(tmp_path / "missing.json"), "--gt", str(gt_path)],
                       "missing.json: no such file"),
                      (["--pred", str(pred), "--gt", str(write_json(tmp_path / "b.json",
                                                                     {"database": 3}))],
                       "b.json: database: Input should be a valid dictionary"),
                      (["--pred", str(pred), "--gt", str(gt_path), "--split", "val"],
                       "--split val: no ground-truth video"),
                      (["--pred", str(pred), "--gt", str(gt_path), "--tiou", "1.5"],
                       "tIoU thresholds must be in (0, 1]")]:
        res = runner.invoke(app, ["dvc-eval", *args, "--out", str(tmp_path / "x.json")])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and msg in lines[0] and "Traceback" not in res.output, lines


def test_registered_in_the_main_cli():
    from howtocap.cli import app

    assert "dvc-eval" in {c.name for c in app.registered_commands}
