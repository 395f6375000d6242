"""``align_run`` end to end: generated videos, the real embedded encoder, a real run directory."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.filter import window_scores
from howtocap.align.run import align_run, read_aligned
from howtocap.engine.records import StatusRecord
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem
from howtocap.samples import DEFAULT_STEPS, make_narrated_video
from tests.support.stages import record_table, write_rows


@pytest.fixture(scope="session")
def encoder() -> Any:
    from howtocap.encoders import create

    return create("default", device="cpu")


class Renamed:
    """The same weights under another name: a different encoder set for the stage key."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner, self.name = inner, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


def _captions(video_id: str, starts: list[float], texts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"video_id": video_id, "start": starts,
                         "end": [s + 8 for s in starts], "text": texts, "source": "llm",
                         "block": 0, "model": "test"})


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, encoder: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("align")
    vids = root / "videos"
    good = make_narrated_video(vids, "good", DEFAULT_STEPS[:3], audio=False, subtitles=None,
                               size=128)  # 18 s
    short = make_narrated_video(vids, "short", DEFAULT_STEPS[3:4], seconds_per_step=4.0,
                                audio=False, subtitles=None, size=128)  # 4 s < one clip
    longer = make_narrated_video(vids, "longer", DEFAULT_STEPS[4:8], audio=False,
                                 subtitles=None, size=128)  # 24 s
    partial = vids / "partial.mp4"
    data = longer.video_path.read_bytes()
    partial.write_bytes(data[: int(len(data) * 0.5)])
    broken = vids / "broken.mp4"
    broken.write_bytes(b"this is not a video file\n" * 200)
    rundir = RunDir(root / "run")
    rundir.record_videos([
        VideoItem("good", good.video_path), VideoItem("short", short.video_path),
        VideoItem("partial", partial), VideoItem("broken", broken),
        VideoItem("missing", vids / "nowhere.mp4"), VideoItem("nocaps", good.video_path),
    ])
    steps = good.steps
    caps = {
        "good": _captions("good", [s.start + 3 for s in steps] + [100.0],
                          [s.caption for s in steps] + ["a caption past the end"]),
        "short": _captions("short", [1.0], [short.steps[0].caption]),
        "partial": _captions("partial", [s.start for s in longer.steps],
                             [s.caption for s in longer.steps]),
        "broken": _captions("broken", [0.0], ["anything"]),
        "missing": _captions("missing", [0.0], ["anything"]),
    }
    write_rows(rundir, "captions", pd.concat(caps.values(), ignore_index=True))
    w = rundir.writer("caption", 0, ("captions",))  # captioned, with no caption at all
    w.commit([StatusRecord("nocaps", "caption", "ok")], {})
    w.finish()
    summary = align_run(rundir, [], AlignConfig(quantile=0.5), encoders=[encoder],
                        progress=False)
    return {"rundir": rundir, "summary": summary, "good": good, "encoder": encoder}


@pytest.mark.slow
def test_good_videos_align_and_bad_ones_get_one_error_line(run: dict[str, Any]) -> None:
    rundir: RunDir = run["rundir"]
    failed = dict(run["summary"].failed)
    assert set(failed) == {"broken", "missing"}
    assert "broken.mp4" in failed["broken"] and "\n" not in failed["broken"]
    assert "nowhere.mp4" in failed["missing"]
    recs = record_table(rundir, "align", ["status"])
    st = dict(zip(recs.column("video_id").to_pylist(), recs.column("status").to_pylist(),
                  strict=True))
    assert st == {"good": "ok", "short": "ok", "partial": "ok", "nocaps": "ok",
                  "broken": "error", "missing": "error"}


@pytest.mark.slow
def test_aligned_table(run: dict[str, Any]) -> None:
    rundir: RunDir = run["rundir"]
    al = read_aligned(rundir)
    # the caption at 100 s of the 18-s video is outside (the guard): dropped, not clamped;
    # so are the partial video's captions that cannot reach a clip of its decoded part
    sizes = al.groupby("video_id").size().to_dict()
    n_part = sizes.pop("partial")
    assert sizes == {"good": 3, "short": 1} and 2 <= n_part <= 3
    cfg = rundir.configs.read("align")
    assert cfg is not None and cfg["outside_video"] == 1 + (4 - n_part)
    assert int(al["kept"].sum()) == -(-len(al) // 2)  # score >= the median (quantile 0.5)
    assert al.loc[al["kept"], "score"].min() >= al.loc[~al["kept"], "score"].max()
    assert set(al["encoders"]) == {run["encoder"].name}
    assert np.all(np.abs(al["offset"]) <= 10) and 100.0 not in set(al["orig_start"])
    assert "outside" not in al.columns and "null_z" in al.columns
    # shorter than one clip: the whole video
    sh = al[al["video_id"] == "short"].iloc[0]
    assert sh["start"] == 0.0 and sh["end"] == pytest.approx(4.0, abs=0.05)
    # decoded only partly: aligned on what decoded and flagged
    part = al[al["video_id"] == "partial"]
    assert bool(part["partial"].all()) and part["end"].max() < 24.0
    assert not al.loc[al["video_id"] != "partial", "partial"].any()


@pytest.mark.slow
def test_scores_match_direct_computation(run: dict[str, Any]) -> None:
    from howtocap.encoders.cache import frame_embeddings

    rundir, enc = run["rundir"], run["encoder"]
    fe = frame_embeddings(run["good"].video_path, enc, fps=1.0, cache_dir=rundir.cache_dir)
    al = read_aligned(rundir)
    good = al[al["video_id"] == "good"].sort_values("orig_start")
    text = enc.encode_texts(good["text"].tolist())
    scores, _ = window_scores(fe.emb, text, good["orig_start"].to_numpy(), fe.duration,
                              AlignConfig())
    np.testing.assert_allclose(good["score"], scores.max(axis=1), atol=1e-5)


@pytest.mark.slow
def test_report_and_config(run: dict[str, Any]) -> None:
    rundir: RunDir = run["rundir"]
    html = (rundir.root / "align_report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    cfg = rundir.configs.read("align")
    assert cfg is not None and cfg["quantile"] == 0.5 and cfg["kept"] == -(-cfg["pairs"] // 2)
    n = cfg["outside_video"]
    assert n >= 2 and cfg["filter"].startswith("--quantile")
    assert f"<th>dropped: window outside the video (±T)</th><td>{n}</td>" in html
    assert f"Dropped: window outside the video ({n})" in html
    assert "a caption past the end" in html


@pytest.mark.slow
def test_export_reads_the_filtered_table(run: dict[str, Any], tmp_path: Path) -> None:
    import json

    from howtocap.io.export import export_run

    path, n = export_run(run["rundir"].root, out=tmp_path / "hc.json")
    data = json.loads(path.read_text())
    kept = int(read_aligned(run["rundir"])["kept"].sum())
    assert n == kept and sum(len(texts) for v in data.values() for texts in v["text"]) == kept
    assert all(len(v["start"]) == len(v["end"]) == len(v["text"]) for v in data.values())


@pytest.mark.slow
def test_new_filter_reuses_scores_new_encoders_recompute(run: dict[str, Any]) -> None:
    rundir: RunDir = run["rundir"]
    part = rundir.shard_path("align_scores", 0)  # the shard file holding the scores
    before = part.stat().st_mtime_ns
    s = align_run(rundir, [], AlignConfig(keep_top=2), encoders=[run["encoder"]],
                  progress=False)
    assert s.done == 0 and s.skipped == 4 and part.stat().st_mtime_ns == before
    assert int(read_aligned(rundir)["kept"].sum()) == 2
    two = [run["encoder"], Renamed(run["encoder"], "default-copy")]
    with pytest.raises(HowtocapError, match="--redo"):  # other settings: refused …
        align_run(rundir, [], AlignConfig(keep_top=2), encoders=two, progress=False)
    s = align_run(rundir, [], AlignConfig(keep_top=2), encoders=two, progress=False,
                  redo=True)  # … unless asked to recompute
    assert s.done == 4 and s.skipped == 0 and part.stat().st_mtime_ns != before
    al = read_aligned(rundir)
    assert set(al["encoders"]) == {f"{run['encoder'].name},default-copy"}
    shutil.rmtree(rundir.root / "logs", ignore_errors=True)


@pytest.mark.slow
def test_recaptioned_video_is_aligned_again(run: dict[str, Any]) -> None:
    rundir: RunDir = run["rundir"]
    encs = [run["encoder"], Renamed(run["encoder"], "default-copy")]
    write_rows(rundir, "captions", _captions("short", [2.0, 3.0], ["a cat", "a rocket"]))
    s = align_run(rundir, [], AlignConfig(keep_top=2), encoders=encs, progress=False)
    assert s.done == 1 and s.skipped == 3
    al = read_aligned(rundir)
    assert sorted(al.loc[al["video_id"] == "short", "text"]) == ["a cat", "a rocket"]


@pytest.mark.slow
def test_cli_command(run: dict[str, Any]) -> None:
    import typer
    from typer.testing import CliRunner

    from howtocap.cli import add_commands

    app = typer.Typer()
    add_commands(app, "align")
    app.command("noop")(lambda: None)  # a second command keeps `align` a sub-command
    root = str(run["rundir"].root)
    bad = CliRunner().invoke(app, ["align", root, "--threshold", "0.1", "--keep-top", "3"])
    assert bad.exit_code == 2 and "choose one filter" in bad.output
    assert "Traceback" not in bad.output
    # the test's encoders were prebuilt objects; by name they fingerprint differently: --redo
    res = CliRunner().invoke(app, ["align", root, "--keep-top", "3", "--quiet", "--redo"])
    # two videos of the run are broken: the others finish, the exit code says "some failed"
    assert res.exit_code == 1, res.output
    assert "kept 3 (--keep-top" in res.output
    assert re.search(r"; [2-3] dropped: no window within ±10 s inside the video", res.output)
    al = read_aligned(run["rundir"])
    assert int(al["kept"].sum()) == 3 and set(al["encoders"]) == {run["encoder"].name}


# -- the same results as before align's overhead was cut (issue #22) --------------------------

BASE = "9d6059c"  # the last commit before the cut
REPO = Path(__file__).resolve().parents[2]
_ALIGN_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from bench_align_scale import StubEncoder, synthesize
from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run
from howtocap.engine.rundir import RunDir
run, tmp = Path(sys.argv[1]), Path(sys.argv[4])
synthesize(run, tmp / "videos", tmp / "cache", 24, seed=3)  # in the tree's own layout
cfg = AlignConfig(**({"quantile": 0.5} if sys.argv[3] == "quantile" else {}))
align_run(RunDir(run, create=False), [], cfg, encoders=[StubEncoder()], progress=False)
"""


def _base_sources(dest: Path) -> Path | None:
    """The base commit's ``src/`` (``git archive``), or None when git or the commit is not
    at hand (a source tarball)."""
    import subprocess

    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{BASE}^{{commit}}"],
            capture_output=True, check=False).returncode:
        return None
    dest.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", BASE, "src"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest / "src"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "quantile"])
def test_aligned_table_equals_the_base_commits(tmp_path: Path, mode: str) -> None:
    """A generated run (cached frames, the benchmark's stub text encoder) made and aligned by
    this tree and by the base commit, each in its own process and run directory layout:
    equal aligned tables (numbers to 1e-6), so the faster code computes what the old one
    did. The default filter's null z against other videos' captions and clips is
    exercised (16 reference videos)."""
    import subprocess
    import sys

    sys.path.insert(0, str(REPO / "benchmarks" / "scale"))
    try:
        from bench_align_scale import compare
    finally:
        sys.path.remove(str(REPO / "benchmarks" / "scale"))
    base_src = _base_sources(tmp_path / "base")
    if base_src is None:
        pytest.skip(f"git or commit {BASE} not available")
    outs = {}
    for name, src in (("base", base_src), ("here", REPO / "src")):
        run = tmp_path / f"run-{name}"
        env = {**__import__("os").environ, "PYTHONPATH": str(src)}
        res = subprocess.run([sys.executable, "-c", _ALIGN_CHILD, str(run),
                              str(REPO / "benchmarks" / "scale"), mode, str(tmp_path)], env=env,
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr[-2000:]
        outs[name] = run
    same = compare(outs["base"], outs["here"])
    assert same["rows"] > 500 and same["equal"], same
    al = pd.read_parquet(outs["here"] / "aligned")
    if mode == "default":  # both halves of the null z were computed
        assert al["z_clip"].notna().all() and al["z_text"].notna().all()


def test_kept_columns_match_kept_captions() -> None:
    """The stage's columnar read keeps exactly the rows ``kept_captions`` keeps."""
    from howtocap.align.stage import _kept_columns
    from howtocap.schemas import kept_captions, rows

    rej = ["", "filler", None, "", "filler"]
    cols = {"video_id": ["v"] * 5, "start": np.arange(5.0), "end": np.arange(5.0) + 8,
            "text": list("abcde"), "rejected": rej}
    got = _kept_columns(rows("captions", 5, **cols))
    want = kept_captions(pd.DataFrame(cols))
    assert "rejected" not in got and list(got["text"]) == want["text"].tolist() == ["a", "c",
                                                                                     "d"]
    np.testing.assert_array_equal(got["start"], want["start"])
    assert list(_kept_columns(pd.DataFrame(cols))["text"]) == ["a", "c", "d"]
    every = _kept_columns(rows("captions", 2, video_id="v", start=[0.0, 1.0], end=[8.0, 9.0],
                               text=["a", "b"]))
    assert list(every["text"]) == ["a", "b"]
