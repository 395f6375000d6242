"""``howtocap dvc-eval``: a thin Typer layer over ``howtocap.dvc.evaluate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from howtocap.cli.common import defaults, out, user_errors
from howtocap.dvc.evaluate import DEFAULT_TIOUS, evaluate

D = defaults(evaluate)


@user_errors
def dvc_eval_cmd(
    pred: Annotated[Path, typer.Option("--pred", help="Predictions: {\"results\": {vid: "
                                       "[{\"timestamp\": [s, e], \"sentence\": ...}]}} "
                                       "(ActivityNet / PDVC form).")],
    gt: Annotated[Path, typer.Option("--gt", help="Ground truth: YouCook2 annotations JSON "
                                     "({\"database\": ...}) or ActivityNet Captions JSON.")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Write the scores JSON here.")],
    split: Annotated[str | None, typer.Option(help="Keep the YouCook2 videos of this subset "
                                              "(training, validation, testing).")] = None,
    tiou: Annotated[list[float] | None, typer.Option(
        "--tiou", help="tIoU threshold (repeatable) \\[default: "
                       f"{' '.join(map(str, DEFAULT_TIOUS))}].")] = None,
    meteor: Annotated[bool, typer.Option(help="Compute METEOR (needs Java, slow to start).")]
    = D["meteor"],
    max_proposals: Annotated[int, typer.Option(min=1, help="Predictions kept per video (the "
                                               "first N), as the reference evaluation.")]
    = D["max_proposals"],
) -> None:
    """Dense video captioning scores (ActivityNet protocol): BLEU-4, METEOR, CIDEr, ROUGE-L on
    segments matched at each tIoU, plus segment recall/precision, averaged over thresholds."""
    from howtocap.atomic import atomic_write_text
    from howtocap.dvc.data import load_ground_truth, load_predictions

    result = evaluate(load_predictions(pred), load_ground_truth(gt),
                      tuple(tiou) if tiou else DEFAULT_TIOUS, split=split, meteor=meteor,
                      max_proposals=max_proposals)
    result["inputs"] = {"pred": str(pred), "gt": str(gt)}
    out_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_file, json.dumps(result, indent=2) + "\n")
    _print_table(result)
    typer.echo(str(out_file))


def _print_table(result: dict[str, Any]) -> None:
    from rich.table import Table

    metrics = ("Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "Recall", "Precision", "F1")
    c = result["counts"]
    table = Table(title=f"dense captioning, {c['gt_videos']} videos "
                        f"({c['gt_videos_with_predictions']} predicted), x100 as papers print")
    table.add_column("tIoU")
    for m in metrics:
        table.add_column(m, justify="right")
    for name, row in [*result["per_tiou"].items(), ("mean", result["scores"])]:
        table.add_row(name, *("–" if row.get(m) is None else f"{100 * row[m]:.2f}"
                              for m in metrics))
    out.print(table)
    out.print(f"tokenizer: {result['tokenizer']}; METEOR: {result['meteor'] or 'not computed'}",
              highlight=False)
