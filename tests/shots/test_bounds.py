"""A window is cut back to the shot that holds its middle, and shots_by_video groups the table."""

from pathlib import Path

import pandas as pd

from howtocap.engine.rundir import RunDir
from howtocap.shots.bounds import clamp_to_shot, shots_by_video
from tests.support.stages import write_rows

SHOTS = [(0.0, 4.0), (4.0, 9.5), (9.5, 20.0)]


def test_window_across_a_cut_keeps_the_side_of_its_middle() -> None:
    assert clamp_to_shot(SHOTS, 2.0, 10.0) == (4.0, 9.5)  # middle 6.0: the second shot
    assert clamp_to_shot(SHOTS, 8.0, 16.0) == (9.5, 16.0)  # middle 12.0: the third
    assert clamp_to_shot(SHOTS, 5.0, 9.0) == (5.0, 9.0)  # inside one shot: unchanged


def test_a_cut_belongs_to_the_later_shot_and_outside_is_none() -> None:
    assert clamp_to_shot(SHOTS, 2.0, 6.0) == (4.0, 6.0)  # middle 4.0, on a cut: the later shot
    assert clamp_to_shot(SHOTS, 22.0, 30.0) == (22.0, 30.0)
    assert clamp_to_shot([], 1.0, 3.0) == (1.0, 3.0)


def test_shots_by_video_groups_and_sorts(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    assert shots_by_video(rd.table("shots")) == {}
    write_rows(rd, "shots", pd.DataFrame({"video_id": ["b", "a", "a"], "start": [0.0, 5.0, 0.0],
                                          "end": [3.0, 8.0, 5.0]}))
    assert shots_by_video(rd.table("shots")) == {"a": [(0.0, 5.0), (5.0, 8.0)],
                                                 "b": [(0.0, 3.0)]}
