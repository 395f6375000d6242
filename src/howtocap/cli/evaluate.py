"""``howtocap eval``: retrieval benchmarks and CrossTask step localisation."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from howtocap.cli.common import user_errors
from howtocap.errors import HowtocapError


class BenchmarkOpt(str, Enum):
    msrvtt = "msrvtt"
    youcook2 = "youcook2"
    msvd = "msvd"
    lsmdc = "lsmdc"
    csv = "csv"
    crosstask = "crosstask"


class InferenceOpt(str, Enum):
    dp = "dp"
    independent = "independent"


class SplitOpt(str, Enum):
    val = "val"
    train = "train"
    all = "all"


class TiesOpt(str, Enum):
    pessimistic = "pessimistic"
    optimistic = "optimistic"
    mean = "mean"


@user_errors
def eval_cmd(
    benchmark: Annotated[BenchmarkOpt, typer.Option(
        "--benchmark", "-b", help="Annotation format: msrvtt (1k-A JSFusion CSV), youcook2 "
        "(annotations JSON or MIL-NCE's validation_youcook.csv, validation clips), msvd "
        "(test_list.txt + raw-captions.pkl), lsmdc "
        "(challenge 1000 TSV), csv (video_id,video_path,caption[,start,end]), crosstask "
        "(step localisation recall; --annotations is the release folder).")],
    annotations: Annotated[Path, typer.Option(help="The benchmark's annotation file "
                                                   "(for msvd: test_list.txt or its folder; for "
                                                   "crosstask: the release folder).")],
    videos: Annotated[Path | None, typer.Option(help="Folder holding the videos "
                                                     "(searched recursively by file stem).")
                      ] = None,
    encoder: Annotated[str, typer.Option(help="default | hf:<id or folder> | "
                                              "openclip:<arch>/<pretrained> | checkpoint")
                       ] = "default",
    frames: Annotated[int, typer.Option(min=1, help="Frames sampled uniformly per clip; "
                                                    "the clip embedding is their mean.")] = 12,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the metrics JSON here.")
                   ] = None,
    ties: Annotated[TiesOpt, typer.Option(help="How equal scores rank the correct item.")
                    ] = TiesOpt.pessimistic,
    limit: Annotated[int | None, typer.Option(help="Only the first N clips (a quick look).")
                     ] = None,
    subset: Annotated[str, typer.Option(help="YouCook2 subset.")] = "validation",
    cache_dir: Annotated[Path | None, typer.Option(
        help="Cache clip embeddings here (crosstask: per-second frame embeddings, default "
             "the user cache, so a re-run does not decode again).")] = None,
    device: Annotated[str | None, typer.Option(help="cuda, cpu, … (default: cuda if present)")
                      ] = None,
    inference: Annotated[InferenceOpt, typer.Option(
        help="crosstask: dp (each step at one second, in canonical order; the paper's) or "
             "independent (each step's best second alone, for comparison).")
                         ] = InferenceOpt.dp,
    split: Annotated[SplitOpt, typer.Option(
        help="crosstask: val (videos_val.csv, the test set), train (videos.csv) or all.")
                     ] = SplitOpt.val,
    features: Annotated[Path | None, typer.Option(
        help="crosstask: folder of <video_id>.npy features at 1 fps (seconds x encoder dim) "
             "used instead of decoding --videos.")] = None,
) -> None:
    """Text-to-video and video-to-text retrieval (R@1/5/10/50, median and mean rank), or
    CrossTask step localisation recall."""
    is_ct = benchmark == BenchmarkOpt.crosstask
    misplaced = [flag for flag, off in (
        ("--frames", frames != 12), ("--ties", ties != TiesOpt.pessimistic),
        ("--limit", limit is not None), ("--subset", subset != "validation"),
    ) if is_ct and off] + [flag for flag, off in (
        ("--inference", inference != InferenceOpt.dp), ("--split", split != SplitOpt.val),
        ("--features", features is not None),
    ) if not is_ct and off]
    if misplaced:
        raise HowtocapError(f"--benchmark {benchmark.value} takes no "
                            f"{', '.join(misplaced)}")
    if is_ct:
        from howtocap.evaluate.crosstask import evaluate_crosstask

        evaluate_crosstask(annotations, videos, encoder, features=features,
                           inference=inference.value, split=split.value, cache_dir=cache_dir,
                           device=device, out=out)
        return
    from howtocap.evaluate.run import evaluate

    kw = {"subset": subset} if benchmark == BenchmarkOpt.youcook2 else {}
    evaluate(benchmark.value, annotations, videos, encoder, n_frames=frames, out=out,
             device=device, limit=limit, ties=ties.value, cache_dir=cache_dir, **kw)
