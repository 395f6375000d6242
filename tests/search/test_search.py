"""`howtocap index` / `howtocap search` on a small run with known ground truth (real encoder)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from howtocap.cli import add_commands
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.knn import make_faiss
from howtocap.search.index import build_index, clip_vectors, read_meta
from howtocap.search.query import Searcher
from tests.support.search import (
    STEPS,
    Renamed,
    add_video,
    encoder,
    fresh_run,
    shared_run,
    shared_sample,
)
from tests.support.stages import write_rows
from tests.support.tiny_models import TinyEncoder


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_run(tmp_path_factory.mktemp("search"))


@pytest.fixture(scope="module")
def searcher(run: Path) -> Searcher:
    return Searcher.open(run, encoder())


def test_each_caption_finds_its_own_clip_first(run: Path, searcher: Searcher) -> None:
    aligned = pd.read_parquet(run / "aligned")
    kept = aligned[aligned["kept"]]
    assert len(searcher) == len(kept) == sum(len(s) for s in STEPS.values())
    assert "a dropped caption about nothing" not in set(searcher.clips["text"])
    for row in kept.itertuples():
        top = searcher.search(row.text, k=3, by="text")[0]
        assert (top.video_id, top.start, top.end, top.text) == \
            (row.video_id, row.start, row.end, row.text)
        assert top.orig_start == pytest.approx(row.orig_start)
        assert top.score == pytest.approx(1.0, abs=1e-3)


# Paraphrases sharing (almost) no word with the caption they must find: only the text
# embedding can match them, not a lookup of the indexed string.
PARAPHRASES = {"a cat being groomed with a brush": "brush the cat's fur",
               "the spaceship takes off": "launch the rocket",
               "pile up the money": "count and sort the coins",
               "pour a hot drink into a mug": "pour coffee into a cup",
               "inspect the wheels of the bike": "check the motorcycle tires",
               "gaze at the night sky": "look at the moon through a telescope"}
# Queries naming what a clip's photograph shows -> that clip (video, start). The embedded
# encoder gets these four; it does not rank the coins or the moon photograph first for
# "a photo of coins" / "a photo of the moon" (a limit of the small default model).
SHOWN = {"a photo of a cat": ("kitchen", 3.0), "a photo of a rocket": ("kitchen", 6.0),
         "a photo of a motorcycle": ("garage", 0.0), "a photo of a cup of coffee": ("kitchen", 0.0)}


@pytest.mark.parametrize("query", list(PARAPHRASES))
def test_a_paraphrase_finds_the_right_clip(searcher: Searcher, query: str) -> None:
    assert searcher.search(query, k=3, by="text")[0].text == PARAPHRASES[query]


def test_the_video_embedding_ranks_the_clip_showing_it_first(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The same videos indexed with captions that say nothing about the pictures ("step 1",
    ...): only the frames can tell the clips apart, so ``by="video"`` must find each one."""
    base = tmp_path_factory.getbasetemp()
    run = fresh_run(base, tmp_path / "run", [])
    for vid in STEPS:
        sample = shared_sample(vid)
        add_video(run, dataclasses.replace(sample, steps=[
            dataclasses.replace(st, caption=f"step {i + 1}") for i, st in enumerate(sample.steps)]))
    build_index(run, encoder=encoder(), progress=False)
    blind = Searcher.open(run, encoder())
    for query, clip in SHOWN.items():
        hits = blind.search(query, k=len(blind), by="video")
        assert (hits[0].video_id, hits[0].start) == clip, (query, hits[:2])
        # by a margin: the right clip is not a near-tie with the runner-up
        assert hits[0].video_score > hits[1].video_score + 0.05, (query, hits[:2])
        top = blind.search(query, k=3, by="both")[0]
        assert (top.video_id, top.start) == clip, query


def test_video_and_both_rankings_are_consistent(searcher: Searcher) -> None:
    # every clip's own video vector finds that clip first in the video index
    for i in range(len(searcher)):
        vec = searcher.video_index.reconstruct(i)
        assert searcher.rank(vec, k=1, by="video").ids[0] == i
    # distinct photographs give distinct clip vectors
    vecs = searcher.video_index.reconstruct_n(0, len(searcher))
    sims = vecs @ vecs.T
    assert np.all(sims[~np.eye(len(vecs), dtype=bool)] < 0.999)
    hits = searcher.search("launch the rocket", k=4, by="both")
    assert len(hits) == 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for h in hits:
        assert h.score == pytest.approx((h.text_score + h.video_score) / 2, abs=1e-5)
    assert hits[0].text == "launch the rocket"


def test_clip_vector_is_mean_of_its_frames() -> None:
    rng = np.random.default_rng(0)
    frames = rng.standard_normal((10, 8)).astype(np.float32)
    out = clip_vectors(TinyEncoder(dim=8), frames, np.array([2.0, 4.2]), np.array([5.0, 4.3]),
                       fps=1.0)
    want = frames[2:5].mean(0)  # centres 2.5, 3.5, 4.5 lie in [2, 5)
    assert np.allclose(out[0], want / np.linalg.norm(want), atol=1e-6)
    assert np.allclose(out[1], frames[4] / np.linalg.norm(frames[4]), atol=1e-6)  # nearest


def test_hnsw_agrees_with_exact_search() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    flat, kind_f = make_faiss(x, "flat")
    hnsw, kind_h = make_faiss(x, "hnsw")
    assert (kind_f, kind_h) == ("flat", "hnsw")
    _, a = flat.search(x[:50], 10)
    _, b = hnsw.search(x[:50], 10)
    recall = np.mean([len(set(p) & set(q)) / 10 for p, q in zip(a, b, strict=True)])
    assert recall > 0.9


def test_incremental_add_change_and_remove(tmp_path: Path, run: Path,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    enc = encoder()
    run = fresh_run(tmp_path_factory.getbasetemp(), tmp_path / "run", ["kitchen"])
    first = build_index(run, encoder=enc, progress=False)
    assert (first.embedded, first.reused, first.n) == (["kitchen"], [], 3)
    part = run / "index" / "parts" / "kitchen.npz"
    mtime = part.stat().st_mtime_ns

    add_video(run, shared_sample("garage"))
    second = build_index(run, encoder=enc, progress=False)
    assert (second.embedded, second.reused, second.n) == (["garage"], ["kitchen"], 6)
    assert part.stat().st_mtime_ns == mtime  # kitchen was not re-embedded
    assert Searcher.open(run, enc).search("check the motorcycle tires", 1)[0].video_id == "garage"

    rd = RunDir(run)
    aligned = rd.table("aligned")
    changed = aligned[aligned["video_id"] == "kitchen"].reset_index(drop=True)
    changed.loc[0, "text"] = "whisk the eggs in a bowl"
    write_rows(rd, "aligned", changed)
    third = build_index(run, encoder=enc, progress=False)
    assert (third.embedded, third.reused) == (["kitchen"], ["garage"])

    rd.forget("aligned", ["garage"])  # its rows go from the table
    fourth = build_index(run, encoder=enc, progress=False)
    assert (fourth.removed, fourth.n) == (["garage"], 3)
    assert not (run / "index" / "parts" / "garage.npz").exists()
    assert set(read_meta(run)["videos"]) == {"kitchen"}
    s = Searcher.open(run, enc)
    assert {h.video_id for h in s.search("check the motorcycle tires", 5)} == {"kitchen"}
    assert s.search("whisk the eggs in a bowl", 1)[0].text == "whisk the eggs in a bowl"


def test_other_encoder_is_refused_not_mixed(run: Path, tmp_path: Path) -> None:
    other = Renamed(encoder(), "some-other-encoder")
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with pytest.raises(HowtocapError, match=r"built with encoder .*--rebuild"):
        build_index(copy, encoder=other, progress=False)
    with pytest.raises(HowtocapError, match="some-other-encoder"):
        Searcher.open(copy, other)
    (copy / "videos.parquet").unlink()  # text-only rebuild: keeps the test fast
    info = build_index(copy, encoder=other, rebuild=True, progress=False)
    assert info.encoder == "some-other-encoder" and sorted(info.embedded) == sorted(STEPS)
    assert sorted(info.no_video) == sorted(STEPS)  # no video file -> text vectors only
    assert Searcher.open(copy, other).search("launch the rocket", 3, by="video") == []
    assert read_meta(copy)["encoder"] == "some-other-encoder"


def test_falls_back_to_captions_when_not_aligned(tmp_path: Path, run: Path,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    run = fresh_run(tmp_path_factory.getbasetemp(), tmp_path / "run", ["kitchen"])
    shutil.rmtree(run / "aligned")
    with pytest.warns(UserWarning, match="no aligned/ table"):
        info = build_index(run, encoder=encoder(), progress=False)
    assert info.source == "captions" and info.n == 3
    hit = Searcher.open(run, encoder()).search("brush the cat's fur", 1)[0]
    assert hit.start == hit.orig_start == 4.0  # the LLM's own times


def test_bad_run_dirs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        build_index(tmp_path / "missing", encoder=encoder(), progress=False)
    with pytest.raises(InputError, match="nothing to index"):
        build_index(tmp_path, encoder=encoder(), progress=False)
    with pytest.raises(InputError, match="has no index"):
        Searcher.open(tmp_path, encoder())


def test_cli_search_json_and_errors(run: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import howtocap.encoders as encoders_pkg

    # reuse the session's encoder instead of loading the same weights again
    monkeypatch.setattr(encoders_pkg, "create", lambda *a, **k: encoder(), raising=False)
    app = typer.Typer()
    add_commands(app, "index", "search", "serve")
    cli = CliRunner()
    res = cli.invoke(app, ["search", str(run), "pour coffee into a cup", "-k", "2", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)
    assert len(hits) == 2 and hits[0]["text"] == "pour coffee into a cup"
    assert set(hits[0]) >= {"video_id", "start", "end", "text", "score"}
    res = cli.invoke(app, ["search", str(run), "pour coffee", "--by", "both"])
    assert res.exit_code == 0 and "pour coffee into a cup" in res.stdout.splitlines()[0]
    res = cli.invoke(app, ["search", str(tmp_path), "anything"])
    assert res.exit_code == 2 and "has no index" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = cli.invoke(app, ["search", str(run), "   "])
    assert res.exit_code == 2 and "empty query" in res.output
