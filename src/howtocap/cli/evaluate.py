"""``howtocap eval``: retrieval benchmarks and CrossTask step localisation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from howtocap import evaluate as ev
from howtocap.cli.common import DeviceOpt, defaults, user_errors
from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError

Benchmark = Literal["msrvtt", "youcook2", "msvd", "lsmdc", "csv", "crosstask"]
RETRIEVAL_ONLY = ("frames", "ties", "limit", "subset")
CROSSTASK_ONLY = ("inference", "split", "features")


@user_errors
def eval_cmd(
    benchmark: Annotated[Benchmark, typer.Option(
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
                       ] = ENCODER,
    frames: Annotated[int, typer.Option(min=1, help="Frames sampled uniformly per clip; "
                                                    "the clip embedding is their mean.")
                      ] = ev.N_FRAMES,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the metrics JSON here.")
                   ] = None,
    ties: Annotated[Literal["pessimistic", "optimistic", "mean"], typer.Option(
        help="How equal scores rank the correct item.")] = ev.TIES,
    limit: Annotated[int | None, typer.Option(help="Only the first N clips (a quick look).")
                     ] = None,
    subset: Annotated[str, typer.Option(help="YouCook2 subset.")] = ev.YOUCOOK2_SUBSET,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Cache clip embeddings here (crosstask: per-second frame embeddings, default "
             "the user cache, so a re-run does not decode again).")] = None,
    device: DeviceOpt = None,
    inference: Annotated[Literal["dp", "independent"], typer.Option(
        help="crosstask: dp (each step at one second, in canonical order; the paper's) or "
             "independent (each step's best second alone, for comparison).")
                         ] = ev.CROSSTASK_INFERENCE,
    split: Annotated[Literal["val", "train", "all"], typer.Option(
        help="crosstask: val (videos_val.csv, the test set), train (videos.csv) or all.")
                     ] = ev.CROSSTASK_SPLIT,
    features: Annotated[Path | None, typer.Option(
        help="crosstask: folder of <video_id>.npy features at 1 fps (seconds x encoder dim) "
             "used instead of decoding --videos.")] = None,
) -> None:
    """Text-to-video and video-to-text retrieval (R@1/5/10/50, median and mean rank), or
    CrossTask step localisation recall."""
    is_ct = benchmark == "crosstask"
    given = locals()
    misplaced = [f"--{name}" for name in (RETRIEVAL_ONLY if is_ct else CROSSTASK_ONLY)
                 if given[name] != DEFAULTS[name]]
    if misplaced:
        raise HowtocapError(f"--benchmark {benchmark} takes no {', '.join(misplaced)}")
    if is_ct:
        from howtocap.evaluate.crosstask import evaluate_crosstask

        evaluate_crosstask(annotations, videos, encoder, features=features,
                           inference=inference, split=split, cache_dir=cache_dir,
                           device=device, out=out)
        return
    from howtocap.evaluate.run import evaluate

    kw = {"subset": subset} if benchmark == "youcook2" else {}
    evaluate(benchmark, annotations, videos, encoder, n_frames=frames, out=out,
             device=device, limit=limit, ties=ties, cache_dir=cache_dir, **kw)


DEFAULTS = defaults(eval_cmd)
