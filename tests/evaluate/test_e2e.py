"""End to end: ``evaluate`` on generated videos with the embedded default encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from howtocap.cli import add_commands
from howtocap.encoders.base import Encoder
from howtocap.evaluate.benchmarks import EvalSample
from howtocap.evaluate.embed import video_embeddings
from howtocap.evaluate.run import evaluate
from howtocap.samples import DEFAULT_STEPS, make_narrated_video

STEP = {s[0]: s for s in DEFAULT_STEPS}


@pytest.fixture(scope="session")
def eval_videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four short silent videos from different photographs, plus one broken file."""
    d = tmp_path_factory.mktemp("eval_videos")
    for vid, photos in {"two_steps": ["coffee", "chelsea"], "rocket": ["rocket"],
                        "astronaut": ["astronaut"], "coffee_only": ["coffee"]}.items():
        make_narrated_video(d, vid, [STEP[p] for p in photos], seconds_per_step=2.0, fps=5,
                            size=96, audio=False, subtitles=None)
    (d / "broken.mp4").write_text("this is not a video\n")
    return d


@pytest.fixture(scope="session")
def default_encoder() -> Encoder:
    from howtocap.encoders import create

    return create("default", device="cpu")


def _write_csv(d: Path) -> Path:
    ann = d / "own_set.csv"
    ann.write_text("video_id,video_path,caption,start,end\n"
                   "two_steps,two_steps.mp4,pour coffee into a cup,0,2\n"
                   "two_steps,two_steps.mp4,brush the cat's fur,2,4\n"
                   "rocket,rocket.mp4,launch the rocket,,\n"
                   "astronaut,astronaut.mp4,put on the space suit,,\n"
                   "astronaut,astronaut.mp4,an astronaut in a white suit,,\n"
                   "broken,broken.mp4,this clip cannot be read,,\n")
    return ann


@pytest.mark.slow
def test_evaluate_csv_end_to_end(eval_videos: Path, default_encoder: Encoder,
                                 tmp_path: Path) -> None:
    ann = _write_csv(tmp_path)
    out = tmp_path / "eval.json"
    res = evaluate("csv", ann, eval_videos, default_encoder, n_frames=4, out=out,
                   cache_dir=tmp_path / "cache", progress=False)
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert res["n_clips"] == 4 and res["n_captions"] == 5
    assert res["skipped"]["clips"] == 1 and res["skipped"]["captions"] == 1
    assert [e["video_id"] for e in res["skipped"]["errors"]] == ["broken"]
    assert "broken.mp4" in res["skipped"]["errors"][0]["error"]
    for direction, n in (("t2v", 5), ("v2t", 4)):
        m = res[direction]
        assert m["n"] == n
        assert 0 <= m["R@1"] <= m["R@5"] <= m["R@10"] <= m["R@50"]
        assert 1 <= m["MedR"] <= m["MeanR"] * 2
    # the second run reads every clip embedding from the cache and gives the same numbers
    again = evaluate("csv", ann, eval_videos, default_encoder, n_frames=4,
                     cache_dir=tmp_path / "cache", progress=False, show=False)
    assert len(list((tmp_path / "cache" / "eval").glob("*.npy"))) == 4
    assert (again["t2v"], again["v2t"]) == (res["t2v"], res["v2t"])


@pytest.mark.slow
def test_each_caption_retrieves_its_own_clip_well_above_chance(default_encoder: Encoder,
                                                                tmp_path: Path) -> None:
    """Twelve clips, each a different photograph, each captioned with what it shows: chance
    is R@1 = 1/12 (8.3 %) and a median rank of 6.5. The embedded encoder must find a caption's
    own clip first for at least 4x chance (R@1 >= 33 %), rank it in the top 5 for most
    captions, and put the median at rank <= 3, in both directions."""
    make_narrated_video(tmp_path, "twelve", DEFAULT_STEPS, seconds_per_step=2.0, fps=2,
                        size=96, audio=False, subtitles=None)
    ann = tmp_path / "twelve.csv"
    ann.write_text("video_id,video_path,caption,start,end\n" + "".join(
        f"twelve,twelve.mp4,{cap},{2 * i},{2 * i + 2}\n"
        for i, (_, _, cap) in enumerate(DEFAULT_STEPS)))
    res = evaluate("csv", ann, tmp_path, default_encoder, n_frames=2,
                   cache_dir=tmp_path / "cache", progress=False, show=False)
    n = len(DEFAULT_STEPS)
    assert res["n_clips"] == n == 12
    for direction in ("t2v", "v2t"):
        m = res[direction]
        assert m["R@1"] >= 4 * 100 / n, (direction, m)
        assert m["R@5"] > 50 and m["MedR"] <= 3, (direction, m)


@pytest.mark.slow
def test_clip_times_select_the_right_frames(eval_videos: Path,
                                            default_encoder: Encoder) -> None:
    v = eval_videos / "two_steps.mp4"
    samples = [EvalSample("two_steps", v, "x", 0.0, 2.0), EvalSample("two_steps", v, "y", 2.0, 4.0),
               EvalSample("coffee_only", eval_videos / "coffee_only.mp4", "z"),
               EvalSample("two_steps", v, "x again", 0.0, 2.0)]
    emb = video_embeddings(samples, default_encoder, n_frames=3, progress=False)
    assert emb.ok.all() and not emb.errors
    np.testing.assert_allclose(np.linalg.norm(emb.emb, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(emb.emb[0], emb.emb[3])  # same clip, same embedding
    coffee = emb.emb[2]
    assert emb.emb[0] @ coffee > emb.emb[1] @ coffee + 0.05  # the coffee half is the coffee


@pytest.mark.slow
def test_cli_eval(eval_videos: Path, tmp_path: Path) -> None:
    app = typer.Typer()
    add_commands(app, "eval")
    app.command("noop")(lambda: None)  # a second command keeps "eval" a sub-command
    runner = CliRunner()
    ann = _write_csv(tmp_path)
    out = tmp_path / "cli.json"
    r = runner.invoke(app, ["eval", "--benchmark", "csv", "--annotations", str(ann),
                            "--videos", str(eval_videos), "--frames", "2", "--limit", "2",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["n_clips"] == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("video_id,video_path,text\na,a.mp4,hello\n")
    r = runner.invoke(app, ["eval", "-b", "csv", "--annotations", str(bad)])
    assert r.exit_code == 2
    assert "missing column caption" in r.output and "Traceback" not in r.output
