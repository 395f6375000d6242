"""Property-based fuzzing of every reader of user input (Hypothesis; targets in
``tests/support/fuzz_targets.py``): each returns a valid result or raises the project's one-line
error, never anything else. A modest number of examples here;
``benchmarks/robustness/bench_fuzz.py`` runs thousands. Crashes found this way are pinned below as
plain regression tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from howtocap.errors import HowtocapError
from tests.support.fuzz_targets import TARGETS, Tally

FAST = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def make_test(name: str) -> Any:
    strategy, fn = TARGETS[name]

    @FAST
    @given(strategy)
    def test(case: Any) -> None:
        Tally().run(fn, case, keep_going=False)

    return test


@pytest.mark.parametrize("name", list(TARGETS))
def test_reader_gives_a_result_or_one_line(name: str) -> None:
    make_test(name)()


def test_the_tally_catches_a_crash() -> None:
    """The harness itself can fail: a reader raising a foreign error is a crash."""
    def reader(case: int) -> None:
        if case == 1:
            raise KeyError("boom")
        if case == 2:
            raise HowtocapError("a\nb")
        if case == 3:
            raise HowtocapError("one clear line")

    tally = Tally()
    for case in range(4):
        tally.run(reader, case, keep_going=True)
    assert tally.cases == 4 and tally.one_line_errors == 2 and len(tally.crashes) == 2
    with pytest.raises(KeyError):
        Tally().run(reader, 1, keep_going=False)


def test_a_crash_in_a_reader_is_not_hidden_by_a_later_one_line_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``ValueError`` planted in ``resolve_inputs`` on a non-UTF-8 manifest is a crash, even
    though reading the same bytes as an ``--ids`` list then fails with a one-line error (the
    harness once let that error replace the crash)."""
    import howtocap.io.inputs as inputs

    real = inputs.resolve_inputs

    def planted(paths: list[Any]) -> Any:
        data = Path(paths[0]).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("planted") from None
        return real(paths)

    monkeypatch.setattr(inputs, "resolve_inputs", planted)
    _, run_manifest = TARGETS["manifests + --ids lists"]
    tally = Tally()
    tally.run(run_manifest, b"video_id,video_path\nv1,a.mp4\n", keep_going=True)
    tally.run(run_manifest, b"video_id,video_path\n\xff\xfe,\x80.mp4\n", keep_going=True)
    assert tally.cases == 2 and len(tally.crashes) == 1, tally.crashes
    assert tally.crashes[0].startswith("ValueError: planted")
    with pytest.raises(ValueError, match="planted"):
        Tally().run(run_manifest, b"video_id,video_path\n\xff,x\n", keep_going=False)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- crashes the fuzzer found, pinned ------------------------------------------------------------

def test_a_config_that_is_not_utf8_is_one_line_and_utf16_is_read(tmp_path: Path) -> None:
    """Was a UnicodeDecodeError traceback (``Path.read_text`` before YAML saw the bytes)."""
    import click

    from howtocap.cli.common import load_yaml_config

    ctx = click.Context(click.Command("caption"))
    values = {"config": None, "block_words": 200}
    got = load_yaml_config(ctx, write(tmp_path, "a.yaml", "block_words: 50\n".encode("utf-16")),
                           values)
    assert got == {"config": None, "block_words": 50}
    bad = write(tmp_path, "b.yaml", b"block_words: \xff\xfe50\n")
    with pytest.raises(HowtocapError, match=r"b\.yaml: cannot read config") as exc:
        load_yaml_config(ctx, bad, values)
    assert "\n" not in str(exc.value)


def test_a_manifest_path_with_a_nul_byte_is_one_line(tmp_path: Path) -> None:
    """Was ``ValueError: embedded null byte`` from ``Path.resolve``."""
    from howtocap.io.inputs import resolve_inputs

    bad = write(tmp_path, "m.csv", b"video_id,video_path\nv1,ok.mp4\nv2,a\x00b.mp4\n")
    with pytest.raises(HowtocapError, match=r"m\.csv: line 3: a path holds a NUL byte"):
        resolve_inputs([bad])


def test_a_template_name_with_a_nul_byte_is_one_line() -> None:
    """Was ``ValueError: embedded null byte`` from reading the 'file' it names."""
    from howtocap.caption.prompt import resolve_template

    with pytest.raises(HowtocapError, match="cannot read prompt template"):
        resolve_template("my\x00template.txt")


@pytest.mark.parametrize("ann", [
    {"segment": ["a", 5], "sentence": "crack the eggs"},       # was ValueError from float()
    {"segment": {"0": 1, "5": 2}, "sentence": "crack the eggs"},
    {"segment": [float("nan"), 5], "sentence": "crack the eggs"},  # was a NaN clip
    {"segment": [0, 5], "sentence": "  "},                      # was an empty query
    "not an annotation",                                          # was TypeError
])
def test_a_bad_youcook2_annotation_is_one_line(tmp_path: Path, ann: Any) -> None:
    import json

    from howtocap.evaluate.benchmarks import read_youcook2

    path = write(tmp_path, "yc2.json", json.dumps({"database": {"GLd3aX16zBg": {
        "subset": "validation", "annotations": [ann]}}}).encode())
    with pytest.raises(HowtocapError, match=r"yc2\.json: database\['GLd3aX16zBg'\]"):
        read_youcook2(path, None)


def test_a_blank_youcook2_video_id_is_one_line(tmp_path: Path) -> None:
    """Was a clip of video ' ' (lost when the three YouCook2 readers were merged)."""
    import json

    from howtocap.evaluate.benchmarks import read_youcook2

    path = write(tmp_path, "yc2.json", json.dumps({"database": {" ": {
        "subset": "validation", "annotations": [{"segment": [0, 5], "sentence": "x"}]}}}).encode())
    with pytest.raises(HowtocapError, match=r"yc2\.json: database\[' '\].*must not be blank"):
        read_youcook2(path, None)


@pytest.mark.parametrize("row,problem", [
    ("v1,a\x00b.mp4,crack eggs,0,5", "a path holds a NUL byte"),   # was ValueError
    ("v1,,crack eggs,nan,5", "start must be seconds"),              # was a NaN clip
    ("v1,,crack eggs,0,inf", "end must be seconds"),
])
def test_a_bad_eval_csv_row_is_one_line(tmp_path: Path, row: str, problem: str) -> None:
    from howtocap.evaluate.benchmarks import read_csv

    path = write(tmp_path, "mine.csv", f"video_id,video_path,caption,start,end\n{row}\n".encode())
    with pytest.raises(HowtocapError, match=rf"mine\.csv: line 2: {problem}"):
        read_csv(path, None)


@pytest.mark.parametrize("row,problem", [
    ("v1,a\x00b.mp4,crack eggs,0,5", "a path holds a NUL byte"),
    ("v1,v.mp4,crack eggs,0,inf", "start/end must be numbers"),     # was a clip ending at inf
    (",v.mp4,crack eggs,0,8", "empty video_id"),                    # was a clip of video ''
])
def test_a_bad_training_pair_is_one_line(tmp_path: Path, row: str, problem: str) -> None:
    from howtocap.io.pairs import read_pairs

    path = write(tmp_path, "pairs.csv", f"video_id,video_path,caption,start,end\n{row}\n".encode())
    with pytest.raises(HowtocapError, match=rf"pairs\.csv: line 2: {problem}"):
        read_pairs(path)


@pytest.mark.parametrize("pkl", [b"\x80\x04K", b"\x80\x04}\x94(X\x01\x00\x00\x00v\x94K\x05u.",
                                 b"\x80\x04\x95\x10"])
def test_a_damaged_msvd_pickle_is_one_line(tmp_path: Path, pkl: bytes) -> None:
    """Damaged bytes (any exception type from the unpickler) or captions that are not a list
    (was TypeError) in raw-captions.pkl."""
    from howtocap.evaluate.benchmarks import read_msvd

    write(tmp_path, "test_list.txt", b"v\n")
    write(tmp_path, "raw-captions.pkl", pkl)
    with pytest.raises(HowtocapError, match=r"raw-captions\.pkl: "):
        read_msvd(tmp_path / "test_list.txt", None)


@pytest.mark.parametrize("ann,problem", [
    ({"id": "x", "segment": [0, 5], "sentence": "whisk"}, r"\['id'\]: Input should be"),
    ({"id": 0, "segment": [0, float("inf")], "sentence": "whisk"}, "should be a finite number"),
])
def test_a_bad_tdr_annotation_is_one_line(tmp_path: Path, ann: Any, problem: str) -> None:
    import json

    from howtocap.tdr.data import read_annotations

    path = write(tmp_path, "ann.json", json.dumps({"database": {"v": {
        "recipe_type": "113", "annotations": [ann]}}}).encode())
    where = r"ann\.json: database\['v'\]\['annotations'\]\[0\]"
    with pytest.raises(HowtocapError, match=rf"{where}.*{problem}"):
        read_annotations(path, key_objects=False)


@pytest.mark.parametrize("ref", ["", "..."])
def test_dvc_eval_with_references_that_tokenize_to_nothing_scores_zero(ref: str) -> None:
    """Was ``ValueError: max() arg is an empty sequence`` from pycocoevalcap's CIDEr."""
    import warnings

    from howtocap.dvc.evaluate import evaluate

    gt = {"v_a": {"duration": 60.0, "timestamps": [[0.0, 5.0]], "sentences": [ref]}}
    pred = {"results": {"v_a": [{"sentence": "crack the eggs", "timestamp": [0.0, 5.0]}]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate(pred, gt, meteor=False)
    assert res["scores"]["CIDEr"] == 0.0 and res["scores"]["Recall"] == 1.0


def test_config_keys_that_are_not_option_names_are_one_line(tmp_path: Path) -> None:
    """Found by the fuzzer: a YAML null or number key crashed ``--config`` with a traceback."""
    import click

    from howtocap.cli.common import load_yaml_config

    ctx = click.Context(click.Command("caption"))
    for text in ("?", "1: 2", "~: 3"):
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(text)
        with pytest.raises(HowtocapError, match=r"cfg.yaml: config keys must be option names"):
            load_yaml_config(ctx, cfg, {"config": None, "block_words": 200})
