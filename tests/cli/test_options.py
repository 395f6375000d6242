"""Each step option is declared once, in its config model: ``caption``, ``align`` and ``run``
and their ``--config`` YAML are generated from it (``cli.options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel, Field
from typer.main import get_command
from typer.testing import CliRunner

from howtocap.align.config import AlignConfig
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.config import CaptionRunConfig
from howtocap.cli import Command, app
from howtocap.cli.common import ConfigOpt, user_errors
from howtocap.cli.options import model_options, settings_options
from howtocap.download.config import DownloadConfig
from howtocap.engine.options import BatchConfig, RunnerConfig
from tests.support.chat_server import chat_server
from tests.support.cli import run_cli
from tests.support.dumps import small_dump, write_source


class Toy(BaseModel):
    """A model no command uses: what the helper makes of a field, nothing else."""

    words: int = Field(7, ge=3, description="How many words.")
    ratio: float | None = Field(None, gt=0, le=1, description="A fraction.")
    drop: bool = Field(True, json_schema_extra={"flag": "--keep", "invert": True},
                       description="Keep them.")
    quiet_field: int = 5  # no description: not an option


@pytest.fixture
def toy() -> tuple[typer.Typer, dict[str, Any]]:
    def cmd(ctx: typer.Context, *, toy: Toy, config: ConfigOpt = None) -> None:
        got["toy"] = toy

    got: dict[str, Any] = {}
    one = typer.Typer()
    one.command("cmd", cls=Command)(user_errors(settings_options(toy=Toy)(cmd)))
    one.command("other")(lambda: None)
    return one, got


def test_a_fields_default_bounds_and_help_reach_help_and_the_config(toy: Any) -> None:
    one, got = toy
    res = CliRunner().invoke(one, ["cmd", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    line = next(x for x in res.output.splitlines() if "--words" in x)
    assert "How many words." in line and "x>=3" in line and "default: 7" in line
    assert "0<x<=1" in res.output and "--keep" in res.output and "--quiet-field" not in \
        res.output
    assert CliRunner().invoke(one, ["cmd"]).exit_code == 0
    assert got["toy"] == Toy()  # nothing typed: the model's defaults
    assert CliRunner().invoke(one, ["cmd", "--words", "4", "--keep"]).exit_code == 0
    assert (got["toy"].words, got["toy"].drop) == (4, False)


@pytest.mark.parametrize("args, flag", [(["--words", "2"], "--words"),
                                        (["--ratio", "0"], "--ratio"),
                                        (["--words", "many"], "--words")])
def test_a_bad_value_is_one_line_naming_the_flag(toy: Any, args: list[str], flag: str
                                                 ) -> None:
    one, got = toy
    res = CliRunner().invoke(one, ["cmd", *args])
    assert res.exit_code == 2 and not got
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and flag in lines[0], res.output


def test_yaml_has_a_key_per_field_and_refuses_an_unknown_one(toy: Any, tmp_path: Path
                                                             ) -> None:
    one, got = toy
    cfg = tmp_path / "c.yaml"
    cfg.write_text("words: 9\nratio: 0.5\nkeep: true\n")
    assert CliRunner().invoke(one, ["cmd", "--config", str(cfg)]).exit_code == 0
    assert (got["toy"].words, got["toy"].ratio, got["toy"].drop) == (9, 0.5, False)
    # a flag typed wins over the file; the file's bad value is refused like a flag's
    assert CliRunner().invoke(one, ["cmd", "--config", str(cfg), "--words", "3"]).exit_code == 0
    assert got["toy"].words == 3
    cfg.write_text("words: 1\n")
    res = CliRunner().invoke(one, ["cmd", "--config", str(cfg)])
    assert res.exit_code == 2 and "--words" in res.output
    cfg.write_text("wrods: 9\n")
    res = CliRunner().invoke(one, ["cmd", "--config", str(cfg)])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1
    assert str(cfg) in res.output and "'wrods'" in res.output


def test_the_commands_defaults_are_the_models() -> None:
    """Every generated option of caption / align / run has the default its field declares
    (inverted flags the opposite), and a YAML key is accepted for each of them."""
    cmds = get_command(app).commands
    for name, models in (("caption", [CaptionRunConfig]), ("align", [AlignConfig]),
                         ("run", [CaptionRunConfig, AlignConfig])):
        params = {p.name: p for p in cmds[name].params}
        for model in models:
            opts = list(model_options(model))
            assert opts
            for opt in opts:
                default = params[opt.param].default
                assert (default or None) == (opt.default or None), (name, opt.flag)
    assert params["block_words"].default == CaptionConfig().block_words
    assert params["offset_seconds"].default == AlignConfig().offset_seconds


@pytest.mark.slow
def test_run_refuses_a_bound_from_the_model_in_one_line(tmp_path: Path) -> None:
    """``--block-words 0``: CaptionConfig's ``ge=1`` (no copy in the CLI), one red line."""
    src = write_source("caption.json", tmp_path / "src", small_dump(1))
    res = run_cli("run", "--subtitles", str(src), "--out", str(tmp_path / "r"),
                  "--block-words", "0")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: --block-words: Input should be greater than or equal to 1"]
    assert not (tmp_path / "r").exists()


def test_two_seeds_reach_their_two_consumers(tmp_path: Path, monkeypatch: Any) -> None:
    """``run --llm-seed 7 --align-seed 3``: the LLM's sampling seed and align's sampling
    seed, never each other's (one ``--seed`` set both)."""
    import howtocap.pipeline.run as pipeline

    seen: dict[str, Any] = {}
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **kw: seen.update(kw) or [])
    monkeypatch.setattr("howtocap.cli.run.print_align_result", lambda *a: None)
    monkeypatch.setattr("howtocap.cli.run.show_captions", lambda *a, **kw: None)
    monkeypatch.setattr("howtocap.cli.run.report_rejected", lambda *a: None)
    res = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "r"), "--llm-seed", "7",
                                   "--align-seed", "3", "--keep-chatter"])
    assert res.exit_code == 0, res.output
    assert seen["caption"].caption.generation.seed == 7 and seen["align"].seed == 3
    assert not seen["caption"].caption.drop_chatter and not seen["align"].drop_chatter
    assert "--seed" not in {o for p in get_command(app).commands["run"].params for o in p.opts}


@pytest.mark.slow
def test_the_llm_seed_is_sent_to_the_server(tmp_path: Path) -> None:
    data = small_dump(2)
    src = write_source("caption.json", tmp_path / "src", data)
    with chat_server() as srv:
        res = run_cli("caption", "--subtitles", str(src), "--out", str(tmp_path / "run"),
                      "--llm-url", srv.url, "--parse-workers", "0", "--llm-seed", "7", "--quiet")
    assert res.returncode == 0, res.stderr
    assert srv.bodies and {b.get("seed") for b in srv.bodies} == {7}


def test_every_stage_commands_runner_flags_are_the_models() -> None:
    """A command that runs stages (it has ``--runner``) declares no runner or batching flag of
    its own: each one's names, default and help are ``RunnerConfig``'s / ``BatchConfig``'s
    (download's ``--workers`` is its downloads', ``DownloadConfig``'s)."""
    cmds = get_command(app).commands
    stage_cmds = {n: c for n, c in cmds.items() if "runner" in {p.name for p in c.params}}
    assert {"caption", "align", "run", "shots", "signals", "framecaps", "download",
            "frames"} <= set(stage_cmds)
    runner_opts = {o.param: o for o in model_options(RunnerConfig)}
    batch_opts = {o.param: o for o in model_options(BatchConfig)}
    for name, cmd in stage_cmds.items():
        params = {p.name: p for p in cmd.params}
        expected = dict(runner_opts)
        if "batch_seconds" in params:  # frames' --batch-size is its encoder's, not a chunk's
            expected |= batch_opts
        if name == "download":
            expected["workers"] = next(o for o in model_options(DownloadConfig)
                                       if o.param == "workers")
        for param, opt in expected.items():
            if param not in params:  # a flag the command does not take (frames: no retries)
                continue
            p = params[param]
            assert p.opts == [opt.flag], (name, param)
            assert (p.help or "").startswith(opt.help), (name, param)
            assert (p.default or None) == (opt.default or None), (name, param)
        assert {"workers", "processes", "shard", "redo", "quiet"} <= set(params), name
    assert cmds["shots"].params[-1].secondary_opts == ["--no-quiet"]
    redo = next(p for p in cmds["caption"].params if p.name == "redo")
    assert redo.secondary_opts == []  # `--redo` alone, as before
    frames = {p.name for p in cmds["frames"].params}
    assert "retry_failed" not in frames and "batch_seconds" not in frames
    assert "shard_size" not in {p.name for p in cmds["align"].params}


@pytest.mark.parametrize("cmd", ["shots", "caption", "frames"])
def test_processes_0_is_one_line(tmp_path: Path, cmd: str) -> None:
    out = tmp_path / "r"
    where = [str(out)] if cmd == "shots" else (["--out", str(out)] + (
        [str(tmp_path)] if cmd == "frames" else []))
    res = CliRunner().invoke(app, [cmd, *where, "--processes", "0"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: --processes: Input should be greater than or equal to 1"], res.output
    assert not out.exists()


def test_the_runner_flags_and_their_yaml_reach_the_runner(tmp_path: Path, monkeypatch: Any
                                                          ) -> None:
    """``--processes`` / ``--workers`` (typed or from ``--config``) build the runner;
    ``--shard`` and the batching flags reach the step."""
    import howtocap.caption.run as caption_run

    seen: dict[str, Any] = {}
    monkeypatch.setattr(caption_run, "caption_run", lambda *a, **kw: seen.update(kw) or [])
    monkeypatch.setattr("howtocap.cli.caption.show_captions", lambda *a, **kw: None)
    monkeypatch.setattr("howtocap.cli.caption.report_rejected", lambda *a: None)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("processes: 2\nworkers: 3\nbatch_seconds: 5\n")
    res = CliRunner().invoke(app, ["caption", "--out", str(tmp_path / "r"), "--config",
                                   str(cfg), "--workers", "4", "--shard", "1/2",
                                   "--batch-size", "7", "--retry-failed"])
    assert res.exit_code == 0, res.output
    assert (seen["runner"].processes, seen["runner"].workers) == (2, 4)  # typed wins
    assert (seen["shard"].index, seen["shard"].count) == (1, 2)
    assert (seen["batching"].batch_size, seen["batching"].batch_seconds) == (7, 5)
    assert seen["retry_failed"] and not seen["redo"] and seen["progress"]
    assert seen["max_attempts"] == RunnerConfig().max_attempts
