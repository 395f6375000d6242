"""Settings-checked resume: a changed setting, model or template refuses before any work;
``redo`` recomputes and clears downstream stages; an unchanged re-run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from howtocap.align.config import AlignConfig
from howtocap.align.run import align_run
from howtocap.caption.captioner import CaptionConfig
from howtocap.caption.config import CaptionRunConfig
from howtocap.caption.run import caption_run
from howtocap.engine.core import SettingsChanged
from howtocap.engine.rundir import RunDir
from howtocap.llm import LLMOptions
from tests.support.chat_server import chat_server
from tests.support.cli import GOOD, add_video, run_cli
from tests.support.stages import status_records
from tests.support.tiny_models import TinyEncoder


def videos(tmp_path: Path, base: Path, n: int = 3) -> Path:
    folder = tmp_path / "videos"
    for i in range(n):
        add_video(folder, f"v{i}", base, GOOD.replace("eggs", f"egg{i}"))
    return folder


def config(url: str, **caption: object) -> CaptionRunConfig:
    """Parsed in this process (``--parse-workers 0``): the parser pool is not what is tested here,
    and its processes would each load spaCy afresh, on every run."""
    return CaptionRunConfig(llm=LLMOptions(url=url, concurrency=2),
                            caption=CaptionConfig(**caption), parse_workers=0)


@pytest.mark.slow
def test_changed_setting_model_or_template_refuses_before_any_work(
        tmp_path: Path, base_video: Path) -> None:
    vids, out = videos(tmp_path, base_video), tmp_path / "run"
    with chat_server() as srv:
        caption_run([vids], out, config(srv.url), progress=False)
        caps = pd.read_parquet(out / "captions")
        recorded = (out / "config" / "caption.json").read_text()
        assert caps["config_id"].nunique() == 1 and (caps["config_id"] != "").all()
        n = srv.requests

        # unchanged: resumes, asks the LLM nothing
        _, again = caption_run([vids], out, config(srv.url), progress=False)
        assert again.skipped == 3 and again.done == 0 and srv.requests == n

        template = tmp_path / "t.txt"
        template.write_text("Summarise with timestamps: {asr}")
        cases = [(config(srv.url, block_words=50), "caption.block_words 200 -> 50"),
                 (config(srv.url, template=str(template)), "caption.template.prompt"),
                 (CaptionRunConfig(llm=LLMOptions(url=srv.url, model="other")),
                  "llm.model"),
                 (config(srv.url, clip_seconds=4.0), "caption.clip_seconds")]
        for cfg, named in cases:
            with pytest.raises(SettingsChanged, match="--redo") as exc:
                caption_run([vids], out, cfg, progress=False)
            assert named in str(exc.value) and "--out" in str(exc.value)
            assert "\n" not in str(exc.value)
        # refused before any work: no request, the recorded config still says what made it
        assert srv.requests == n
        assert (out / "config" / "caption.json").read_text() == recorded
        pd.testing.assert_frame_equal(pd.read_parquet(out / "captions"), caps)

        # an edited template file is a changed setting too
        caption_run([vids], tmp_path / "t_run", config(srv.url, template=str(template)),
                    progress=False)
        template.write_text("Other words, timestamps please: {asr}")
        with pytest.raises(SettingsChanged, match="template"):
            caption_run([vids], tmp_path / "t_run", config(srv.url, template=str(template)),
                        progress=False)


@pytest.mark.slow
def test_redo_recomputes_and_invalidates_downstream(tmp_path: Path, base_video: Path) -> None:
    vids, out = videos(tmp_path, base_video), tmp_path / "run"
    enc = TinyEncoder()
    with chat_server() as srv:
        caption_run([vids], out, config(srv.url), progress=False)
        align_run(RunDir(out), [], AlignConfig(), encoders=[enc], progress=False)
        rd = RunDir(out)
        old_caps = pd.read_parquet(out / "captions")
        assert len(status_records(rd, "align")) == 3
        assert (out / "aligned").exists()

        # a different encoder for align is refused too (scores of two encoders never mix)
        with pytest.raises(SettingsChanged, match="align results .*encoders"):
            align_run(rd, [], AlignConfig(), encoders=[TinyEncoder(dim=8)], progress=False)
        # only the filter changed: not a stage setting, the scores are reused
        s = align_run(rd, [], AlignConfig(keep_top=2), encoders=[enc], progress=False)
        assert s.skipped == 3 and s.done == 0

        n = srv.requests
        _, caps = caption_run([vids], out, config(srv.url, block_words=50), redo=True,
                              progress=False)
        assert caps.done == 3 and srv.requests > n
        new_caps = pd.read_parquet(out / "captions")
        assert new_caps["config_id"].nunique() == 1
        assert set(new_caps["config_id"]).isdisjoint(old_caps["config_id"])
        # align was computed from the old captions: cleared, not left beside the new ones
        assert status_records(rd, "align") == []
        assert not (out / "aligned").exists()
        assert rd.fingerprints.read("align") is None
        assert json.loads((out / "config" / "caption.json").read_text())["caption"][
            "block_words"] == 50
        s = align_run(rd, [], AlignConfig(), encoders=[enc], progress=False)
        assert s.done == 3
        aligned = pd.read_parquet(out / "aligned")
        assert aligned["config_id"].nunique() == 1
        assert set(aligned["text"]) <= set(new_caps["text"])
        # redo of align with another encoder rescored every video
        s = align_run(rd, [], AlignConfig(), encoders=[TinyEncoder(dim=8)], redo=True,
                      progress=False)
        assert s.done == 3 and s.skipped == 0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*unaligned LLM captions")
def test_cli_refuses_in_one_line_and_index_follows_the_rule(tmp_path: Path,
                                                            base_video: Path) -> None:
    from howtocap.errors import HowtocapError
    from howtocap.search.index import build_index

    vids, out = videos(tmp_path, base_video, n=2), tmp_path / "run"
    with chat_server() as srv:
        caption_run([vids], out, config(srv.url), progress=False)
        res = run_cli("caption", str(vids), "--out", str(out), "--llm-url", srv.url,
                      "--parse-workers", "0",
                      "--concurrency", "2", "--block-words", "50", "--quiet")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "block_words 200 -> 50" in lines[0]
    assert "--redo" in lines[0] and "Traceback" not in res.stderr

    (out / "videos.parquet").unlink()  # text-only index: keeps the test fast
    enc = TinyEncoder()
    build_index(out, encoder=enc, progress=False)
    with pytest.raises(HowtocapError, match=r"other settings \(fps 1.0 -> 2.0\).*--rebuild"):
        build_index(out, encoder=enc, fps=2.0, progress=False)
    info = build_index(out, encoder=enc, fps=2.0, rebuild=True, progress=False)
    assert info.embedded and not info.reused
