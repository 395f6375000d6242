"""``howtocap tdr train | eval | export``: a thin Typer layer over ``howtocap.tdr.api``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import DeviceOpt, err, user_errors
from howtocap.cli.options import settings_options
from howtocap.encoders.defaults import ENCODER
from howtocap.subtitles.policy import ASR_MODE
from howtocap.tdr.config import EVERY, SPLIT, TdrConfig

AnnOpt = Annotated[Path, typer.Option(
    "--annotations", help="YouCook2-format annotations JSON ({\"database\": {vid: ...}}).")]
ScriptsOpt = Annotated[Path, typer.Option(
    "--scripts", help="Scripts JSON: {goal: [[sentence, ...], ...]} or "
                      "{goal: [{\"split_ins\": [...]}, ...]}; goal = the video's recipe_type.")]
VideosOpt = Annotated[Path, typer.Option("--videos", help="Folder holding <video_id>.<ext>.")]
SubsOpt = Annotated[str | None, typer.Option(
    "--subtitles", help="Transcripts for videos without a sidecar .vtt/.srt (HowTo100M "
                        "caption.json, pickle, CSV folder).")]
AsrOpt = Annotated[str, typer.Option(
    "--asr", help="auto: sidecar/--subtitles, else Whisper; always; never.")]
WorkOpt = Annotated[Path | None, typer.Option(
    "--work", help="Where per-video frame features are kept (resumable) [default: "
                   "CHECKPOINT/work, or .howtocap-tdr for a baseline].")]

HELP = ("Temporal description retrieval (Jung et al. 2023): retrieve the script sentence of "
        "each frame's step.")


def _report(problems: list[str], line: str) -> None:
    """The inputs left out, one line each, then the result; exit 1 when any was left out."""
    for p in problems:
        err.print(f"[yellow]skipped[/yellow] {p}", highlight=False)
    err.print(line, highlight=False)
    if problems:
        raise typer.Exit(1)


@user_errors
@settings_options(cfg=TdrConfig)
def train_cmd(
    annotations: AnnOpt, scripts: ScriptsOpt, videos: VideosOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint folder.")],
    *,
    cfg: TdrConfig,
    subtitles: SubsOpt = None, asr: AsrOpt = ASR_MODE, work: WorkOpt = None,
    device: DeviceOpt = None,
) -> None:
    """Train on the training split; writes OUT/tdr.pt and OUT/train_log.csv."""
    from howtocap.tdr.api import train

    res = train(annotations, scripts, videos, out, cfg, subtitles=subtitles, asr=asr,
                work=work, device=device)
    _report(res.problems, f"[green]tdr train[/green]: {res.videos} videos, {res.frames} "
                          f"frames, {cfg.epochs} epochs in {res.seconds:.1f} s, last L_TDR "
                          f"{res.log[-1]['loss_tdr']:.3f} → {res.checkpoint}")


@user_errors
def eval_cmd(
    annotations: AnnOpt, scripts: ScriptsOpt, videos: VideosOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Metrics JSON.")],
    checkpoint: Annotated[Path | None, typer.Option(
        help="A `tdr train` folder (or its tdr.pt).")] = None,
    baseline: Annotated[str | None, typer.Option(
        help="Instead of a checkpoint: bm25 (transcript), text, image or joint (frozen "
             "encoder cosine).")] = None,
    split: Annotated[str, typer.Option(help="training, validation or testing.")
                     ] = SPLIT,
    encoder: Annotated[str, typer.Option(help="Baselines: the frozen encoder.")
                       ] = ENCODER,
    every: Annotated[float, typer.Option(help="Baselines: seconds between frames.")] = EVERY,
    subtitles: SubsOpt = None, asr: AsrOpt = ASR_MODE, work: WorkOpt = None,
    device: DeviceOpt = None,
) -> None:
    """R@1/3/5 among the video's gold captions, NDCG@1/3/5 over the goal's script sentences
    (ROUGE-L relevance), R@1 on isolated frames."""
    from howtocap.tdr.api import evaluate, summary_line

    res = evaluate(annotations, scripts, videos, checkpoint=checkpoint, baseline=baseline,
                   split=split, subtitles=subtitles, asr=asr, work=work, encoder=encoder,
                   every=every, device=device)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    _report(res["problems"], f"[green]tdr eval[/green] {res['method']} on {res['videos']} "
                             f"videos, {res['frames']} frames: {summary_line(res)} → {out}")


@user_errors
def export_cmd(
    annotations: AnnOpt, scripts: ScriptsOpt, videos: VideosOpt,
    checkpoint: Annotated[Path, typer.Option(help="A `tdr train` folder (or its tdr.pt).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Features folder.")],
    split: Annotated[str | None, typer.Option(help="Only this split [default: all].")
                     ] = None,
    subtitles: SubsOpt = None, asr: AsrOpt = ASR_MODE, work: WorkOpt = None,
    device: DeviceOpt = None,
) -> None:
    """OUT/<vid>.npy, frames × (d_g + d_r): frame ⊕ retrieved sentence, for PDVC-style DVC
    training, and OUT/retrieved.parquet (video_id, time, sentence, score)."""
    from howtocap.tdr.api import export

    info = export(annotations, scripts, videos, out, checkpoint=checkpoint, split=split,
                  subtitles=subtitles, asr=asr, work=work, device=device)
    _report(info["problems"], f"[green]tdr export[/green]: {info['videos']} videos, "
                              f"{info['d_g']}+{info['d_r']} dims per frame → {out}")
