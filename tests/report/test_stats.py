"""`howtocap stats`: numbers checked against hand-computed values on hand-written tables.

Uses the real spaCy model (the bundled en_core_web_sm copy), loaded once per session.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from howtocap.cli import add_commands
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VideoItem
from howtocap.nlp import iter_words_and_verbs, load_spacy
from howtocap.report.stats import (
    compute_stats,
    ngram_ratios,
    sample_videos,
    stats_run,
    to_pct,
    verb_stats,
)

# Verbs (all unambiguous imperatives): cut x3, add x3, stir x2, cook x2, pour x2, fry, wash.
CAPTIONS = {
    "v1": ["Cut the onion.", "Cut the carrot and add salt.", "Add the pepper."],
    "v2": ["Cut the bread.", "Add oil and stir the sauce.", "Stir the soup and cook the rice."],
    "v3": ["Cook the pasta and pour the water.", "Pour the milk.",
           "Fry the egg and wash the pan."],
}
KEPT = {"Cut the onion.", "Add oil and stir the sauce.", "Fry the egg and wash the pan."}
SUBTITLES = {
    "v1": ["okay so first you cut the onion", "don't forget the salt"],
    "v2": ["okay okay"],
}


def _rows(video_id: str, texts: list[str]) -> dict:
    n = len(texts)
    start = np.arange(n) * 5.0
    return {"video_id": [video_id] * n, "start": start, "end": start + 8, "text": texts}


def commit(rd: RunDir, stage: str, writes: tuple[str, ...], records: list[StatusRecord],
           tables: dict[str, pd.DataFrame] | None = None) -> None:
    """Commit these records (and table rows) as the stage would, shard by shard: a video
    given again gets its newer record."""
    ids = [r.video_id for r in records]
    rd.record_videos(VideoItem(v, None) for v in ids)
    ks = rd.shard_of(ids)
    for k in sorted(set(ks.tolist())):
        mine = {v for v, kk in zip(ids, ks, strict=True) if kk == k}
        w = rd.writer(stage, k, writes)
        w.commit([r for r in records if r.video_id in mine],
                 {t: df[df["video_id"].isin(mine)].reset_index(drop=True)
                  for t, df in (tables or {}).items()})
        w.finish()


def build_run(root: Path, *, aligned: bool = True) -> RunDir:
    rd = RunDir(root)
    subs = pd.concat([pd.DataFrame({**_rows(vid, texts), "source": "asr"})
                      for vid, texts in SUBTITLES.items()], ignore_index=True)
    commit(rd, "transcribe", ("subtitles",),
           [StatusRecord(vid, "transcribe", "ok", "", 4.0, finished_at=100.0)
            for vid in SUBTITLES]
           + [StatusRecord("v5", "transcribe", "error", "v5.mp4: unreadable", 0.0,
                           finished_at=100.0)], {"subtitles": subs})
    caps, aligns = [], []
    for vid, texts in CAPTIONS.items():
        rows = _rows(vid, texts)
        caps.append(pd.DataFrame({**rows, "source": "llm", "block": 0, "model": "test"}))
        offs = np.array([-2.0, 0.0, 3.0])
        aligns.append(pd.DataFrame({
            **rows, "orig_start": rows["start"] - offs, "orig_end": rows["end"] - offs,
            "offset": offs, "score": [0.5, 0.3, 0.4],
            "kept": [t in KEPT for t in texts], "encoders": "default", "source": "llm",
            "block": 0, "model": "test"}))
    commit(rd, "caption", ("captions",),
           [StatusRecord(vid, "caption", "ok", "", float(i + 1), finished_at=200.0)
            for i, vid in enumerate(CAPTIONS)]
           + [StatusRecord(vid, "caption", "error", f"{vid}.mp4: no audio stream", 0.0,
                           finished_at=200.0) for vid in ("v4", "v5")],
           {"captions": pd.concat(caps, ignore_index=True)})
    if aligned:
        commit(rd, "align", ("aligned",),
               [StatusRecord(vid, "align", "ok", "", 0.5, finished_at=300.0)
                for vid in CAPTIONS], {"aligned": pd.concat(aligns, ignore_index=True)})
    return rd


@pytest.fixture(scope="session")
def nlp():
    return load_spacy()


@pytest.fixture(scope="session")
def full_stats(tmp_path_factory, nlp):
    root = tmp_path_factory.mktemp("stats_run")
    rd = build_run(root)
    return rd, compute_stats(rd, nlp=nlp)


# -- pure helpers --------------------------------------------------------------------------------
def test_words_are_spacy_tokens_without_punctuation(nlp):
    """Hand-counted: spaCy splits clitics (do + n't, let + 's), punctuation is not a word."""
    texts = ["Don't cut the 2 onions, OK?", "Let's stir it -- slowly!", "..."]
    got = list(iter_words_and_verbs(nlp, texts))
    assert got[0] == (["do", "n't", "cut", "the", "2", "onions", "ok"], ["cut"])  # 7 words
    assert got[1][0] == ["let", "'s", "stir", "it", "slowly"]  # 5 words; "--", "!" dropped
    assert got[2] == ([], [])


def test_ngram_ratios_stay_inside_each_sequence():
    r = ngram_ratios([["a", "b", "a", "b"], ["a", "b"]])
    # 1-grams: 6 total, {a, b}; 2-grams: ab, ba, ab, ab; 3-grams: aba, bab (no b|a across texts).
    assert r == {"1": pytest.approx(2 / 6), "2": pytest.approx(2 / 4), "3": pytest.approx(1.0)}
    assert ngram_ratios([["a"], []]) == {"1": 1.0, "2": None, "3": None}
    assert to_pct(r) == {"1": pytest.approx(100 / 3), "2": pytest.approx(50.0),
                         "3": pytest.approx(100.0)}


def test_verb_stats_diverse_share_breaks_ties_alphabetically():
    seqs = [["cut"], ["cut", "add"], ["b"], ["c"], ["d"], ["e"], ["f"]]
    s = verb_stats(seqs)
    # counts cut 2, then six verbs once: top 5 = cut, add, b, c, d -> e, f are diverse: 2 of 8.
    assert s["verbs"] == 8 and s["verb_vocabulary"] == 7
    assert s["diverse_verbs_pct"] == pytest.approx(25.0)
    assert s["top_verbs"][:2] == [["cut", 2], ["add", 1]]
    assert verb_stats([[]])["diverse_verbs_pct"] is None


# -- the whole run ---------------------------------------------------------------------------------
def test_caption_statistics_match_hand_computed_values(full_stats):
    _, stats = full_stats
    cap = stats["text"]["captions"]
    assert cap["texts"] == 9 and cap["videos"] == 3 and not cap["sampled"]
    assert stats["sample"] == {"videos_max": 5000, "seed": 0, "videos_total": 3,
                               "videos_used": 3, "sampled": False}
    # word counts per caption: 3 6 3 | 3 6 7 | 7 3 7 -> 45 words, per video 12, 16, 17
    assert cap["words"] == 45
    assert cap["words_per_caption"]["mean"] == pytest.approx(5.0)
    assert cap["words_per_caption"]["std"] == pytest.approx(math.sqrt(30 / 9))
    assert cap["words_per_video"]["mean"] == pytest.approx(15.0)
    assert cap["words_per_video"]["std"] == pytest.approx(math.sqrt(14 / 3))
    assert cap["captions_per_video"] == {"mean": 3.0, "std": 0.0}
    assert cap["vocabulary"] == 23
    # 2-grams: 36 in all; "cut the" x3, "stir/cook/pour the" x2 -> 31 distinct; 3-grams all distinct
    assert cap["word_ngram_unique_pct"] == {"1": pytest.approx(100 * 23 / 45),
                                            "2": pytest.approx(100 * 31 / 36),
                                            "3": pytest.approx(100.0)}
    # verbs: cut 3, add 3, stir 2, cook 2, pour 2 (the top 5) + fry, wash -> 2 of 14 diverse
    assert cap["verbs"] == 14 and cap["verb_vocabulary"] == 7
    assert cap["diverse_verbs_pct"] == pytest.approx(100 * 2 / 14)
    assert {v for v, _ in cap["top_verbs"][:2]} == {"cut", "add"}
    # verb sequences: cut | cut add | add | cut | add stir | stir cook | cook pour | pour | fry wash
    assert cap["verb_ngram_unique_pct"] == {"1": pytest.approx(50.0), "2": pytest.approx(100.0),
                                            "3": None}


def test_subtitle_and_kept_statistics(full_stats):
    _, stats = full_stats
    sub = stats["text"]["subtitles"]
    assert sub["texts"] == 3 and sub["videos"] == 2
    # spaCy words: 7 | do n't forget the salt: 5 | 2
    assert sub["words_per_caption"]["mean"] == pytest.approx(14 / 3)
    assert sub["words_per_caption"]["std"] == pytest.approx(np.std([7, 5, 2]))
    assert sub["vocabulary"] == 11  # okay so first you cut the onion do n't forget salt
    assert sub["word_ngram_unique_pct"]["1"] == pytest.approx(100 * 11 / 14)
    kept = stats["text"]["kept"]
    assert kept["texts"] == 3 and kept["videos"] == 3
    assert kept["words_per_caption"]["mean"] == pytest.approx(16 / 3)  # 3, 6, 7
    assert kept["verbs"] == 5 and kept["diverse_verbs_pct"] == 0.0  # 5 verbs, all in the top 5


def test_run_summary_counts_and_times(full_stats):
    _, stats = full_stats
    s = stats["summary"]
    assert s["videos"] == 5 and s["videos_failed"] == 2
    by_stage = {st["stage"]: st for st in s["stages"]}
    assert [st["stage"] for st in s["stages"]] == ["transcribe", "caption", "align"]
    assert (by_stage["caption"]["ok"], by_stage["caption"]["failed"]) == (3, 2)
    assert by_stage["caption"]["seconds_total"] == pytest.approx(6.0)
    assert by_stage["caption"]["seconds_mean"] == pytest.approx(6.0 / 5)
    assert (by_stage["transcribe"]["ok"], by_stage["transcribe"]["failed"]) == (2, 1)
    msgs = {(f["stage"], f["message"]): (f["count"], f["example_video"]) for f in s["failures"]}
    assert msgs == {("caption", "v4.mp4: no audio stream"): (1, "v4"),
                    ("caption", "v5.mp4: no audio stream"): (1, "v5"),
                    ("transcribe", "v5.mp4: unreadable"): (1, "v5")}
    assert (s["captions_generated"], s["captions_aligned"], s["captions_kept"]) == (9, 9, 3)
    assert s["kept_pct"] == pytest.approx(100 / 3)
    al = stats["alignment"]
    assert al["all"]["offset"]["abs_mean"] == pytest.approx(5 / 3)  # |-2|, 0, 3 per video
    assert al["kept"]["rows"] == 3 and al["kept"]["score"]["mean"] == pytest.approx(0.4)
    h = stats["histograms"]
    assert sum(h["words_per_caption"]["series"]["captions"]) == 9
    assert sum(h["score"]["series"]["kept"]) == 3 and sum(h["score"]["series"]["dropped"]) == 6


def test_same_failure_message_is_counted_once_per_video(tmp_path, nlp):
    rd = build_run(tmp_path)
    commit(rd, "caption", ("captions",),
           [StatusRecord(v, "caption", "error", "boom", 0.0, finished_at=200.0)
            for v in ("v4", "v5")])
    s = compute_stats(rd, nlp=nlp)["summary"]
    assert s["failures"][0] == {"stage": "caption", "message": "boom", "count": 2,
                                "example_video": "v4"}


def test_stats_run_writes_report_and_json(tmp_path, nlp):
    build_run(tmp_path)
    stats = stats_run(tmp_path, progress=False)
    data = json.loads((tmp_path / "stats.json").read_text())
    assert data["text"]["captions"]["vocabulary"] == 23
    assert data["summary"]["captions_kept"] == 3
    page = (tmp_path / "report.html").read_text()
    assert stats["outputs"]["report"] == str(tmp_path / "report.html")
    assert page.index("Run summary") < page.index("Subtitles vs captions")
    assert page.count("data:image/png;base64,") == 4
    assert "v4.mp4: no audio stream" in page and "Kept captions" in page
    assert "<script" not in page and "http" not in page.split("<body>")[1]  # self-contained


def test_missing_alignment_is_reported_not_fatal(tmp_path, nlp):
    build_run(tmp_path, aligned=False)
    stats = stats_run(tmp_path, progress=False)
    assert "aligned" in stats["missing"]
    assert stats["text"]["kept"] is None and stats["alignment"] is None
    assert "offset" not in stats["histograms"]
    assert stats["summary"]["captions_kept"] is None
    assert stats["text"]["captions"]["vocabulary"] == 23
    assert not (tmp_path / "aligned").exists()  # reading did not invent a table
    page = (tmp_path / "report.html").read_text()
    assert "no alignment yet" in page and page.count("data:image/png;base64,") == 2


def test_sampling_by_video_is_seeded_shared_and_reported(tmp_path, nlp):
    rd = build_run(tmp_path)
    a = compute_stats(rd, nlp=nlp, videos=2)
    b = compute_stats(rd, nlp=nlp, videos=2)
    chosen = sample_videos(["v1", "v2", "v3"], 2, 0)
    assert len(chosen) == 2 and chosen != sample_videos(["v1", "v2", "v3"], 2, 3)
    assert a["sample"] == {"videos_max": 2, "seed": 0, "videos_total": 3, "videos_used": 2,
                           "sampled": True}
    per_caption = {"v1": [3, 6, 3], "v2": [3, 6, 7], "v3": [7, 3, 7]}  # spaCy words
    counts = [n for v in sorted(chosen) for n in per_caption[v]]
    cap = a["text"]["captions"]
    assert cap["sampled"] and cap["texts"] == 9 and cap["videos"] == 3
    assert cap["texts_used"] == 6 and cap["videos_used"] == 2
    assert cap["words"] == sum(counts)
    assert cap["words_per_caption"]["mean"] == pytest.approx(np.mean(counts))
    # the same videos for every corpus: subtitles exist for v1 and v2 only
    sub_used = sum(len(SUBTITLES.get(v, [])) for v in chosen)
    assert a["text"]["subtitles"]["texts_used"] == sub_used
    assert a["text"]["kept"]["texts_used"] == 2  # one kept caption per video
    assert a["text"] == b["text"]
    assert compute_stats(rd, nlp=nlp, videos=3)["sample"]["sampled"] is False
    from howtocap.report.stats_html import render_html

    assert "use the texts of 2 of the 3 videos" in render_html(a)


def test_empty_or_missing_run_dir_is_one_clear_error(tmp_path):
    with pytest.raises(HowtocapError, match="nothing to report"):
        stats_run(tmp_path, progress=False)
    with pytest.raises(InputError, match="no such run directory"):
        stats_run(tmp_path / "nope", progress=False)
    with pytest.raises(HowtocapError, match="--videos must be 0"):
        stats_run(tmp_path, videos=-1, progress=False)


def test_unknown_spacy_model_is_a_clear_error():
    with pytest.raises(HowtocapError, match="no spaCy English model.*no_such_model_xyz"):
        load_spacy("no_such_model_xyz")


def test_cli_command(tmp_path):
    app = typer.Typer()
    app.callback()(lambda: None)
    add_commands(app, "stats")
    runner = CliRunner()
    build_run(tmp_path / "run")
    res = runner.invoke(app, ["stats", str(tmp_path / "run"), "--videos", "100",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    assert str(tmp_path / "run" / "report.html") in res.output
    assert json.loads((tmp_path / "run" / "stats.json").read_text())["sample"]["videos_max"] == 100
    res = runner.invoke(app, ["stats", str(tmp_path / "empty_missing")])
    assert res.exit_code == 2
    assert "no such run directory" in res.output


def test_report_shows_each_signal_with_its_extreme_clips(tmp_path, nlp):
    """Signals of two real videos (and one whose file is gone): a histogram per signal,
    the three highest and lowest clips in order with a thumbnail each, and a placeholder
    where the video does not read."""
    import base64
    import io
    import subprocess

    from PIL import Image

    from tests.support.stages import write_rows

    rd = RunDir(tmp_path / "run")
    paths = {}
    for vid, colour in (("red", "red"), ("blue", "blue")):
        paths[vid] = tmp_path / f"{vid}.mp4"
        subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                        f"color=c={colour}:size=64x48:rate=10:duration=8", "-pix_fmt",
                        "yuv420p", str(paths[vid])], check=True)
    paths["gone"] = tmp_path / "gone.mp4"
    rd.record_videos([VideoItem(v, p) for v, p in paths.items()])
    rows = [{"video_id": v, "start": float(t), "end": float(t + 2),
             "motion": m, "static": m < 0.002, "text_area": 0.0, "face_area": 0.0,
             "brightness": 0.5, "sharpness": 0.01, "aesthetic": float("nan"),
             "config_id": "c"}
            for v, base in (("red", 0.0), ("blue", 0.1), ("gone", 0.5))
            for t, m in zip((0, 2, 4), (base, base + 0.01, base + 0.02), strict=True)]
    write_rows(rd, "signals", pd.DataFrame(rows), stage="signals")
    stats = stats_run(rd.root, progress=False)
    sig = stats["signals"]
    assert sig["rows"] == 9 and set(sig["histograms"]) == {
        "motion", "text_area", "face_area", "brightness", "sharpness"}  # aesthetic: all NaN
    high = sig["extremes"]["motion"]["high"]
    assert [(c["video_id"], c["value"]) for c in high] == [
        ("gone", 0.52), ("gone", 0.51), ("gone", 0.5)] and all(c["jpg"] is None for c in high)
    low = sig["extremes"]["motion"]["low"]
    assert [(c["video_id"], c["start"]) for c in low] == [("red", 0.0), ("red", 2.0),
                                                         ("red", 4.0)]
    pixel = Image.open(io.BytesIO(base64.b64decode(low[0]["jpg"]))).convert("RGB").getpixel(
        (5, 5))
    assert pixel[0] > 200 and pixel[2] < 60  # the red video's frame
    page = (rd.root / "report.html").read_text()
    section = page.split("<h2>Visual signals</h2>")[1].split("<h2>")[0]
    assert section.count("data:image/png;base64,") == 5
    assert section.count("data:image/jpeg;base64,") >= 6  # red and blue thumbnails
    assert "video not readable" in section and "The 3 highest motion" in section
    assert json.loads((rd.root / "stats.json").read_text())["signals"]["rows"] == 9


def test_report_without_signals_says_how_to_get_them(tmp_path, nlp):
    build_run(tmp_path)
    stats_run(tmp_path, progress=False)
    section = (tmp_path / "report.html").read_text().split("<h2>Visual signals</h2>")[1]
    assert "howtocap signals DIR" in section.split("<h2>")[0]
