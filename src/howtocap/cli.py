"""The ``howtocap`` command: a thin Typer layer over library functions.

Each command maps its flags one-to-one onto a library call. User mistakes (HowtocapError) print
one red line and exit 2; a batch where some videos failed exits 1 after finishing the rest.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from howtocap.cliutil import (
    SHARD_HELP,
    err,
    load_yaml_config,
    out,
    report_summary,
    user_errors,
)
from howtocap.pipeline.runner import Shard

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Narrated videos -> timestamped, video-aligned captions; retrieval "
                       "training, evaluation, search.")


class AsrModeOpt(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


Inputs = Annotated[list[Path], typer.Argument(help="Video files, folders of videos, or manifest "
                                              "CSVs (video_id,video_path[,subtitle_path]).")]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Run directory (created).")]


def _caption_config(v: dict[str, Any]) -> Any:
    from howtocap.pipeline.caption import CaptionRunConfig, LLMOptions

    gen = {k: v[k] for k in ("temperature", "max_tokens", "seed") if v.get(k) is not None}
    if v.get("stop"):
        gen["stop"] = list(v["stop"])
    cap: dict[str, Any] = {"block_words": v["block_words"], "clip_seconds": v["clip_seconds"]}
    if v.get("template"):
        cap["template"] = str(v["template"])
    if gen:
        cap["generation"] = gen
    return CaptionRunConfig(
        subtitles=str(v["subtitles"]) if v.get("subtitles") else None,
        asr=AsrModeOpt(v["asr"]).value, asr_model=v["asr_model"],
        llm=LLMOptions(name=v["llm"], url=v["llm_url"], model=v["llm_model"],
                       api_key_env=v["api_key_env"], concurrency=v["concurrency"],
                       timeout=v["llm_timeout"], max_retries=v["llm_retries"]),
        caption=cap)


@app.command()
@user_errors
def caption(
    ctx: typer.Context,
    inputs: Inputs,
    out_dir: OutDir,
    subtitles: Annotated[Path | None, typer.Option(help="HowTo100M-style subtitles: caption.json, "
                         "a pickle of it, sentencified JSON, or a folder of <id>.csv.")] = None,
    asr: Annotated[AsrModeOpt, typer.Option(help="auto: only without subtitles.")]
    = AsrModeOpt.auto,
    asr_model: Annotated[str, typer.Option(help="default (bundled tiny.en), base, a CTranslate2 "
                                                "folder, or a faster-whisper model name.")]
    = "default",
    llm: Annotated[str, typer.Option(help="embedded, smollm2, qwen2.5-coder-0.5b, or a .gguf "
                                          "path.")] = "embedded",
    llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server, e.g. "
                                                     "http://127.0.0.1:8080/v1")] = None,
    llm_model: Annotated[str | None, typer.Option(help="Model name sent to --llm-url.")] = None,
    api_key_env: Annotated[str, typer.Option(help="Env variable holding the API key.")]
    = "OPENAI_API_KEY",
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight (--llm-url).")] = 4,
    llm_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 120.0,
    llm_retries: Annotated[int, typer.Option(min=0, help="Retries on 429/5xx/timeouts.")] = 3,
    block_words: Annotated[int, typer.Option(min=10, help="Words per LLM block.")] = 200,
    clip_seconds: Annotated[float, typer.Option(help="Caption end = start + this.")] = 8.0,
    template: Annotated[Path | None, typer.Option(help="Prompt template file.")] = None,
    temperature: Annotated[float | None, typer.Option()] = None,
    max_tokens: Annotated[int | None, typer.Option()] = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    force: Annotated[bool, typer.Option(help="Redo videos already captioned.")] = False,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any of these options.")]
    = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Subtitles (or Whisper ASR) -> LLM captions with timestamps -> DIR/captions.parquet."""
    from howtocap.pipeline.caption import caption_run

    v = load_yaml_config(ctx, config, dict(locals()))
    summary = caption_run(v["inputs"], v["out_dir"], _caption_config(v), force=v["force"],
                          progress=not v["quiet"], shard=Shard.parse(v["shard"]))
    show_captions(v["out_dir"], limit=0)
    report_summary(summary)


def _run(**v: Any) -> None:
    """caption -> align in one command, resumable: DIR/captions.parquet, DIR/aligned.parquet,
    DIR/align_report.html. Takes every flag of `caption` and of `align`."""
    from howtocap.align_cli import align_from_options
    from howtocap.pipeline.caption import caption_run

    v = load_yaml_config(v["ctx"], v["config"], v)
    captioned = caption_run(v["inputs"], v["out_dir"], _caption_config(v), force=v["force"],
                            progress=not v["quiet"], shard=Shard.parse(v["shard"]))
    aligned = align_from_options({**v, "run_dir": v["out_dir"]})
    show_captions(v["out_dir"], limit=0)
    report_summary(captioned, aligned)


def _command_from(*commands: Any, drop: tuple[str, ...]) -> Any:
    """A command whose flags are the union of other commands' (first one wins on a clash), so
    `run` can never drift from `caption` and `align`."""
    import inspect

    params: dict[str, inspect.Parameter] = {}
    for cmd in commands:
        for p in inspect.signature(cmd, eval_str=True).parameters.values():
            if p.name not in params and p.name not in drop:
                params[p.name] = p.replace(kind=inspect.Parameter.KEYWORD_ONLY)

    def decorate(fn: Any) -> Any:
        fn.__signature__ = inspect.Signature(list(params.values()))
        fn.__annotations__ = {n: p.annotation for n, p in params.items()}
        return fn

    return decorate


def show_captions(run_dir: Path, limit: int = 20) -> None:
    """Print a run's captions as a table (all of them when ``limit`` is 0)."""
    from rich.table import Table

    from howtocap.rundir import RunDir

    rd = RunDir(run_dir, create=False)
    aligned = rd.table_path("aligned").exists()
    df = rd.read_table("aligned" if aligned else "captions")
    if limit:
        df = df.head(limit)
    if not len(df) or limit == 0 and not sys.stdout.isatty() and len(df) > 200:
        return
    table = Table(title=f"{'aligned ' if aligned else ''}captions in {run_dir}")
    for col in ["video", "time", *(["aligned", "score", "kept"] if aligned else []), "caption"]:
        table.add_column(col, no_wrap=col != "caption")
    for row in df.itertuples():
        cells = [row.video_id]
        if aligned:
            cells += [f"{row.orig_start:6.1f}–{row.orig_end:6.1f}",
                      f"{row.start:6.1f}–{row.end:6.1f} ({row.offset:+.0f}s)",
                      f"{row.score:.3f}", "✓" if row.kept else "✗"]
        else:
            cells.append(f"{row.start:6.1f}–{row.end:6.1f}")
        table.add_row(*cells, row.text)
    out.print(table)


class ExportFmt(str, Enum):
    howtocaption = "howtocaption"
    csv = "csv"


class ExportWhatOpt(str, Enum):
    auto = "auto"
    captions = "captions"
    aligned = "aligned"


@app.command()
@user_errors
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    format: Annotated[ExportFmt, typer.Option("--format", "-f")] = ExportFmt.howtocaption,
    what: Annotated[ExportWhatOpt, typer.Option(help="auto: kept aligned pairs if aligned, "
                                                     "else captions.")] = ExportWhatOpt.auto,
    out_file: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    unfiltered: Annotated[bool, typer.Option(help="All aligned pairs with their scores, as "
                                                   "HowToCaption's unfiltered release.")] = False,
) -> None:
    """Write captions as HowToCaption JSON {video_id: {start, end, text}} or a CSV of pairs."""
    from howtocap.io.export import export_run

    path, n = export_run(run_dir, fmt=format.value, what=what.value, out=out_file,
                         unfiltered=unfiltered)
    err.print(f"wrote {n} captions to {path}")


@app.command()
@user_errors
def framecaps(
    inputs: Inputs,
    out_dir: OutDir,
    captioner: Annotated[list[str] | None, typer.Option(
        "--captioner", help="Image captioner (repeatable): default (ImageNet class names, "
                            "embedded) or hf:<id|folder> (BLIP, GIT, …).")] = None,
    scorer: Annotated[str, typer.Option(help="Image–text encoder for CLIPScore.")] = "default",
    frames: Annotated[int, typer.Option(min=1, help="Frames captioned per video (M).")] = 10,
    top_k: Annotated[int, typer.Option(min=1, help="Captions kept per captioner (K).")] = 2,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (default: cuda if "
                                                    "available).")] = None,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Label videos with image captions (Ventura et al.): caption M frames per captioner, keep
    the K best by CLIPScore -> DIR/framecaps.parquet (train on it with `howtocap train`)."""
    from howtocap.framecaps import FrameCapsConfig, framecaps_run

    summary = framecaps_run(inputs, out_dir, captioners=captioner or ["default"], scorer=scorer,
                            cfg=FrameCapsConfig(frames=frames, top_k=top_k), device=device,
                            progress=not quiet, shard=Shard.parse(shard))
    report_summary(summary)


def _register_commands() -> None:
    """Commands that live beside their library code (each module's ``register(app)``)."""
    from howtocap.align_cli import align_cmd
    from howtocap.align_cli import register as register_align
    from howtocap.encoders.cli import register as register_encoders
    from howtocap.evaluate.cli import register as register_eval
    from howtocap.report.stats import register as register_stats
    from howtocap.samples import register as register_samples
    from howtocap.search.cli import register as register_search
    from howtocap.train.cli import register as register_train

    register_align(app)
    run = _command_from(caption, align_cmd, drop=("run_dir",))(_run)
    app.command("run")(user_errors(run))
    register_encoders(app)
    register_samples(app)
    register_search(app)
    register_train(app)
    register_eval(app)
    register_stats(app)


_register_commands()


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
