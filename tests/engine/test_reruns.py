"""What a re-run redoes, as docs/runs.md states it, through the CLI against a real chat server:
``--force`` redoes the given videos with the same settings but never bypasses the settings
check; a video that failed because the LLM server failed it (cause ``service``) is redone by a
plain re-run, a broken video file (cause ``bad input``) only with ``--retry-failed``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from howtocap.engine.rundir import RunDir
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, add_video, run_cli


def captions(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "captions")


def status(run: Path) -> pd.DataFrame:
    return RunDir(run, create=False).table("status").set_index(["stage", "video_id"])


@pytest.mark.slow
def test_force_redoes_the_given_videos_but_never_other_settings(tmp_path: Path,
                                                                base_video: Path) -> None:
    vids, run = tmp_path / "videos", tmp_path / "run"
    add_video(vids, "a", base_video, GOOD)
    add_video(vids, "b", base_video, GOOD.replace("eggs", "onions"))
    with chat_server() as srv:
        args = ["caption", str(vids), "--out", str(run), "--llm-url", srv.url,
                "--parse-workers", "0", "--quiet"]
        assert run_cli(*args).returncode == 0
        first, n = captions(run), srv.requests
        assert n == 2 and sorted(first["video_id"].unique()) == ["a", "b"]
        res = run_cli(*args)  # a plain re-run: nothing to do
        assert res.returncode == 0 and srv.requests == n
        # --force with the same settings: every given video is captioned again, same result
        res = run_cli(*args, "--force")
        assert res.returncode == 0, res.stderr
        assert srv.requests == 2 * n and "caption: 2 done" in res.stderr
        pd.testing.assert_frame_equal(captions(run), first)
        # --force only redoes the videos it is given
        res = run_cli("caption", str(vids / "a.mp4"), "--out", str(run), "--llm-url", srv.url,
                      "--parse-workers", "0", "--quiet", "--force")
        assert res.returncode == 0, res.stderr
        assert srv.requests == 2 * n + 1 and "caption: 1 done" in res.stderr
        # --force with other settings is refused like any re-run: one line, nothing written
        kept = {p: p.read_bytes() for p in (*RunDir(run).table_files("captions"),
                                            run / "config" / "caption.json")}
        res = run_cli(*args, "--force", "--block-words", "50")
        assert res.returncode == 2 and "Traceback" not in res.stderr
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "made with other settings" in errors[0], res.stderr
        assert "caption.block_words 200 -> 50" in res.stderr
        assert srv.requests == 2 * n + 1
        assert all(p.read_bytes() == data for p, data in kept.items())
    assert json.loads((run / "config" / "caption.json").read_text())["caption"][
        "block_words"] == 200


@pytest.mark.slow
def test_service_failures_are_redone_by_a_plain_rerun_bad_input_is_not(
        tmp_path: Path, base_video: Path) -> None:
    vids, run = tmp_path / "videos", tmp_path / "run"
    add_video(vids, "good", base_video, GOOD)
    add_video(vids, "flaky", base_video, GOOD.replace("eggs", "FLAKY eggs"))
    (vids / "broken.mp4").write_bytes(b"this is not a video at all" * 100)
    (vids / "broken.vtt").write_text(GOOD)
    with chat_server(fail_when="FLAKY") as srv:  # the server 500s every request of 'flaky'
        args = ["caption", str(vids), "--out", str(run), "--llm-url", srv.url,
                "--parse-workers", "0", "--quiet", "--llm-retries", "1"]
        res = run_cli(*args)
        assert res.returncode == 1, res.stderr  # some videos failed, the rest finished
        st = status(run)
        assert st.loc[("caption", "flaky"), "cause"] == "service"
        assert st.loc[("subtitles", "broken"), "cause"] == "bad input"
        assert st.loc[("caption", "good"), "status"] == "ok"
        assert set(captions(run)["video_id"]) == {"good"}
        n = srv.requests
        assert n == 1 + 2  # good's block once; flaky's block twice (1 retry)

        srv.fail_when = None  # the server is fine again
        res = run_cli(*args)  # a plain re-run: no --retry-failed
        assert res.returncode == 1, res.stderr  # 'broken' is still failed (before)
        assert srv.requests == n + 1  # only flaky's block: good is done, broken not retried
        st = status(run)
        assert st.loc[("caption", "flaky"), "status"] == "ok"
        assert st.loc[("subtitles", "broken"), "status"] != "ok"
        assert st.loc[("subtitles", "broken"), "attempts"] == 1  # not tried again
        assert set(captions(run)["video_id"]) == {"good", "flaky"}

        res = run_cli(*args, "--retry-failed")  # the broken file is tried again, and fails
        assert res.returncode == 1 and srv.requests == n + 1
        assert status(run).loc[("subtitles", "broken"), "attempts"] == 2
