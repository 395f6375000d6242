"""TDR pieces against hand-computed cases: losses, pair labels, metrics, readers, sampling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from howtocap.errors import InputError
from howtocap.tdr.data import goal_sentences, iou, key_objects_of, read_annotations, read_scripts
from howtocap.tdr.losses import aux_loss, fcl_labels, kofcl_labels, pair_mask, tdr_loss
from howtocap.tdr.metrics import gold_ranks, isolated_steps, ndcg_at, recall_at, rouge_l
from howtocap.tdr.model import TdrModel
from howtocap.tdr.stage import frame_times, words_around


def test_tdr_loss_is_softmax_cross_entropy_over_the_video_captions() -> None:
    scores = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0], [5.0, 5.0, 5.0]])
    gold = torch.tensor([0, 1, -1])  # the third frame lies in no step: left out
    by_hand = (-math.log(math.exp(2) / (math.exp(2) + 2))
               - math.log(math.exp(1) / (1 + math.exp(1) + math.exp(3)))) / 2
    assert float(tdr_loss(scores, gold)) == pytest.approx(by_hand, rel=1e-6)
    assert float(tdr_loss(scores, torch.tensor([-1, -1, -1]))) == 0.0


def test_fcl_and_kofcl_labels_from_steps_and_key_object_iou() -> None:
    steps = [0, 0, 1, -1]
    assert fcl_labels(steps).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0],
                                          [0, 0, 0, 0]]
    a = frozenset({"coffee", "bean"})
    b = frozenset({"coffee", "minute"})  # IoU(a, b) = 1/3 > 0.1
    c = frozenset({"recipe", "page", "coffee", "cup", "kettle", "water", "spoon", "mug",
                   "filter", "bean"})  # IoU(a, c) = 2/10 = 0.2; IoU(b, c) = 1/11 < 0.1
    assert iou(a, b) == pytest.approx(1 / 3) and iou(b, c) == pytest.approx(1 / 11)
    lab = kofcl_labels([a, b, c, None], mu=0.1)
    assert lab.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    assert kofcl_labels([a, c], mu=0.2).tolist() == [[1, 0], [0, 1]]  # strictly greater
    assert pair_mask(steps).tolist() == [[False, True, True, False], [True, False, True, False],
                                         [True, True, False, False],
                                         [False, False, False, False]]


def test_aux_loss_is_bce_of_the_bilinear_score() -> None:
    h = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    w = torch.tensor([[1.0, 0.5], [0.0, 1.0]])
    # h0 W h1 = [1, .5] · [0, 2] = 1 ; h1 W h0 = [0, 2] · [1, 0] = 0
    labels = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = pair_mask([0, 1])
    want = (-math.log(1 / (1 + math.exp(-1))) - math.log(1 - 0.5)) / 2
    assert float(aux_loss(h, w, labels, mask)) == pytest.approx(want, rel=1e-6)


def test_ranks_count_ties_against_the_gold_and_recall() -> None:
    scores = np.array([[0.9, 0.1, 0.3], [0.2, 0.2, 0.2], [0.1, 0.5, 0.7]])
    ranks = gold_ranks(scores, np.array([0, 1, 0]))
    assert ranks.tolist() == [1, 3, 3]
    assert recall_at(ranks, (1, 3)) == {"R@1": pytest.approx(1 / 3), "R@3": 1.0}


def test_ndcg_with_rouge_l_relevance_by_hand() -> None:
    gold = "grind the coffee beans"
    sents = ["grind the coffee beans", "grind beans for the coffee", "count the coins"]
    rel = rouge_l([gold], sents)[0]
    # LCS("grind the coffee beans", "grind beans for the coffee") = "grind the coffee", 3 of
    # 4 and 5 words: P = 3/5, R = 3/4, F = 2PR/(P+R) = 2/3; with "count the coins" only "the":
    # P = 1/3, R = 1/4, F = 2/7.
    assert rel.tolist() == pytest.approx([1.0, 2 / 3, 2 / 7])
    scores = np.array([0.1, 0.9, 0.5])  # ranks: sentence 1, then 2, then 0
    dcg3 = 2 / 3 / math.log2(2) + (2 / 7) / math.log2(3) + 1.0 / math.log2(4)
    idcg3 = 1.0 + (2 / 3) / math.log2(3) + (2 / 7) / math.log2(4)
    assert ndcg_at(scores, rel, 3) == pytest.approx(dcg3 / idcg3)
    assert ndcg_at(scores, rel, 1) == pytest.approx(2 / 3)
    assert ndcg_at(np.array([0.9, 0.5, 0.1]), rel, 3) == pytest.approx(1.0)
    # equal scores must not earn the ideal order
    assert ndcg_at(np.zeros(3), rel, 1) == pytest.approx(2 / 7)


def test_isolated_steps_share_no_key_objects_with_either_neighbour() -> None:
    objs = [frozenset({"coffee", "bean"}), frozenset({"coffee", "minute"}),
            frozenset({"recipe", "page"}), frozenset({"coffee", "camera"}),
            frozenset({"camera", "tripod"})]
    assert isolated_steps(objs) == [False, False, True, False, False]
    big = frozenset(f"w{i}" for i in range(25)) | {"coffee"}  # IoU with step 1 = 1/27 < 0.05
    assert isolated_steps([frozenset({"coffee", "minute"}), big]) == [True, True]
    assert isolated_steps([frozenset({"x"})]) == [True]


def test_key_objects_are_the_nouns_of_the_caption() -> None:
    assert key_objects_of(["pour hot water over the coffee", "grind the coffee beans"]) == [
        frozenset({"water", "coffee"}), frozenset({"coffee", "bean"})]


def _yc2(tmp: Path, db: object) -> Path:
    p = tmp / "yc2.json"
    p.write_text(json.dumps(db))
    return p


def test_read_youcook2_annotations(tmp_path: Path) -> None:
    db = {"database": {"v1": {"duration": 30.0, "recipe_type": "113", "subset": "validation",
                              "annotations": [
                                  {"id": 1, "segment": [12, 20], "sentence": "fry the egg"},
                                  {"id": 0, "segment": [2, 9], "sentence": "crack the egg",
                                   "key_objects": ["Egg"]}]}}}
    anns = read_annotations(_yc2(tmp_path, db))
    v = anns["v1"]
    assert (v.goal, v.subset, v.duration) == ("113", "validation", 30.0)
    assert [(s.id, s.start, s.end) for s in v.steps] == [(0, 2.0, 9.0), (1, 12.0, 20.0)]
    assert v.steps[0].key_objects == {"egg"}  # given, lower-cased
    assert v.steps[1].key_objects == {"egg"}  # from spaCy
    assert v.step_at(10.0) is None and v.step_at(15.0) == 1


@pytest.mark.parametrize(("db", "needle"), [
    ({"videos": {}}, "expected YouCook2 annotations"),
    ({"database": {"v": {"annotations": [{"segment": [1], "sentence": "a"}],
                         "recipe_type": "1"}}}, "['segment'][1]: Field required"),
    ({"database": {"v": {"annotations": [{"segment": [5, 1], "sentence": "a"}],
                         "recipe_type": "1"}}}, "end 1 is before start 5"),
    ({"database": {"v": {"annotations": [], "recipe_type": "1", "subset": "dev"}}},
     "subset 'dev'"),
    ({"database": {"v": {"annotations": []}}}, "no 'recipe_type'"),
])
def test_broken_annotations_are_one_line_naming_the_file(tmp_path: Path, db: object,
                                                          needle: str) -> None:
    path = _yc2(tmp_path, db)
    with pytest.raises(InputError) as exc:
        read_annotations(path)
    msg = str(exc.value)
    assert msg.startswith(str(path)) and needle in msg and "\n" not in msg


def test_read_scripts_in_both_forms(tmp_path: Path) -> None:
    lists = tmp_path / "a.json"
    lists.write_text(json.dumps({"egg": [["Crack the egg.", " ", "Fry  it."],
                                         ["Crack the egg.", "Serve."]]}))
    crawl = tmp_path / "b.json"
    crawl.write_text(json.dumps({"egg": [{"title": "x", "split_ins": ["Crack the egg.",
                                                                      "Fry  it."]},
                                         {"split_ins": ["Crack the egg.", "Serve."]}]}))
    a, b = read_scripts(lists), read_scripts(crawl)
    assert a == b == {"egg": [["Crack the egg.", "Fry it."], ["Crack the egg.", "Serve."]]}
    assert goal_sentences(a, "egg") == ["Crack the egg.", "Fry it.", "Serve."]
    bad = tmp_path / "c.json"
    for content, needle in [("{not json", "not valid JSON"), ("[]", "expected scripts"),
                            (json.dumps({"egg": [{"steps": []}]}), "script 0"),
                            (json.dumps({"egg": [[]]}), "every script is empty")]:
        bad.write_text(content)
        with pytest.raises(InputError, match=needle) as exc:
            read_scripts(bad)
        assert str(exc.value).startswith(str(bad))
    with pytest.raises(InputError, match="no such file"):
        read_scripts(tmp_path / "missing.json")


def test_frame_times_and_transcript_window() -> None:
    assert frame_times(18.0, 4.5) == [2.25, 6.75, 11.25, 15.75]
    assert frame_times(10.0, 4.5) == [2.25, 6.75, 9.999]
    subs = pd.DataFrame({"start": [0.0, 9.0], "end": [3.5, 12.0],
                         "text": ["grind the beans", "now let it brew"]})
    assert words_around(subs, 2.25, 2.25) == "grind the beans"
    assert words_around(subs, 6.75, 2.25) == ""
    assert words_around(subs, 9.0, 6.0) == "grind the beans now let it brew"


@pytest.mark.parametrize("context", ["none", "lstm", "cnn", "transformer"])
def test_model_shapes_and_context_reaches_neighbours(context: str) -> None:
    torch.manual_seed(0)
    m = TdrModel(16, d_model=32, d_r=24, context=context).eval()
    img, txt = torch.randn(5, 16), torch.randn(5, 16)
    g, q = m.frames(img, txt)
    assert g.shape == (5, 32) and q.shape == (5, 24)
    assert torch.allclose(q.norm(dim=1), torch.ones(5), atol=1e-5)
    assert m.relevance(q, m.sentences(torch.randn(3, 16))).shape == (5, 3)
    img2 = img.clone()
    img2[4] += 1.0  # change the last frame only
    _, q2 = m.frames(img2, txt)
    moved = (q2[0] - q[0]).abs().max().item() > 1e-6  # does frame 0 see frame 4?
    assert moved == (context in ("lstm", "transformer"))
