"""Property-based fuzzing of every reader of user input (Hypothesis; targets in
``tests/fuzz_targets.py``): each returns a valid result or raises the project's one-line error,
never anything else. A modest number of examples here; ``benchmarks/bench_fuzz.py`` runs
thousands. Crashes found this way are pinned below as plain regression tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.fuzz_targets import TARGETS, Tally

from howtocap.errors import HowtocapError

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


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- crashes the fuzzer found, pinned ------------------------------------------------------------

def test_a_config_that_is_not_utf8_is_one_line_and_utf16_is_read(tmp_path: Path) -> None:
    """Was a UnicodeDecodeError traceback (``Path.read_text`` before YAML saw the bytes)."""
    import click

    from howtocap.cliutil import load_yaml_config

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
    from howtocap.llm.prompt import resolve_template

    with pytest.raises(HowtocapError, match="cannot read prompt template"):
        resolve_template("my\x00template.txt")
