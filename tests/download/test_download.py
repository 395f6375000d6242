"""Inputs by URL (issue #23): the download stage against real servers on 127.0.0.1 — a plain
HTTP file server (fsspec and yt-dlp's generic extractor) and moto's S3 server — on small
generated videos. YouTube itself cannot be reached here: its yt-dlp command line and the
mapping of yt-dlp's real error messages to causes are tested instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from howtocap.download.config import DownloadConfig
from howtocap.download.fetch import (
    fetch_file,
    fetch_ytdlp,
    ytdlp_args,
    ytdlp_failure,
)
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import failure_cause
from howtocap.errors import HowtocapError
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, HOWTOCAP, run_cli, start_cli
from tests.support.media_server import media_server
from tests.support.stages import record_table


def status(run: Path) -> pd.DataFrame:
    return record_table(RunDir(run, create=False), "download").to_pandas().set_index("video_id")


def served(tmp: Path, base_video: Path) -> Path:
    """The server's files: two videos with sidecar subtitles, a text file named .mp4, and a
    video padded past the size limit the tests set."""
    root = tmp / "www"
    root.mkdir()
    for name, text in (("a", GOOD), ("b", GOOD.replace("eggs", "onions"))):
        (root / f"{name}.mp4").write_bytes(base_video.read_bytes())
        (root / f"{name}.vtt").write_text(text)
    (root / "notes.mp4").write_bytes(b"this is not a video at all\n" * 200)
    (root / "big.mp4").write_bytes(base_video.read_bytes() + b"\0" * 24_000_000)
    return root


def manifest(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    pd.DataFrame(rows, columns=["video_id", "video_path", "subtitle_path"]).to_csv(
        path, index=False)
    return path


@pytest.mark.slow
def test_run_from_urls_to_aligned_with_failures_resume_and_keep_media_false(
        tmp_path: Path, base_video: Path) -> None:
    """A manifest of URLs runs end to end; a 404, a hanging server, a too-large file and a
    non-video each fail with their cause while the rest complete; a re-run downloads nothing
    again; ``--keep-media false`` deleted the media align was done with and a re-run still
    works from the frame cache."""
    root = served(tmp_path, base_video)
    size = base_video.stat().st_size
    run = tmp_path / "run"
    with media_server(root) as www, chat_server() as llm:
        u = www.url
        csv = manifest(tmp_path / "urls.csv", [
            ("a", f"{u}/a.mp4", f"{u}/a.vtt"),
            ("b", f"{u}/b.mp4", f"{u}/b.vtt"),
            ("missing", f"{u}/gone.mp4", ""),
            ("stuck", f"{u}/hang/a.mp4", ""),
            ("huge", f"{u}/big.mp4", ""),
            ("text", f"{u}/notes.mp4", ""),
        ])
        args = ["run", str(csv), "--out", str(run), "--llm-url", llm.url, "--parse-workers", "0",
                "--quiet", "--read-timeout", "1", "--retries", "1", "--max-size", str(size + 1000),
                "--keep-media", "false", "--reference-videos", "1", "--keep-all"]
        res = run_cli(*args)
        assert res.returncode == 1, res.stderr  # some videos failed, the rest finished
        assert "Traceback" not in res.stderr
        st = status(run)
        assert set(st.index) == {"a", "b", "missing", "stuck", "huge", "text"}
        assert (st.loc[["a", "b"], "status"] == "ok").all()
        expect = {"missing": ("not found: HTTP 404", "bad input"),
                  "stuck": ("timeout: ", "service"),
                  "huge": ("too large: ", "bad input"),
                  "text": ("not a video: ", "bad input")}
        for vid, (prefix, cause) in expect.items():
            assert st.loc[vid, "message"].startswith(prefix), st.loc[vid, "message"]
            assert st.loc[vid, "cause"] == cause, vid
        assert www.requests["/hang/a.mp4"] == 2  # one try + one retry, each ended by the timeout
        aligned = pd.read_parquet(run / "aligned")
        assert set(aligned["video_id"]) == {"a", "b"}
        subs = pd.read_parquet(run / "subtitles")
        assert set(subs["source"]) == {"vtt"}  # the downloaded sidecars, no ASR
        assert subs[subs.video_id == "b"]["text"].str.contains("onions").all()
        dl = pd.read_parquet(run / "downloads").set_index("video_id")
        assert set(dl.index) == {"a", "b"} and (dl["bytes"] == size).all()
        assert dl.loc["a", "url"] == f"{u}/a.mp4" and dl.loc["a", "method"] == "fsspec"
        assert dl.loc["a", "config_id"] == st.loc["a", "config_id"]
        # --keep-media false: the video align was done with is gone, the filter's reference
        # video stays (later videos are scored against it), the subtitles stay
        ref = set(RunDir(run, create=False).configs.read("align_reference")["clip_videos"])
        assert len(ref) == 1
        for vid in ("a", "b"):
            assert Path(dl.loc[vid, "video_path"]).exists() == (vid in ref)
            assert Path(dl.loc[vid, "subtitle_path"]).exists()
        assert not [p for p in (run / "cache" / "media").iterdir() if p.name.startswith(".")]
        # `howtocap status` lists the download stage first, its failures by cause
        res = run_cli("status", str(run), "--json")
        stages = {s["stage"]: s for s in json.loads(res.stdout)["stages"]}
        assert list(stages)[0] == "download" and stages["download"]["done"] == 2
        assert {c: f["count"] for c, f in stages["download"]["failures"].items()} == {
            "bad input": 3, "service": 1}
        # a re-run: nothing downloaded again (no file request at all), the same result
        before = sum(n for p, n in www.requests.items() if not p.startswith("/hang"))
        res = run_cli(*args)
        assert res.returncode == 1, res.stderr
        assert sum(n for p, n in www.requests.items() if not p.startswith("/hang")) == before
        pd.testing.assert_frame_equal(pd.read_parquet(run / "aligned"), aligned)
        # the timeout (cause "service") was tried again by the plain re-run; nothing else was
        assert www.requests["/hang/a.mp4"] == 4


@pytest.mark.slow
def test_download_causes_size_limit_mid_stream_and_malformed_urls(
        tmp_path: Path, base_video: Path) -> None:
    """``howtocap download`` alone: a file without Content-Length past --max-size is aborted
    mid-stream; the generic extractor of yt-dlp fetches a page URL; a malformed URL in a
    manifest is one line naming the manifest."""
    root = served(tmp_path, base_video)
    size = base_video.stat().st_size
    run = tmp_path / "run"
    with media_server(root) as www:
        u = www.url
        csv = manifest(tmp_path / "m.csv", [
            ("ok", f"{u}/a.mp4", ""),
            ("streamed_big", f"{u}/nolen/big.mp4", ""),
            ("page", f"{u}/page/b", ""),  # no extension: a web page for yt-dlp
            ("page404", f"{u}/page/nothing", ""),
        ])
        res = run_cli("download", str(csv), "--out", str(run), "--quiet", "--retries", "0",
                      "--max-size", str(size + 1000), "--workers", "4")
        assert res.returncode == 1, res.stderr
        st = status(run)
        assert st.loc["ok", "status"] == "ok" and st.loc["page", "status"] == "ok"
        msg = st.loc["streamed_big", "message"]
        assert msg.startswith("too large: ") and st.loc["streamed_big", "cause"] == "bad input"
        # aborted mid-stream: far less than the whole file was read
        assert www.sent["/nolen/big.mp4"] < (root / "big.mp4").stat().st_size
        assert st.loc["page404", "message"].startswith("not found: "), st.loc["page404"]
        dl = pd.read_parquet(run / "downloads").set_index("video_id")
        assert dl.loc["page", "method"] == "yt-dlp"
        assert Path(dl.loc["page", "video_path"]).read_bytes() == base_video.read_bytes()
        for bad, why in (("ftp://host/a.mp4", "unsupported URL"),
                         ("http:///a.mp4", "malformed URL")):
            bad_csv = manifest(tmp_path / "bad.csv", [("x", bad, "")])
            res = run_cli("download", str(bad_csv), "--out", str(tmp_path / "r2"), "--quiet")
            errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
            assert res.returncode == 2 and len(errors) == 1, res.stderr
            assert why in errors[0] and "bad.csv: line 2" in errors[0], errors[0]


@pytest.mark.slow
def test_kill_mid_download_leaves_nothing_taken_as_done(tmp_path: Path,
                                                        base_video: Path) -> None:
    """SIGKILL while a file is half sent: no file, no row, no ok status; the next run sweeps
    the dead writer's temp file and fetches the video whole."""
    root = served(tmp_path, base_video)
    run = tmp_path / "run"
    with media_server(root, trickle=0.05) as www:
        csv = manifest(tmp_path / "m.csv", [("slow", f"{www.url}/slow/big.mp4", "")])
        cmd = ["download", str(csv), "--out", str(run), "--quiet"]
        proc = start_cli(*cmd)
        deadline = time.monotonic() + 60
        while www.sent["/slow/big.mp4"] < 40_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the download finished before the kill"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        media = run / "cache" / "media"
        left = list(media.iterdir())
        assert left and all(p.name.startswith(".") and p.name.endswith(".tmp") for p in left)
        assert not (run / "downloads").exists()
        rd = RunDir(run, create=False)
        assert rd.done("download", ["slow"]) == [False]
        assert "ok" not in set(record_table(rd, "download", ["status"]).column("status")
                               .to_pylist())
        www.trickle = 0.0
        res = run_cli(*cmd, timeout=120)
        assert res.returncode == 0, res.stderr
        assert sorted(p.name for p in media.iterdir()) == ["slow.download.json", "slow.mp4"]
        assert (media / "slow.mp4").read_bytes() == (root / "big.mp4").read_bytes()


def test_whole_but_uncommitted_downloads_are_not_fetched_again(tmp_path: Path,
                                                               base_video: Path) -> None:
    """A kill after files were whole but before their batch was committed (simulated by
    taking the results back): the next run finds them by their markers, no request; other
    settings (another size limit) fetch again."""
    from howtocap.download.run import download_run

    root = served(tmp_path, base_video)
    run = tmp_path / "run"
    with media_server(root) as www:
        csv = manifest(tmp_path / "m.csv", [("a", f"{www.url}/a.mp4", f"{www.url}/a.vtt"),
                                            ("b", f"{www.url}/b.mp4", "")])
        items, first = download_run([csv], run, DownloadConfig(), progress=False)
        assert first.done == 2 and www.requests.total() == 3
        RunDir(run, create=False).forget("download", ["a", "b"])
        again, second = download_run([csv], run, DownloadConfig(), progress=False)
        assert second.done == 2 and www.requests.total() == 3 and again == items
        other = DownloadConfig(max_size=10**9)
        _, third = download_run([csv], run, other, progress=False, redo=True)
        assert third.done == 2 and www.requests.total() == 6


def test_fetch_retries_transient_failures_only(tmp_path: Path, base_video: Path) -> None:
    """A timeout is retried (--retries), a 404 is not: requests counted at the server."""
    root = served(tmp_path, base_video)
    cfg = DownloadConfig(retries=2, backoff=0.0, read_timeout=0.5)
    with media_server(root) as www:
        with pytest.raises(HowtocapError, match=r"^timeout: .*after 3 tries") as exc:
            fetch_file(f"{www.url}/hang/a.mp4", tmp_path / "x.mp4", cfg, video=True)
        assert failure_cause(exc.value) == "service"
        with pytest.raises(HowtocapError, match=r"^not found: HTTP 404") as exc:
            fetch_file(f"{www.url}/nothing.mp4", tmp_path / "y.mp4", cfg, video=True)
        assert failure_cause(exc.value) == "bad input"
        assert www.requests["/hang/a.mp4"] == 3 and www.requests["/nothing.mp4"] == 1
        got = fetch_ytdlp(f"{www.url}/page/a", tmp_path / "vid", cfg)
        assert got.path == tmp_path / "vid.mp4" and got.bytes == base_video.stat().st_size
    assert not (tmp_path / "x.mp4").exists() and not (tmp_path / "y.mp4").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_youtube_command_line() -> None:
    """What yt-dlp receives for a YouTube id: mp4 at most 360p with its audio, English
    automatic captions as VTT, retries, the size limit; other settings change it."""
    import yt_dlp

    cfg = DownloadConfig()
    args = ytdlp_args("dQw4w9WgXcQ", "out/media.%(ext)s", cfg)
    assert args[-2:] == ["--", "https://www.youtube.com/watch?v=dQw4w9WgXcQ"]
    opts = yt_dlp.parse_options(args).ydl_opts
    fmt = opts["format"]
    assert fmt.split("/")[0] == "bv*[height<=?360][ext=mp4]+ba[ext=m4a]"
    assert "b[height<=?360][ext=mp4]" in fmt.split("/")
    assert opts["merge_output_format"] == "mp4"
    assert opts["writeautomaticsub"] is True and not opts.get("writesubtitles")
    assert opts["subtitleslangs"] == ["en"] and opts["subtitlesformat"] == "vtt"
    assert opts["retries"] == 3 and opts["fragment_retries"] == 3
    assert opts["socket_timeout"] == 30.0 and opts["max_filesize"] == cfg.max_size
    assert opts["noplaylist"] is True and opts["outtmpl"]["default"] == "out/media.%(ext)s"
    other = DownloadConfig(max_height=240, audio=False, format="webm", sub_langs=[])
    o2 = yt_dlp.parse_options(ytdlp_args("dQw4w9WgXcQ", "o.%(ext)s", other)).ydl_opts
    assert o2["format"].split("/")[0] == "bv[height<=?240][ext=webm]" and "+" not in o2["format"]
    assert not o2.get("writeautomaticsub") and o2["merge_output_format"] == "webm"
    # docs/download.md shows this command line: it must be the one built
    import shlex

    page = (Path(__file__).resolve().parents[2] / "docs" / "download.md").read_text()
    shown = page.split("```\nyt-dlp ", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    built = ytdlp_args("abcdefghijk", "<tmp>/media.%(ext)s", cfg)
    assert shlex.split(shown) == [a.replace("abcdefghijk", "<id>") for a in built]
    # what changes the files is fingerprinted; workers, timeouts and retries are not
    from howtocap.download.stage import DownloadStage

    def fp(c: DownloadConfig) -> dict:
        return DownloadStage(c, Path("m")).fingerprint()

    assert fp(DownloadConfig(workers=1, read_timeout=1, retries=0)) == fp(cfg)
    assert fp(DownloadConfig(max_height=240)) != fp(cfg)
    assert fp(DownloadConfig(max_size=10)) != fp(cfg)


# yt-dlp's own error messages (as its extractors and downloader word them) -> cause
YTDLP_MESSAGES = [
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This video has been removed by the "
     "uploader", "removed or private", "bad input"),
    ("ERROR: [youtube] abcdefghijk: Private video. Sign in if you've been granted access to "
     "this video", "removed or private", "bad input"),
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This video is no longer available "
     "because the YouTube account associated with this video has been terminated.",
     "removed or private", "bad input"),
    ("ERROR: [youtube] abcdefghijk: The uploader has not made this video available in your "
     "country", "geo-blocked", "bad input"),
    ("ERROR: [youtube] abcdefghijk: Video unavailable. The uploader has not made this video "
     "available in your country", "geo-blocked", "bad input"),
    ("ERROR: [youtube] abcdefghijk: Sign in to confirm you’re not a bot. Use --cookies-from-"
     "browser or --cookies for the authentication.", "rate-limited or bot check", "service"),
    ("ERROR: unable to download video data: HTTP Error 429: Too Many Requests",
     "rate-limited or bot check", "service"),
    ("ERROR: [youtube] abcdefghijk: Video unavailable. This content isn't available, try "
     "again later.", "rate-limited or bot check", "service"),
    ("ERROR: [generic] Unable to download webpage: HTTP Error 404: Not Found (caused by "
     "<HTTPError 404: Not Found>)", "not found", "bad input"),
    ("ERROR: [youtube:truncated_id] abcdefgh: Incomplete YouTube ID abcdefgh. URL "
     "https://www.youtube.com/watch?v=abcdefgh looks truncated.", "not found", "bad input"),
    ("ERROR: Unable to download webpage: <urlopen error timed out> (caused by "
     "TransportError('timed out'))", "timeout", "service"),
    ("ERROR: [youtube] abcdefghijk: Sign in to confirm your age. This video may be "
     "inappropriate for some users.", "removed or private", "bad input"),
    ("ERROR: something nobody has seen before", "download failed", "service"),
]


@pytest.mark.parametrize(("message", "kind", "cause"), YTDLP_MESSAGES)
def test_ytdlp_messages_map_to_causes(message: str, kind: str, cause: str) -> None:
    exc = ytdlp_failure(message, "abcdefghijk")
    assert str(exc).startswith(f"{kind}: abcdefghijk: "), str(exc)
    assert "ERROR:" not in str(exc)
    assert failure_cause(exc) == cause


@pytest.mark.slow
def test_s3_inputs_against_moto_server(tmp_path: Path, base_video: Path) -> None:
    """``s3://`` inputs from moto's S3 server on 127.0.0.1, the endpoint given the two
    documented ways (AWS_ENDPOINT_URL, --storage-options); a missing key is 'not found'."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="videos")
        s3.put_object(Bucket="videos", Key="howto/a.mp4", Body=base_video.read_bytes())
        s3.put_object(Bucket="videos", Key="howto/a.vtt", Body=GOOD.encode())
        csv = manifest(tmp_path / "s3.csv", [
            ("a", "s3://videos/howto/a.mp4", "s3://videos/howto/a.vtt"),
            ("gone", "s3://videos/howto/gone.mp4", ""),
        ])
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        for how, extra_env, extra_args in (
                ("env", {"AWS_ENDPOINT_URL": endpoint}, []),
                ("option", {}, ["--storage-options", f'{{"s3": {{"endpoint_url": '
                                                     f'"{endpoint}"}}}}'])):
            run = tmp_path / f"run_{how}"
            res = subprocess.run(
                [*HOWTOCAP, "download", str(csv), "--out", str(run), "--quiet",
                 "--retries", "0", *extra_args],
                capture_output=True, text=True, timeout=120,
                env={**env, **creds, **extra_env, "NO_COLOR": "1"})
            assert res.returncode == 1, res.stderr
            st = status(run)
            assert st.loc["a", "status"] == "ok", st.loc["a", "message"]
            assert st.loc["gone", "message"].startswith("not found: "), st.loc["gone"]
            assert st.loc["gone", "cause"] == "bad input"
            dl = pd.read_parquet(run / "downloads").set_index("video_id")
            assert Path(dl.loc["a", "video_path"]).read_bytes() == base_video.read_bytes()
            assert Path(dl.loc["a", "subtitle_path"]).read_text() == GOOD
            assert endpoint not in (run / "config" / "download.json").read_text()
    finally:
        server.stop()


def test_urls_pass_through_manifests_untouched(tmp_path: Path) -> None:
    from howtocap.io.inputs import resolve_inputs

    (tmp_path / "local.mp4").write_bytes(b"x")
    csv = manifest(tmp_path / "m.csv", [
        ("a", "https://example.org/v/a.mp4?sig=1//2", "s3://bucket/a.en.vtt"),
        ("b", "dQw4w9WgXcQ", ""),
        ("c", "local.mp4", "gs://bucket/c.srt"),
    ])
    items = {it.video_id: it for it in resolve_inputs([csv])}
    assert items["a"].video_url == "https://example.org/v/a.mp4?sig=1//2"
    assert items["a"].subtitle_url == "s3://bucket/a.en.vtt" and items["a"].video_path is None
    assert items["b"].video_url == "dQw4w9WgXcQ"
    assert items["c"].video_path == (tmp_path / "local.mp4").resolve()
    assert items["c"].video_url == "" and items["c"].subtitle_url == "gs://bucket/c.srt"
