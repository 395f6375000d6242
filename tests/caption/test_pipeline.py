"""`howtocap caption` end to end: bad inputs in one batch, resume, SIGKILL, export, sources."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from howtocap.engine.rundir import RunDir
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, add_video, run_cli, start_cli, vtt
from tests.support.llm import statuses
from tests.support.stages import committed


@pytest.mark.slow
def test_bad_inputs_are_reported_and_the_rest_completes(tmp_path: Path, base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "good_a", base_video, GOOD)
    add_video(vids, "good_b", base_video, GOOD.replace("eggs", "onions"))
    add_video(vids, "garbage_ts", base_video, "WEBVTT\n\n00:0x:01.000 --> banana\nhello\n")
    add_video(vids, "empty_subs", base_video, "")
    add_video(vids, "noparse", base_video, vtt([(0.0, 2.0, "NOPARSE please")]))
    (vids / "not_a_video.mp4").write_bytes(b"this is not a video at all" * 100)
    add_video(vids, "silent_no_subs", base_video)  # no audio and no subtitles: ASR must say so
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                    "color=c=blue:s=64x64:r=5", "-f", "lavfi", "-i",
                    "anullsrc=r=16000:cl=mono", "-t", "3", "-c:v", "libx264", "-c:a", "aac",
                    "-shortest", str(vids / "empty_asr.mp4")], check=True)  # silence: no speech
    truncated = add_video(vids, "truncated", base_video, GOOD)
    truncated.write_bytes(truncated.read_bytes()[:600])
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0", "--concurrency", "2", "--quiet")
        first_requests = srv.requests
        assert res.returncode == 1, res.stderr
        assert "Traceback" not in res.stderr
        records = pd.read_parquet(out / "status")
        assert set(records["video_id"]) == {"good_a", "good_b", "garbage_ts", "empty_subs",
                                            "noparse", "not_a_video", "silent_no_subs",
                                            "truncated", "empty_asr"}
        captioned = records[(records["stage"] == "caption") & (records["status"] == "ok")]
        assert set(captioned["video_id"]) == {"good_a", "good_b"}
        # every other video failed once, at the stage that could not do it: its subtitles,
        # or (noparse) the LLM
        status = records[records["status"] == "error"].set_index("video_id")
        assert status.index.is_unique and len(status) == 7
        assert status.loc["noparse", "stage"] == "caption"
        assert set(status.drop(index="noparse")["stage"]) == {"subtitles"}
        for vid, row in status.iterrows():
            msg = row["message"]
            assert "\n" not in msg and msg, vid
            # the console shows the same single line
            assert f"{vid}: {msg[:40]}" in " ".join(res.stderr.split()), (vid, res.stderr)
        assert "garbage_ts.vtt" in status.loc["garbage_ts", "message"]
        assert "empty_subs.vtt" in status.loc["empty_subs", "message"]
        assert "not_a_video.mp4" in status.loc["not_a_video", "message"]
        assert "truncated.mp4" in status.loc["truncated", "message"]
        assert "audio" in status.loc["silent_no_subs", "message"]
        assert "no speech" in status.loc["empty_asr", "message"]
        assert "empty_asr.mp4" in status.loc["empty_asr", "message"]
        assert status.loc["noparse", "message"] == (
            "1 of 1 LLM blocks gave no caption (block 0: reply had no timestamped caption line)")

        caps = pd.read_parquet(out / "captions")
        assert set(caps["video_id"]) == {"good_a", "good_b"}
        assert not caps.duplicated(["video_id", "start", "text"]).any()
        assert (caps["end"] - caps["start"]).round(6).eq(8.0).all()
        subs = pd.read_parquet(out / "subtitles")
        assert set(subs["source"]) == {"vtt"}
        # the LLM failed on "noparse", but its subtitles are finished work and are kept
        assert set(subs["video_id"]) == {"good_a", "good_b", "noparse"}

        # a re-run with --retry-failed only redoes what failed: the good videos cost no LLM
        # request (without the flag failed videos stay failed: tests/engine/test_status.py)
        res2 = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                       "--parse-workers", "0", "--quiet", "--retry-failed")
        assert res2.returncode == 1
        assert "2 already done" in res2.stderr
        # only the NOPARSE block reaches the LLM again (a try and its one retry)
        assert srv.requests - first_requests == 2
        assert pd.read_parquet(out / "captions").equals(caps)


@pytest.mark.slow
def test_llm_server_down_or_failing_fails_each_video_in_one_line(tmp_path: Path,
                                                                 base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "a", base_video, GOOD)
    add_video(vids, "b", base_video, GOOD)
    with chat_server(status=500) as srv:
        res = run_cli("caption", str(vids), "--out", str(tmp_path / "r500"), "--llm-url",
                      srv.url, "--parse-workers", "0", "--llm-retries", "2", "--quiet")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    status = pd.read_parquet(tmp_path / "r500" / "status")
    status = status[status["stage"] == "caption"]
    assert len(status) == 2 and (status["status"] == "error").all()
    assert status["message"].str.contains("500").all()
    assert srv.requests == 2 * 3  # one try + two retries per video

    with chat_server() as srv:  # take a free port, then close the server: nobody listens
        url = srv.url
    res = run_cli("caption", str(vids), "--out", str(tmp_path / "rdown"), "--llm-url", url,
                  "--parse-workers", "0", "--llm-retries", "1", "--quiet")
    # a server that is gone stops the run (exit 75, one line) and marks no video failed
    assert res.returncode == 75 and "Traceback" not in res.stderr
    assert "127.0.0.1" in res.stderr and "nothing lost; re-run to resume" in res.stderr
    status = statuses(RunDir(tmp_path / "rdown"))
    assert not (status["status"] == "error").any()


@pytest.mark.slow
def test_sigkill_then_rerun_equals_uninterrupted_run(tmp_path: Path, base_video: Path) -> None:
    vids = tmp_path / "videos"
    for i in range(10):
        add_video(vids, f"v{i:02d}", base_video, GOOD.replace("eggs", f"egg{i}"))
    with chat_server(delay=0.25) as srv:
        args = ["caption", str(vids), "--llm-url", srv.url, "--parse-workers", "0",
                "--concurrency", "1", "--quiet", "--batch-size", "2"]
        killed = tmp_path / "killed"
        proc = start_cli(*args, "--out", str(killed))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and committed(killed, "caption") < 3:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        n_done = committed(killed, "caption")
        assert 3 <= n_done < 10, "the kill must land mid-run"
        assert run_cli(*args, "--out", str(killed)).returncode == 0
        clean = tmp_path / "clean"
        assert run_cli(*args, "--out", str(clean)).returncode == 0
    for table in ("captions", "subtitles"):
        a = pd.read_parquet(killed / table)
        b = pd.read_parquet(clean / table)
        pd.testing.assert_frame_equal(a, b)
    assert len(a) and not a.duplicated().any()
    status = pd.read_parquet(killed / "status")
    assert len(status) == 20 and (status["status"] == "ok").all()  # subtitles + caption


@pytest.mark.slow
def test_export_howtocaption_json_and_howto100m_source(tmp_path: Path, base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "htm1", base_video)  # no sidecar: its subtitles come from caption.json
    source = {"htm1": {"start": [0.0, 2.0], "end": [2.0, 4.0],
                       "text": ["first we heat the butter in a pan", "crack the eggs into a bowl"]}}
    (tmp_path / "caption.json").write_text(json.dumps(source))
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0",
                      "--subtitles", str(tmp_path / "caption.json"), "--asr", "never", "--quiet")
    assert res.returncode == 0, res.stderr
    subs = pd.read_parquet(out / "subtitles")
    assert list(subs["source"].unique()) == ["htm"]
    res = run_cli("export", str(out), "--format", "howtocaption", "--out", str(tmp_path / "e.json"))
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "e.json").read_text())
    caps = pd.read_parquet(out / "captions")
    assert list(data) == ["htm1"]
    assert data["htm1"]["text"] == [[t] for t in caps["text"]]  # the release's list of lists
    assert data["htm1"]["start"] == [0.0, 2.0]
    assert [round(e - s, 3) for s, e in zip(data["htm1"]["start"], data["htm1"]["end"],
                                            strict=True)] == [8.0, 8.0]


@pytest.mark.slow
def test_user_mistakes_exit_2_with_one_line(tmp_path: Path) -> None:
    res = run_cli("caption", str(tmp_path / "missing"), "--out", str(tmp_path / "r"))
    assert res.returncode == 2
    assert "missing: no such file or folder" in res.stderr and "Traceback" not in res.stderr
    manifest = tmp_path / "m.csv"
    manifest.write_text("id,path\nx,y.mp4\n")
    res = run_cli("caption", str(manifest), "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and "m.csv" in res.stderr and "video_id" in res.stderr


@pytest.mark.slow
def test_run_captions_then_aligns_and_skips_what_failed(tmp_path: Path,
                                                        base_video: Path) -> None:
    vids = tmp_path / "videos"
    add_video(vids, "good", base_video, GOOD)
    add_video(vids, "bad_subs", base_video, "WEBVTT\n\nnot a cue at all\n")
    out = tmp_path / "run"
    with chat_server() as srv:
        res = run_cli("run", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0", "--quantile", "0.5", "--quiet")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "subtitles: 1 done" in res.stderr and "caption: 1 done" in res.stderr
    assert "align: 1 done" in res.stderr
    status = pd.read_parquet(out / "status")
    assert set(zip(status["video_id"], status["stage"], status["status"], strict=True)) == {
        ("good", "subtitles", "ok"), ("good", "caption", "ok"), ("bad_subs", "subtitles", "error"),
        ("good", "align", "ok")}
    aligned = pd.read_parquet(out / "aligned")
    assert set(aligned["video_id"]) == {"good"} and len(aligned) == 2
    assert aligned["kept"].sum() == 1  # --quantile 0.5 of 2 pairs
    assert (out / "align_report.html").exists()
    assert "0.0–   8.0" in res.stdout  # the table shows original and aligned times


@pytest.mark.slow
def test_shards_on_one_run_dir_equal_a_single_run(tmp_path: Path, base_video: Path) -> None:
    """Two machines (here: processes) split a run's shards with --shard K/N; a final run
    without a shard filters and equals an unsharded run (whose shards are of another size)."""
    vids = tmp_path / "videos"
    for i in range(6):
        add_video(vids, f"s{i}", base_video, GOOD.replace("eggs", f"egg{i}"))
    with chat_server() as srv:
        base = ["run", str(vids), "--llm-url", srv.url, "--parse-workers", "0", "--quantile", "0.5",
                "--quiet"]
        sharded = tmp_path / "sharded"
        procs = [start_cli(*base, "--out", str(sharded), "--shard", f"{k}/2",
                           "--shard-size", "2")  # 3 shards: 0 and 2 to one, 1 to the other
                 for k in range(2)]
        errs = [p.communicate(timeout=300)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errs
        assert not (sharded / "aligned").exists()  # the filter waits for every shard
        done = [int(e.split("caption: ")[1].split(" done")[0]) for e in errs]
        assert sum(done) == 6 and all(d < 6 for d in done)  # each shard did only its share
        final = run_cli(*base, "--out", str(sharded))
        assert final.returncode == 0 and "0 done, 6 already done" in final.stderr
        single = tmp_path / "single"
        assert run_cli(*base, "--out", str(single)).returncode == 0
    assert len(RunDir(sharded).table_files("captions")) == 3  # the run keeps its shard size
    for table in ("captions", "aligned"):
        pd.testing.assert_frame_equal(pd.read_parquet(sharded / table),
                                      pd.read_parquet(single / table))
    assert run_cli("caption", str(vids), "--out", str(tmp_path / "x"),
                   "--shard", "2/2").returncode == 2
