"""``howtocap samples``: narrated sample videos with known ground truth (``howtocap.samples``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import defaults, user_errors
from howtocap.samples import ground_truth, make_demo_video, make_fixture_set, make_narrated_video

D = defaults(make_fixture_set, make_narrated_video)


@user_errors
def samples_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Folder for the videos (created).")],
    n_videos: Annotated[int, typer.Option("--n-videos", "-n", help="How many videos.")
                        ] = D["n_videos"],
    seed: Annotated[int, typer.Option(help="Which photos/orders are drawn.")] = D["seed"],
    seconds_per_step: Annotated[float, typer.Option(help="Length of each step (s).")
                                ] = D["seconds_per_step"],
    subtitles: Annotated[str, typer.Option(help="Sidecar subtitles: vtt, srt or none.")]
    = D["subtitles"],
    audio: Annotated[bool, typer.Option(help="Speak the narration (espeak-ng).")] = D["audio"],
    narration_lead: Annotated[float, typer.Option(
        help="Shift speech vs. its step (s); negative = speech comes first.")
    ] = D["narration_lead"],
    demo: Annotated[bool, typer.Option(help="Write only the 30-s demo video.")] = False,
    chatter: Annotated[int, typer.Option(
        min=0, help="Channel-chatter segments per video (a presenter talks about the channel; "
                    "kind=chatter in ground_truth.csv).")] = D["chatter"],
    fillers: Annotated[int, typer.Option(
        min=0, help="Filler segments per video (spoken filler or meta-talk over a step, e.g. "
                    "'so yeah, let's see'; kind=filler in ground_truth.csv).")
    ] = D["fillers"],
    tdr: Annotated[bool, typer.Option(
        "--tdr", help="Write a `howtocap tdr` dataset instead: N videos per goal (3 goals), "
                      "annotations.json (YouCook2 form), scripts.json.")] = False,
) -> None:
    """Make narrated sample videos with known ground truth (ground_truth.csv)."""
    subs = None if subtitles.lower() == "none" else subtitles.lower()
    if tdr:
        from howtocap.tdr.synth import make_tdr_set

        ts = make_tdr_set(out_dir, videos_per_goal=n_videos, seed=seed, audio=audio,
                          seconds_per_step=seconds_per_step)
        typer.echo(f"{len(ts.video_ids)} videos in {ts.videos_dir}\n"
                   f"annotations: {ts.annotations}\nscripts: {ts.scripts}")
        return
    if demo:
        videos = [make_demo_video(out_dir, subtitles=subs)]
    else:
        videos = make_fixture_set(out_dir, n_videos=n_videos, seed=seed,
                                  seconds_per_step=seconds_per_step, subtitles=subs,
                                  audio=audio, narration_lead=narration_lead,
                                  chatter=chatter, fillers=fillers)
    ground_truth(videos).to_csv(Path(out_dir) / "ground_truth.csv", index=False)
    for v in videos:
        typer.echo(f"{v.video_path}  {v.duration:.0f} s  {len(v.steps)} steps")
    typer.echo(f"ground truth: {Path(out_dir) / 'ground_truth.csv'}")
