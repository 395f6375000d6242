"""End to end through the real `howtocap` process: `run` with the default embedded LLM, Whisper
feeding captions, `index` + `search`, `export --format csv` / `--unfiltered`, `--config` YAML,
`framecaps`. Each result is checked against what the generated videos are known to contain."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from howtocap.caption.parse import norm_text
from howtocap.llm import EMBEDDED_DEFAULT
from howtocap.samples import (
    CHATTER_IMAGE,
    CHATTER_LINES,
    DEFAULT_STEPS,
    SampleVideo,
    make_narrated_video,
)
from tests.support.chat_server import chat_server
from tests.support.cli import run_cli, vtt

pytestmark = pytest.mark.slow

# the object each narrated step is about (a caption that names none of them says nothing)
OBJECTS = {"coffee": ("coffee", "cup"), "chelsea": ("cat", "brush", "fur"),
           "rocket": ("rocket", "countdown", "launch")}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def step_of(sample: SampleVideo, t: float) -> int:
    """Index of the step whose time span holds second ``t``."""
    return next(i for i, s in enumerate(sample.steps) if s.start <= t < s.end)


# --- `run` with the default embedded LLM (no --llm flag), shared by several tests -----------

# the chatter line the narrator ends on: the model's caption of it must be dropped
SUBSCRIBE = CHATTER_LINES[1]


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[SampleVideo, Path]:
    """One 16-s narrated video (coffee, cat, rocket, then "like and subscribe") with its
    WebVTT, through `howtocap run`, on one core (as on a one-core share; llama.cpp then takes
    one thread: with the other test process on the second core its threads would spin-wait
    for each other). The only test of the real default model captioning (its prompt alone
    is ~1,300 tokens, ~90 s on one core): each fact is checked on this one run."""
    root = tmp_path_factory.mktemp("llm_run")
    sample = make_narrated_video(root / "videos", "howto",
                                 [*DEFAULT_STEPS[:3], (CHATTER_IMAGE, *SUBSCRIBE)],
                                 seconds_per_step=4.0, fps=5, size=128)
    out = root / "run"
    res = run_cli("run", str(root / "videos"), "--out", str(out), "--quiet", timeout=900,
                  cores=1)
    assert res.returncode == 0, res.stderr
    return sample, out


def test_run_with_the_default_embedded_llm(llm_run: tuple[SampleVideo, Path]) -> None:
    sample, out = llm_run
    cfg = json.loads((out / "config" / "caption.json").read_text())
    assert cfg["llm"]["name"] == "embedded" and cfg["llm"]["url"] is None
    caps = pd.read_parquet(out / "captions")
    assert len(caps) >= 2 and set(caps["model"]) == {EMBEDDED_DEFAULT}
    assert set(caps["source"]) == {"llm"} and set(caps["video_id"]) == {"howto"}
    assert set(caps["block"]) == {0}  # the four sentences are one block: one reply
    # captions, not copies of the speech, and no channel chatter
    assert caps["text"].str.len().gt(3).all()
    subs = pd.read_parquet(out / "subtitles")
    assert not set(caps["text"].map(norm_text)) & set(subs["text"].map(norm_text))
    assert not caps["text"].str.contains("subscribe", case=False).any(), caps["text"].tolist()
    # every caption starts inside the video, at the start of a narrated sentence (the LLM is
    # shown the cue times), and lasts --clip-seconds
    starts = [s.narration_start for s in sample.steps]
    for t in caps["start"]:
        assert 0 <= t < sample.duration
        assert min(abs(t - s) for s in starts) <= 1.0, (t, starts)
    assert (caps["end"] - caps["start"]).round(6).eq(8.0).all()
    # they are captions of what was said: at least one names the object of its own step
    named = [any(w in words(row.text)
                 for w in OBJECTS.get(sample.steps[step_of(sample, row.start)].image, ()))
             for row in caps.itertuples()]
    assert any(named), caps["text"].tolist()

    aligned = pd.read_parquet(out / "aligned")
    assert len(aligned) == len(caps) and aligned["kept"].any()
    assert aligned["start"].ge(0).all() and aligned["end"].le(sample.duration + 1e-6).all()
    assert (aligned["start"] - aligned["orig_start"]).abs().le(10).all()
    assert sorted(aligned["text"]) == sorted(caps["text"])
    assert (out / "align_report.html").exists()
    status = pd.read_parquet(out / "status")
    assert set(status["stage"]) == {"subtitles", "caption", "align"}
    assert (status["status"] == "ok").all()


def test_index_then_search_finds_each_steps_clip(llm_run: tuple[SampleVideo, Path]) -> None:
    sample, out = llm_run
    res = run_cli("index", str(out), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    kept = pd.read_parquet(out / "aligned").query("kept")
    assert info["n"] == len(kept) and (out / "index").is_dir()
    # each step that has a kept caption naming its object is found first by a query naming
    # the step in other words (the sample's reference caption); the hit is that step's clip,
    # judged by where its caption came from in the narration, not by its text
    steps = {step_of(sample, r.orig_start) for r in kept.itertuples()
             if words(r.text) & set(OBJECTS.get(sample.steps[step_of(sample, r.orig_start)]
                                                .image, ()))}
    assert steps, kept["text"].tolist()
    for i in steps:
        step = sample.steps[i]
        res = run_cli("search", str(out), step.caption, "-k", "3", "--json")
        assert res.returncode == 0, res.stderr
        hits = json.loads(res.stdout)
        assert 1 <= len(hits) <= min(3, len(kept))
        assert hits[0]["video_id"] == "howto"
        assert step_of(sample, hits[0]["orig_start"]) == i, (step.caption, hits)
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


# --- Whisper feeding captions, then export -------------------------------------------------

@pytest.fixture(scope="module")
def asr_run(tmp_path_factory: pytest.TempPathFactory, narrated_video: SampleVideo
            ) -> tuple[SampleVideo, Path]:
    """The narrated sample WITHOUT its subtitle file: `run` must transcribe it; an echo LLM
    (first words of each line) keeps the captions traceable to the speech."""
    root = tmp_path_factory.mktemp("asr_run")
    (root / "videos").mkdir()
    shutil.copy(narrated_video.video_path, root / "videos" / "spoken.mp4")
    out = root / "run"
    with chat_server() as srv:
        res = run_cli("run", str(root / "videos"), "--out", str(out), "--llm-url", srv.url,
                      "--keep-top", "1", "--keep-fillers", "--parse-workers", "0", "--quiet",
                      timeout=600)
        # (the echo server's "captions" are line prefixes such as "Next, take the": the
        # filler test may reject them; it is tested on real captions in test_filler.py)
    assert res.returncode == 0, res.stderr
    return narrated_video, out


def test_asr_subtitles_feed_the_captions(asr_run: tuple[SampleVideo, Path]) -> None:
    sample, out = asr_run
    subs = pd.read_parquet(out / "subtitles")
    assert set(subs["source"]) == {"asr"} and set(subs["video_id"]) == {"spoken"}
    spoken = set().union(*(words(s.narration) for s in sample.steps))
    heard = set().union(*map(words, subs["text"]))
    # Whisper heard the narration: most of its words, and each step's object
    assert len(heard & spoken) >= 0.8 * len(spoken), heard ^ spoken
    for step in sample.steps:
        assert words(step.narration) & set(OBJECTS[step.image]) <= heard
    caps = pd.read_parquet(out / "captions")
    assert len(caps) >= 2
    for row in caps.itertuples():
        # the echo LLM's caption is the first words of a transcribed line at that time
        assert words(row.text) <= heard, row.text
        assert any(abs(row.start - s) <= 1.0 for s in subs["start"]), row.start


def test_export_csv_kept_pairs_and_unfiltered(asr_run: tuple[SampleVideo, Path],
                                              tmp_path: Path) -> None:
    _, out = asr_run
    aligned = pd.read_parquet(out / "aligned")
    assert aligned["kept"].sum() == 1 and (~aligned["kept"]).sum() >= 1  # --keep-top 1

    def exported(*flags: str) -> list[dict[str, str]]:
        path = tmp_path / f"pairs{len(flags)}.csv"
        res = run_cli("export", str(out), "--format", "csv", "--out", str(path), *flags)
        assert res.returncode == 0, res.stderr
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))

    def key(video_id: str, start: float, end: float, text: str) -> tuple:
        return (video_id, round(float(start), 3), round(float(end), 3), text)

    kept = aligned[aligned["kept"]]
    rows = exported()
    assert sorted(key(r["video_id"], r["start"], r["end"], r["caption"]) for r in rows) == sorted(
        key(*r) for r in kept[["video_id", "start", "end", "text"]].itertuples(index=False))
    rows = exported("--unfiltered")
    assert sorted(key(r["video_id"], r["start"], r["end"], r["caption"]) for r in rows) == sorted(
        key(*r) for r in aligned[["video_id", "start", "end", "text"]].itertuples(index=False))
    by_text = {r["caption"]: r for r in rows}
    for r in aligned.itertuples():  # the unfiltered export carries each pair's score and verdict
        assert float(by_text[r.text]["score"]) == pytest.approx(r.score, abs=1e-4)
        assert by_text[r.text]["kept"] == str(r.kept)
    assert {r["video_path"] for r in rows} == {str(out.parent / "videos" / "spoken.mp4")}


# --- --config YAML: flags typed on the command line win ------------------------------------

def test_config_yaml_with_a_flag_that_wins(tmp_path: Path, base_video: Path) -> None:
    # 66 words in six cues: one block at --block-words 80, two at the YAML's 50
    cues = [(2.0 * i, 2.0 * i + 1.5, f"step {i} now we chop the onion and stir the pot well")
            for i in range(6)]
    vids = tmp_path / "videos"
    vids.mkdir()
    shutil.copy(base_video, vids / "cfg.mp4")
    (vids / "cfg.vtt").write_text(vtt(cues))
    with chat_server() as srv:
        conf = tmp_path / "run.yaml"
        conf.write_text(yaml.safe_dump({"block-words": 50, "clip-seconds": 3.0,
                                        "llm-url": srv.url, "parse-workers": 0,
                                        "quiet": True}))
        res = run_cli("caption", str(vids), "--out", str(tmp_path / "run"), "--config",
                      str(conf), "--block-words", "80")
        assert res.returncode == 0, res.stderr
        assert srv.requests == 1  # one block: 80 words per block, not 50
        # the file alone: its 50 words per block apply
        res = run_cli("caption", str(vids), "--out", str(tmp_path / "run50"), "--config",
                      str(conf))
        assert res.returncode == 0, res.stderr
        assert srv.requests == 1 + 2
    recorded = json.loads((tmp_path / "run" / "config" / "caption.json").read_text())
    assert recorded["caption"]["block_words"] == 80
    assert recorded["caption"]["clip_seconds"] == 3.0  # a key only the YAML file sets
    assert recorded["llm"]["url"] == srv.url
    caps = pd.read_parquet(tmp_path / "run" / "captions")
    assert len(caps) == 6 and set(caps["block"]) == {0}
    assert (caps["end"] - caps["start"]).round(6).eq(3.0).all()
    assert json.loads((tmp_path / "run50" / "config" / "caption.json").read_text()
                      )["caption"]["block_words"] == 50
    assert pd.read_parquet(tmp_path / "run50" / "captions")["block"].nunique() == 2
    # a key that is no option: one line naming the file and the key
    conf.write_text("block-wordz: 50\n")
    res = run_cli("caption", str(vids), "--out", str(tmp_path / "bad"), "--config", str(conf))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "run.yaml" in res.stderr and "block-wordz" in res.stderr


# --- framecaps ------------------------------------------------------------------------------

def test_framecaps_keeps_the_top_k_distinct_captions_per_captioner(
        tmp_path: Path, tiny_blip: Path) -> None:  # noqa: F811
    vids = tmp_path / "videos"
    for vid, steps in {"a": DEFAULT_STEPS[0:2], "b": DEFAULT_STEPS[5:7]}.items():
        make_narrated_video(vids, vid, steps, seconds_per_step=2.0, fps=5, size=96,
                            audio=False, subtitles=None)
    out = tmp_path / "fc"
    res = run_cli("framecaps", str(vids), "--out", str(out), "--captioner", "default",
                  "--captioner", f"hf:{tiny_blip}", "--frames", "3", "--top-k", "2", "--quiet")
    assert res.returncode == 0, res.stderr
    df = pd.read_parquet(out / "framecaps")
    captioners = {"default", f"hf:{tiny_blip}"}
    assert set(df["video_id"]) == {"a", "b"} and set(df["captioner"]) == captioners
    for (vid, name), g in df.groupby(["video_id", "captioner"]):
        # --frames 3: one row per frame, at the centres of three equal slices of the 4-s video
        assert len(g) == 3, (vid, name)
        assert sorted(g["frame_time"].round(3)) == pytest.approx([2 / 3, 2.0, 10 / 3], abs=0.01)
        # --top-k 2: the best two distinct captions by CLIPScore (fewer if fewer are distinct)
        best = g.assign(t=g["text"].str.lower()).groupby("t")["clipscore"].max()
        kept = g[g["kept"]]
        assert len(kept) == min(2, len(best)), (vid, name, g)
        assert set(kept["text"].str.lower()) == set(best.nlargest(2).index), (vid, name, g)
        assert kept["text"].str.lower().is_unique
    default = df[df["captioner"] == "default"]
    assert default["text"].str.startswith("a photo of a ").all()
    # the default captioner names what it sees: the coffee frames are about a cup of coffee
    coffee = default[(default["video_id"] == "a") & (default["frame_time"] < 2)]["text"]
    assert coffee.str.contains("cup|espresso|coffee", regex=True).any(), coffee.tolist()
