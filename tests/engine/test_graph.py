"""The stage graph behind ``--redo`` and ``howtocap status`` is derived from what each stage
declares it reads and writes (``engine/graph.py``), never typed by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from howtocap.engine.core import SettingsChanged, prepare_stages, run_stage
from howtocap.engine.graph import StageGraph, discover
from howtocap.engine.rundir import RunDir
from howtocap.engine.stage import BaseStage, StageOutput, VideoInput
from howtocap.io.inputs import VideoItem
from howtocap.pipeline.run import PIPELINE, stage_graph


def test_derived_graph_is_the_one_the_pipeline_always_had() -> None:
    """What ``--redo`` cleared before the graph was derived (``DOWNSTREAM`` and
    ``STAGE_TABLES`` of pipeline/core.py, written out here)."""
    downstream = {"subtitles": ("caption", "align"), "caption": ("align",),
                  "frames": ("align", "framecaps"), "align": (), "framecaps": ()}
    tables = {"subtitles": ("subtitles",), "caption": ("captions",),
              "align": ("align_scores", "aligned"), "framecaps": ("framecaps",), "frames": ()}
    for graph in (stage_graph(), discover()):
        assert {n: graph.downstream(n) for n in downstream} == downstream
        assert {n: graph.tables(n) for n in tables} == tables
        # status: caption's videos come from subtitles (every video reaches it), align's from
        # the captioned ones
        assert (graph.feeder("caption"), graph.is_source("subtitles")) == ("subtitles", True)
        assert (graph.feeder("align"), graph.is_source("caption")) == ("caption", False)
        assert graph.feeder("framecaps") is None and graph.feeder("subtitles") is None
        # shots feed align only when it is asked for (--within-shot: the instance reads them)
        assert graph.downstream("shots") == () and graph.tables("shots") == ("shots",)
    assert stage_graph().names == ["download", "subtitles", "caption", "frames", "shots",
                                   "signals", "align", "framecaps", "tdr_frames"]
    # signals reads shots when the run has them (the instance does): every video reaches it
    assert stage_graph().is_source("signals")
    # downloads feed later stages as local files (the run resolves them), not as a table
    assert stage_graph().downstream("download") == ()


def test_discovery_finds_every_step_the_pipeline_composes() -> None:
    assert sorted(discover().names) == sorted(s.name for s in PIPELINE)


class Numbers(BaseStage):
    name = "numbers"
    writes = ("toy_numbers",)

    def __init__(self, scale: int) -> None:
        self.scale = scale

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "scale": self.scale}

    def process(self, video: VideoInput) -> StageOutput:
        n = int(video.video_id[1:])
        return StageOutput({"toy_numbers": pd.DataFrame({"video_id": [video.video_id],
                                                         "value": [n * self.scale]})})


class Doubled(BaseStage):
    """A new stage that only declares it reads the numbers stage's table."""

    name = "doubled"
    reads = ("toy_numbers",)
    writes = ("toy_doubled",)

    def process(self, video: VideoInput) -> StageOutput:
        df = video.tables["toy_numbers"]
        return StageOutput({"toy_doubled": df.assign(value=df["value"] * 2)})


class Unrelated(BaseStage):
    name = "unrelated"
    writes = ("toy_other",)

    def process(self, video: VideoInput) -> StageOutput:
        return StageOutput({"toy_other": pd.DataFrame({"video_id": [video.video_id]})})


def test_redo_clears_a_new_stage_that_declares_it_reads_the_redone_ones_table(
        tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "run")
    items = [VideoItem(f"v{i}", None) for i in range(3)]
    for stage in (Numbers(1), Doubled(), Unrelated()):
        summary = run_stage(rd, items, stage, progress=False)
        assert summary.done == 3
    graph = StageGraph([Numbers, Doubled, Unrelated])
    assert graph.downstream("numbers") == ("doubled",)

    with pytest.raises(SettingsChanged, match="invalidate doubled"):
        prepare_stages(rd, [Numbers(10)], graph=graph)
    assert "doubled" in rd.stages_with_results()  # a refusal touches nothing
    assert rd.has_table("toy_doubled")

    ids = prepare_stages(rd, [Numbers(10)], redo=True, graph=graph)
    for name, table in (("numbers", "toy_numbers"), ("doubled", "toy_doubled")):
        assert name not in rd.stages_with_results()
        assert not rd.has_table(table) and not (rd.root / table).exists()
    assert rd.fingerprints.read("doubled") is None  # its old results' settings went with them
    assert rd.fingerprints.read("numbers")["config_id"] == ids["numbers"]  # the new settings
    assert "unrelated" in rd.stages_with_results()
    assert rd.fingerprints.read("unrelated") is not None
    assert rd.table("toy_other")["video_id"].nunique() == 3  # its results untouched

    # recomputed from the new numbers, downstream too
    run_stage(rd, items, Numbers(10), progress=False)
    run_stage(rd, items, Doubled(), progress=False)
    assert sorted(rd.table("toy_doubled")["value"]) == [0, 20, 40]
