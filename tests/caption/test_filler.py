"""Captions that show nothing (``caption.filler``): the parse test on step/filler pairs, the
``rejected`` column, align ignoring rejected rows, ``--keep-fillers`` through the CLI."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run
from howtocap.caption.captioner import CaptionConfig, caption_video
from howtocap.caption.filler import REASONS, load_parser, reject_reasons
from howtocap.caption.stage import CaptionStage
from howtocap.engine.rundir import RunDir
from howtocap.io.export import pairs_for_export
from howtocap.io.inputs import VideoItem
from howtocap.llm import LLMOptions
from howtocap.samples import FILLER_LINES, make_fixture_set
from tests.support.captions import Scripted, labelled_texts
from tests.support.chat_server import chat_server
from tests.support.cli import add_video, run_cli, vtt
from tests.support.stages import write_rows
from tests.support.tiny_models import TinyEncoder

# (a real step, a caption that shows nothing and shares its words or shape, the reason)
PAIRS = [
    ("Whisk the eggs until smooth.", "So yeah, let's see.", "filler"),
    ("Hang the towel on the rail.", "Okay, hang on a second.", "filler"),
    ("Let it simmer.", "Let's see here.", "filler"),
    ("Stir.", "Alright.", "filler"),
    ("Serve.", "Perfect.", "filler"),
    ("Keep stirring.", "Okay, let's keep going.", "filler"),
    ("Look at the color of the sauce.", "Look at that.", "filler"),
    ("Here, fold the dough over the filling.", "Here we go.", "filler"),
    ("Let it rest for 10 minutes.", "Give it a minute.", "time"),
    ("Give it a quick stir.", "Give it a minute.", "time"),
    ("Take the pan off the heat.", "Take your time.", "time"),
    ("Wait for the water to boil.", "Wait a few minutes.", "time"),
    ("Bake for 25 minutes.", "This is going to take a while.", "time"),
    ("Let the dough rise for an hour.", "Be patient.", "time"),
    ("Rush the tray into the hot oven.", "Take your time with this, there is no rush at all.",
     "time"),
    ("Taste the sauce and adjust the seasoning.", "Let me know what you think.", "meta"),
    ("Serve with rice.", "I hope you enjoy it.", "meta"),
    ("Serve the others a slice.", "Tell others what you think.", "meta"),
    ("Show the guests the finished cake.", "I'll show you how.", "meta"),
    ("Roll out the dough.", "You know what I mean.", "meta"),
    ("Preheat the oven to 350 degrees.", "That's it for today.", "signoff"),
    ("Season with salt and pepper.", "Happy cooking.", "signoff"),
    ("Done, transfer the cookies to a rack.", "So that's pretty much it for that part.",
     "signoff"),
    ("Sliced onions in the pan.", "My kids absolutely love this one.", "no-action"),
    ("The finished omelette on a plate.", "This is my favorite part.", "no-action"),
]

# Step sentences as YouCook2's annotators write them: lower case, imperative, often without
# an object, with times and temperatures inside the step.
YOUCOOK2_STYLE = [
    "crack two eggs in a bowl", "whisk the eggs together", "melt butter in a hot pan",
    "season the chicken with salt and pepper", "stir", "mix well", "serve",
    "let the dough rest for 30 minutes", "cook for 5 minutes", "bake at 180 degrees for 20 "
    "minutes", "set aside", "drain the pasta", "add the garlic and cook until fragrant",
    "flip the pancake", "cover and simmer", "bring the water to a boil",
    "wait until the oil is hot", "leave it to marinate overnight", "cut into pieces",
    "garnish with parsley", "fry until golden brown", "put the lid on", "roll the dough",
    "spread the sauce on the base", "top with cheese", "blend until smooth",
    "repeat with the rest of the dough", "turn it over", "heat oil in a wok",
    "pour the mixture into the mold", "place the tray in the oven", "chill in the fridge",
    "combine flour sugar and salt", "knead for a few minutes", "slice the tomatoes thinly",
]


@pytest.fixture(scope="module")
def nlp() -> object:
    return load_parser()


@pytest.mark.parametrize(("step", "filler", "why"), PAIRS)
def test_keeps_the_step_and_rejects_its_filler_twin(nlp: object, step: str, filler: str,
                                                    why: str) -> None:
    assert reject_reasons([step, filler], nlp) == ["", why]


def test_youcook2_style_steps_are_all_kept(nlp: object) -> None:
    why = reject_reasons(YOUCOOK2_STYLE, nlp)
    assert [t for t, w in zip(YOUCOOK2_STYLE, why, strict=True) if w] == []


def test_every_reason_is_named_and_empty_input_is_fine(nlp: object) -> None:
    assert reject_reasons([], nlp) == []
    why = reject_reasons([p[1] for p in PAIRS], nlp)
    assert set(why) == set(REASONS)  # each reason is reachable, none is made up


class CountingParser:
    """The real parser, counting its ``pipe`` calls; the first call holds the parser until
    it is released, so the other threads' requests are surely waiting by then."""

    def __init__(self, nlp: object) -> None:
        self.nlp, self.sizes = nlp, []
        self.release = threading.Event()

    def pipe(self, texts: list[str], batch_size: int = 256) -> object:
        self.sizes.append(len(texts))
        if len(self.sizes) == 1:
            self.release.wait(timeout=30)
        return self.nlp.pipe(texts, batch_size=batch_size)  # type: ignore[attr-defined]


def test_threads_waiting_for_the_parser_are_parsed_in_one_batch(nlp: object) -> None:
    """Each thread gets its own verdicts, as when alone; those that waited share one call."""
    from howtocap.caption import filler

    texts = [[p[0], p[1]] for p in PAIRS[:8]]
    alone = [reject_reasons(t, nlp) for t in texts]
    counting = CountingParser(nlp)
    got: dict[int, list[str]] = {}

    def call(i: int) -> None:
        got[i] = reject_reasons(texts[i], counting)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    threads[0].start()
    deadline = time.monotonic() + 30
    while not counting.sizes and time.monotonic() < deadline:  # the first holds the parser
        time.sleep(0.005)
    for t in threads[1:]:
        t.start()
    while len(filler._COMBINE._waiting) < len(texts) - 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    counting.release.set()
    for t in threads:
        t.join(timeout=60)
    assert [got[i] for i in range(len(texts))] == alone
    assert counting.sizes == [2, 2 * (len(texts) - 1)]


SUBS = pd.DataFrame([(0.0, 1.0, "so now crack the eggs into the bowl"),
                     (1.0, 2.0, "so yeah let's see"), (2.0, 3.0, "whisk until smooth"),
                     (3.0, 4.0, "take your time")], columns=["start", "end", "text"])
REPLY = ("0s: Crack the eggs into the bowl.\n1s: So yeah, let's see.\n"
         "2s: Whisk until smooth.\n3s: Take your time.")


def test_rejected_column_holds_the_reason_and_keep_fillers_keeps_all(nlp: object) -> None:
    df, stats = caption_video("eggs", SUBS, Scripted(REPLY), nlp=nlp)
    assert df["rejected"].tolist() == ["", "filler", "", "time"]  # every row stays
    assert stats.rejected == {"filler": 1, "time": 1}
    df, stats = caption_video("eggs", SUBS, Scripted(REPLY),
                              CaptionConfig(reject_fillers=False), nlp=nlp)
    assert len(df) == 4 and (df["rejected"] == "").all() and stats.rejected == {}


def test_fingerprint_changes_with_the_setting() -> None:
    fps = [CaptionStage(LLMOptions(), CaptionConfig(reject_fillers=r),
                        model=Scripted(REPLY)).fingerprint() for r in (True, False)]
    assert fps[0]["caption"]["reject_fillers"] is True
    assert fps[0] != fps[1]


def test_fingerprint_changes_when_the_rules_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """New filler rules or chatter patterns keep or drop other captions: a run made with the
    old ones must not be resumed as if nothing changed."""
    import howtocap.caption.chatter as chatter
    import howtocap.caption.filler as filler

    def fp() -> dict:
        return CaptionStage(LLMOptions(), CaptionConfig(), model=Scripted(REPLY)).fingerprint()

    before = fp()
    monkeypatch.setattr(filler, "RULES_VERSION", filler.RULES_VERSION + 1)
    after_filler = fp()
    monkeypatch.setattr(chatter, "RULES_ID", "0" * 12)
    after_chatter = fp()
    assert before != after_filler != after_chatter


@pytest.mark.slow
def test_align_export_and_old_tables_ignore_rejected_rows(tmp_path: Path,
                                                          base_video: Path) -> None:
    """Rejected rows are not aligned or exported; a captions shard from before the column
    (no ``rejected``) aligns whole."""
    rd = RunDir(tmp_path / "run", shard_size=1)  # a video a shard: "new" 0, "old" 1
    rd.record_videos([VideoItem("new", base_video), VideoItem("old", base_video)])
    new, _ = caption_video("new", SUBS, Scripted(REPLY), nlp=load_parser())
    old = new.drop(columns="rejected").assign(video_id="old")
    write_rows(rd, "captions", pd.concat([new, old], ignore_index=True))
    old.to_parquet(rd.shard_path("captions", 1), index=False)  # as an old run wrote it
    align_run(rd, [], AlignConfig(keep_all=True), encoders=[TinyEncoder()], progress=False)
    al = rd.table("aligned")
    got = {v: sorted(g["text"]) for v, g in al.groupby("video_id")}
    assert got == {"new": ["Crack the eggs into the bowl.", "Whisk until smooth."],
                   "old": sorted(old["text"])}
    assert "rejected" not in al.columns
    # the filter's reference holds every caption the LLM wrote: the rejection does not move
    # the bar for the others
    ref = json.loads((rd.root / "config" / "align_reference.json").read_text())["captions"]
    assert ["new", "So yeah, let's see."] in ref and len(ref) == 8
    caps = rd.table("captions")  # old rows: no reason (null) = kept
    assert caps.set_index("video_id").loc["old", "rejected"].isna().all()
    pairs, what = pairs_for_export(rd, "captions")
    assert what == "captions" and "Take your time." not in pairs.loc[
        pairs["video_id"] == "new", "text"].tolist() and len(pairs) == 6


@pytest.mark.slow
def test_keep_fillers_through_the_cli(tmp_path: Path, base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "cook", base_video, vtt([(0.5, 2.0, "now crack the eggs into the bowl"),
                                             (2.5, 3.0, "so yeah let's see"),
                                             (3.2, 3.8, "take your time")]))
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url, "--quiet")
        assert res.returncode == 0, res.stderr
        assert "rejected 2 captions that show nothing (filler 1, time 1)" in \
            " ".join(res.stderr.split())
        caps = pd.read_parquet(out / "captions")
        assert caps["rejected"].tolist() == ["", "filler", "time"]
        conf = json.loads((out / "config" / "caption.json").read_text())
        assert conf["rejected"] == {"filler": 1, "time": 1}
        assert conf["caption"]["reject_fillers"] is True
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url, "--quiet",
                      "--keep-fillers")
        assert res.returncode == 2 and "reject_fillers" in res.stderr
        assert "Traceback" not in res.stderr
        yaml = tmp_path / "c.yaml"
        yaml.write_text("keep-fillers: true\n")
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url, "--quiet",
                      "--config", str(yaml), "--redo")
        assert res.returncode == 0, res.stderr
    caps = pd.read_parquet(out / "captions")
    assert len(caps) == 3 and (caps["rejected"] == "").all()
    assert "rejected" not in res.stderr


def test_samples_with_labelled_fillers(tmp_path: Path) -> None:
    kw = {"n_videos": 2, "seed": 3, "audio": False, "subtitles": None, "size": 32,
          "fps": 2, "seconds_per_step": 1.0}
    plain = make_fixture_set(tmp_path / "a", chatter=1, **kw)
    mixed = make_fixture_set(tmp_path / "b", fillers=2, chatter=1, **kw)
    fillers = {f[0] for f in FILLER_LINES}
    for p, m in zip(plain, mixed, strict=True):
        kinds = [s.kind for s in m.steps]
        assert kinds.count("filler") == 2 and kinds.count("chatter") == 1
        # the steps do not move when fillers are added
        assert [s.narration for s in m.steps if s.kind == "step"] == \
            [s.narration for s in p.steps if s.kind == "step"]
        for i, s in enumerate(m.steps):
            if s.kind == "filler":
                assert s.narration in fillers and i > 0
                assert s.image == m.steps[i - 1].image  # spoken over the step's photo


@pytest.fixture(scope="module")
def full_verdicts() -> tuple[list[str], list[str], object]:
    """The verdicts of spaCy's whole shipped pipeline (nothing disabled), each text parsed on
    its own without the verdict table: what the rules mean, the reference for the fast path."""
    from howtocap.caption.filler import verdict
    from howtocap.errors import HowtocapError
    from howtocap.nlp import load_spacy

    texts = labelled_texts()
    try:
        full = load_spacy(whole=True)
    except HowtocapError:
        pytest.skip("no spaCy English model")
    return texts, [verdict(doc) for doc in full.pipe(texts, batch_size=1)], full


@pytest.mark.slow
def test_fast_path_gives_the_full_pipelines_verdicts(nlp: object, full_verdicts: tuple
                                                     ) -> None:
    """The parser ``load_parser`` loads (only the components the rules read) and the verdict
    table give every labelled text the verdict of the whole pipeline: a component the rules
    need dropped from ``nlp.load_spacy``, or a stale or mixed-up table entry, fails here."""
    texts, want, _ = full_verdicts
    assert len(texts) > 800 and set(want) >= {*REASONS, ""}  # all reasons and kept
    first = reject_reasons(texts, nlp)
    assert first == want
    again = reject_reasons(list(reversed(texts)), nlp)  # answered from the table now
    assert again == list(reversed(want))
    assert [reject_reasons([t], nlp)[0] for t in texts[:50]] == want[:50]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*W108")  # the lemmatizer's "no POS": expected here
@pytest.mark.parametrize("component", ["parser", "tagger", "attribute_ruler", "lemmatizer"])
def test_every_loaded_component_decides_some_verdict(full_verdicts: tuple, component: str
                                                     ) -> None:
    """The reference above is sensitive to each component the fast path keeps: without any
    one of them some labelled text gets another verdict (so none could be dropped)."""
    from howtocap.caption.filler import verdict

    texts, want, full = full_verdicts
    with full.select_pipes(disable=[component]):  # type: ignore[attr-defined]
        got = [verdict(doc) for doc in full.pipe(texts)]  # type: ignore[attr-defined]
    assert got != want


def test_verdict_table_is_per_parser_and_bounded(nlp: object, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """A text another parser judged is parsed again by this one; the table keeps at most its
    size, the oldest leaving first, and a dropped text is parsed again when it comes back."""
    from howtocap.caption import filler

    monkeypatch.setattr(filler, "_VERDICTS", filler._Verdicts(size=3))
    counting = CountingParser(nlp)
    counting.release.set()
    assert reject_reasons(["Stir.", "So yeah.", "Stir."], nlp) == ["", "filler", ""]
    assert reject_reasons(["Stir.", "So yeah."], counting) == ["", "filler"]
    assert counting.sizes == [2]  # repeated texts parsed once; nlp's table not used
    assert reject_reasons(["So yeah.", "Serve.", "Take your time."], counting) == \
        ["filler", "", "time"]
    assert counting.sizes == [2, 2]
    assert reject_reasons(["Stir."], counting) == [""]  # the oldest, dropped at size 3
    assert counting.sizes == [2, 2, 1]
    assert reject_reasons(["Serve.", "Take your time."], counting) == ["", "time"]
    assert counting.sizes == [2, 2, 1]


@pytest.fixture(scope="module")
def pool() -> object:
    """One parser process for the module (it loads spaCy without torch: about a second)."""
    from howtocap.caption.filler import ParserPool
    from howtocap.errors import HowtocapError

    try:
        load_parser()
    except HowtocapError:
        pytest.skip("no spaCy English model")
    p = ParserPool(1)
    yield p
    p.close()


@pytest.mark.slow
def test_parser_processes_give_the_full_pipelines_verdicts(pool: object, full_verdicts: tuple
                                                            ) -> None:
    """The filler test in worker processes (``--parse-workers``) judges every labelled text as
    the whole pipeline does in process, also when many threads ask at once."""
    from concurrent.futures import ThreadPoolExecutor

    texts, want, _ = full_verdicts
    assert reject_reasons(texts, pool) == want
    chunks = [texts[i:i + 37] for i in range(0, len(texts), 37)]
    with ThreadPoolExecutor(8) as ex:  # ... its own table, then each chunk again in a thread
        got = list(ex.map(lambda c: pool.verdicts(c), chunks))  # type: ignore[attr-defined]
    assert [v for c in got for v in c] == want


def test_parser_pool_errors_are_one_line(tmp_path: Path, pool: object) -> None:
    """A model that cannot load is named before any video; a worker that dies mid-run stops
    the run (ServiceUnavailable: nothing marked failed) with its exit code, never hangs it."""
    from howtocap.caption.filler import ParserPool
    from howtocap.errors import HowtocapError, ServiceUnavailable

    with pytest.raises(HowtocapError, match="no spaCy English model could be loaded"):
        ParserPool(1, name=str(tmp_path / "no-such-model"))
    two = ParserPool(2)
    try:
        assert two.verdicts(["Stir.", "Take your time."]) == ["", "time"]
        for w in two._all:  # type: ignore[attr-defined]
            w.proc.kill()
        with pytest.raises(ServiceUnavailable, match=r"parser process exited \(code -9\)"):
            two.verdicts(["Whisk the eggs."])
    finally:
        two.close()


def test_parser_pool_does_not_rerun_the_callers_script(tmp_path: Path) -> None:
    """A user's script without a ``__main__`` guard starts the pool once: its workers are
    ``python -m`` children, not ``multiprocessing`` spawns that would run the script again."""
    import subprocess
    import sys

    script = tmp_path / "mine.py"
    marks = tmp_path / "marks.txt"
    script.write_text(
        "from howtocap.caption.filler import ParserPool, reject_reasons\n"
        f"open({str(marks)!r}, 'a').write('ran\\n')\n"
        "p = ParserPool(2)\n"
        "print(reject_reasons(['Okay, hang on a second.', 'Dice the onion.'], p))\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=False)
    if "no spaCy English model" in res.stderr:
        pytest.skip("no spaCy English model")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "['filler', '']"
    assert marks.read_text() == "ran\n"


@pytest.mark.slow
def test_caption_stage_parses_in_workers_over_http(tmp_path: Path, base_video: Path) -> None:
    """``--parse-workers`` changes where captions are parsed, never a verdict: the same run
    directory's captions with 0 (in the driver) and 2 workers, and the setting is not part of
    the fingerprint (changing it on a resumed run is allowed)."""
    vids = tmp_path / "videos"
    add_video(vids, "cook", base_video, vtt([(0.5, 2.0, "now crack the eggs into the bowl"),
                                             (2.5, 3.0, "so yeah let's see"),
                                             (3.2, 3.8, "take your time")]))
    tables = []
    with chat_server() as srv:
        for workers in ("0", "2"):
            out = tmp_path / f"run{workers}"
            res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                          "--quiet", "--parse-workers", workers)
            assert res.returncode == 0, res.stderr
            tables.append(pd.read_parquet(out / "captions"))
        res = run_cli("caption", str(vids), "--out", str(tmp_path / "run0"), "--llm-url",
                      srv.url, "--quiet", "--parse-workers", "1")
        assert res.returncode == 0 and "1 already done" in " ".join(res.stderr.split())
    assert tables[0]["rejected"].tolist() == ["", "filler", "time"]
    pd.testing.assert_frame_equal(tables[0], tables[1])
    stage = CaptionStage(LLMOptions(url=["http://127.0.0.1:9/v1"]), CaptionConfig())
    assert stage.fingerprint() == CaptionStage(LLMOptions(url=["http://127.0.0.1:9/v1"]),
                                               CaptionConfig(), parse_workers=3).fingerprint()


def test_default_parse_workers_follow_the_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --llm-url and no --parse-workers the stage parses in worker processes (one per
    core, up to 8); with an LLM object in the process, or --parse-workers 0, in place."""
    from howtocap.caption import filler

    try:
        load_parser()
    except Exception:  # noqa: BLE001 - no model here: nothing to start
        pytest.skip("no spaCy English model")
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2}, raising=False)
    assert filler.default_parse_workers(remote_llm=True) == 3
    assert filler.default_parse_workers(remote_llm=False) == 0
    monkeypatch.setattr(filler, "default_parse_workers",
                        lambda remote_llm: 1 if remote_llm else 0)
    url = LLMOptions(url=["http://127.0.0.1:9/v1"])
    remote = CaptionStage(url, CaptionConfig())
    remote.setup()
    pool = remote._nlp
    try:
        assert isinstance(pool, filler.ParserPool) and pool.workers == 1
        assert all(w.proc.poll() is None for w in pool._all)
    finally:
        remote.release()  # caption_run's end: the workers stop, a later setup starts new ones
    assert all(w.proc.poll() is not None for w in pool._all)
    remote.setup()
    try:
        assert isinstance(remote._nlp, filler.ParserPool) and remote._nlp is not pool
    finally:
        remote.release()
    given = CaptionStage(url, CaptionConfig(), model=object())
    given.setup()
    assert not isinstance(given._nlp, filler.ParserPool)
    zero = CaptionStage(url, CaptionConfig(), parse_workers=0)
    zero.setup()
    assert not isinstance(zero._nlp, filler.ParserPool)
