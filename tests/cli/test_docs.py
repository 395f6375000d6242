"""docs/cli.md is the app's own reference, and every `howtocap … --flag` the docs show exists."""

from __future__ import annotations

import functools
import re
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.main import get_command

from tests.support.chat_server import chat_server
from tests.support.cli import run_cli
from tests.support.dumps import small_dump, write_source

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import render_docs  # noqa: E402

from howtocap.cli import app  # noqa: E402

CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
STOP = {"&&", "||", "|", ";", ">", "2>&1"}


def test_cli_reference_is_the_apps_own() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == render_docs.cli_reference(), \
        "docs/cli.md is stale: run python benchmarks/render_docs.py --cli"


def test_cli_reference_lists_every_command_and_flag() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = {head: body for head, body in re.findall(
        r"^#+ `howtocap ?([^`]*)`[^\n]*\n(.*?)(?=^#+ `howtocap|\Z)", page, re.S | re.M)}
    for path, cmd in walk(get_command(app)):
        body = sections[" ".join(path)]
        for param in cmd.params:
            for opt in param.opts + param.secondary_opts:
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", body), (path, opt)


def is_group(cmd: Any) -> bool:
    """Typer ships its own copy of click, so a group is whatever has subcommands."""
    return hasattr(cmd, "commands")


def walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, cmd)]
    if is_group(cmd):
        for name, sub in cmd.commands.items():
            found += walk(sub, (*path, name))
    return found


def invocations(text: str) -> list[list[str]]:
    """The argument lists after every ``howtocap`` in code blocks and inline code."""
    snippets = [m.replace("\\\n", " ") for m in CODE_BLOCK.findall(text)]
    prose = CODE_BLOCK.sub("", text)
    snippets += INLINE.findall(prose)
    found = []
    for snippet in snippets:
        for line in snippet.splitlines():
            line = line.split(" #", 1)[0]
            # `howtocap NAME` where NAME looks like a command (not `from howtocap import x`, not
            # prose such as "howtocap status, --retry-failed" inside a diagram)
            for m in re.finditer(r"(?:^|[\s(/])(?<!from )(?<!import )howtocap\s+"
                                 r"(?=[a-z][a-z0-9-]*(?:\s|$))", line):
                try:
                    words = shlex.split(line[m.end():], posix=True)
                except ValueError:
                    words = line[m.end():].split()
                args = []
                for w in words:
                    if w in STOP or w == "howtocap":
                        break
                    args.append(w)
                found.append(args)
    return found


@functools.cache
def root() -> Any:
    return get_command(app)


def unknown(args: list[str]) -> str | None:
    """What of ``howtocap ARGS`` the app does not have (a command or a flag), else None."""
    cmd: Any = root()
    rest = list(args)
    while is_group(cmd) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        if name not in cmd.commands:
            return f"command {name!r}"
        cmd = cmd.commands[name]
    if is_group(cmd):
        return None  # `howtocap tdr` alone: a group named in prose
    flags = {o for p in cmd.params for o in p.opts + p.secondary_opts} | {"--help"}
    for word in rest:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            if flag not in flags:
                return f"flag {flag} of {cmd.name!r}"
    return None


def test_run_takes_every_option_of_caption_and_align() -> None:
    """`run` has each option of `caption`, of `align` (both generated from their configs:
    caption's help on a shared name) and of `download`, with the same type and default;
    `--keep-media` is run's own (it deletes media once align used it)."""
    run = {p.name: p for p in root().commands["run"].params}
    for name in ("caption", "align", "download"):
        for p in root().commands[name].params:
            if p.name in ("run_dir", "inputs") or name == "download" and p.name == "workers":
                continue
            q = run[p.name]
            assert (q.opts, q.secondary_opts, q.default, q.multiple) == (
                p.opts, p.secondary_opts, p.default, p.multiple), (name, p.name)
            assert q.type_descriptor.annotation == p.type_descriptor.annotation, (name, p.name)
    # caption's help on the shared flags, align's on its own
    align = {p.name: p for p in root().commands["align"].params}
    assert run["fps"].help == align["fps"].help
    assert "Caption end" in run["clip_seconds"].help
    assert "keep_media" in run


def test_every_documented_invocation_exists() -> None:
    bad = []
    seen = 0
    for page in render_docs.doc_files():
        if page.name == "cli.md":
            continue
        for args in invocations(page.read_text(encoding="utf-8")):
            seen += 1
            problem = unknown(args)
            if problem:
                bad.append(f"{page.relative_to(ROOT)}: howtocap {' '.join(args)}: no {problem}")
    assert seen >= 50
    assert not bad, "\n".join(bad)


def test_the_invocation_checker_catches_what_does_not_exist() -> None:
    text = ("```bash\nhowtocap caption a.mp4 --out x --worker 2 && howtocap align x\n"
            "howtocap tdr train --annotations a.json \\\n    --made-up 1\n```\n"
            "Run `howtocap caption --subtitles s.json --out d` or `howtocap nosuch DIR`; "
            "`pip install 'howtocap[ray]'`; see howtocap/cli.py; (howtocap status, --redo).\n"
            "```python\nfrom howtocap import llm\n```\n")
    found = invocations(text)
    assert found == [["caption", "a.mp4", "--out", "x", "--worker", "2"], ["align", "x"],
                     ["tdr", "train", "--annotations", "a.json", "--made-up", "1"],
                     ["caption", "--subtitles", "s.json", "--out", "d"], ["nosuch", "DIR"]]
    assert [unknown(a) for a in found] == ["flag --worker of 'caption'", None,
                                           "flag --made-up of 'train'", None,
                                           "command 'nosuch'"]
    assert unknown(["caption", "--no-constrain", "--keep-chatter"]) is None


# -- the flags the README promised and the app now has ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("workers, expect", [("1", 1), ("3", 3), (None, 4)])
def test_caption_workers_bounds_the_videos_in_flight(tmp_path: Path, workers: str | None,
                                                     expect: int) -> None:
    """`--workers N` is the number of videos captioned at a time (without it: the
    `--concurrency` requests in flight), counted at the server: each video is one request."""
    data = small_dump(8)
    src = write_source("caption.json", tmp_path / "src", data)
    with chat_server(delay=1.0) as srv:
        peak = count_peak_requests(srv)
        extra = ["--workers", workers] if workers else []
        res = run_cli("caption", "--subtitles", str(src), "--out", str(tmp_path / "run"),
                      "--llm-url", srv.url, "--concurrency", "4", "--parse-workers", "0",
                      "--quiet", *extra)
    assert res.returncode == 0, res.stderr
    assert srv.requests == len(data)  # one block, so one request, per video
    assert peak["max"] <= expect  # never more than asked for
    assert peak["max"] > 1 if expect > 1 else peak["max"] == 1  # and really in parallel
    caps = pd.read_parquet(tmp_path / "run" / "captions")
    assert sorted(caps["video_id"].unique()) == sorted(data)


def count_peak_requests(srv: Any) -> dict[str, int]:
    """Record the most requests the server ever had in progress at once."""
    handler = srv.httpd.RequestHandlerClass
    original, original_send = handler.do_POST, handler._send
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def done(self: Any) -> None:
        # out of progress before the reply leaves: the client may send its next request
        # the moment it has this one's answer
        if getattr(self, "_counted", False):
            self._counted = False
            with lock:
                state["now"] -= 1

    def do_post(self: Any) -> None:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        self._counted = True
        try:
            original(self)
        finally:
            done(self)

    def send(self: Any, *args: Any, **kwargs: Any) -> None:
        done(self)
        original_send(self, *args, **kwargs)

    handler.do_POST = do_post
    handler._send = send
    return state


@pytest.mark.slow
def test_framecaps_workers_labels_every_video(tmp_path: Path) -> None:
    """`framecaps --workers 2` labels videos on two threads sharing the models: every video
    gets its frames' captions, as with one (the labels are checked in test_framecaps.py)."""
    from howtocap.samples import DEFAULT_STEPS, make_narrated_video

    videos = tmp_path / "videos"
    for i in range(3):
        make_narrated_video(videos, f"v{i}", DEFAULT_STEPS[i:i + 2], seconds_per_step=2.0, fps=5,
                            size=96, audio=False, subtitles=None)
    out = tmp_path / "run"
    res = run_cli("framecaps", str(videos), "--out", str(out), "--frames", "2",
                  "--workers", "2", "--quiet")
    assert res.returncode == 0, res.stderr
    assert "framecaps: 3 done" in res.stderr
    df = pd.read_parquet(out / "framecaps")
    assert df.groupby("video_id").size().to_dict() == {"v0": 2, "v1": 2, "v2": 2}
