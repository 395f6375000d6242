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
    MaxAttemptsOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    WorkersOpt,
    err,
    load_yaml_config,
    out,
    parse_shard,
    report_summary,
    user_errors,
    validated,
)
from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY
from howtocap.llm.prompt import DEFAULT_TEMPLATE_NAME, TEMPLATE_NAMES
from howtocap.subtitles.policy import ASR_MODES

LLM_NAMES = tuple(REGISTRY)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Narrated videos -> timestamped, video-aligned captions; retrieval "
                       "training, evaluation, search.")


AsrModeOpt = Enum("AsrModeOpt", {m: m for m in ASR_MODES}, type=str)  # type: ignore[misc]


Inputs = Annotated[list[Path], typer.Argument(help="Video files, folders of videos, or manifest "
                                              "CSVs (video_id,video_path[,subtitle_path]).")]
OptionalInputs = Annotated[list[Path] | None, typer.Argument(
    help="Video files, folders of videos, or manifest CSVs (video_id,video_path"
         "[,subtitle_path]). None: caption every video of --subtitles from its text alone.",
    show_default=False)]
OutDir = Annotated[Path, typer.Option("--out", "-o", help="Run directory (created).")]


def _caption_config(v: dict[str, Any]) -> Any:
    """The typed settings of `caption` (and `run`), validated before anything is written."""
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.llm import LLMOptions
    from howtocap.llm.base import GenerationConfig
    from howtocap.llm.captioner import CaptionConfig

    gen = {k: v[k] for k in ("temperature", "max_tokens", "seed") if v.get(k) is not None}
    if v.get("stop"):
        gen["stop"] = list(v["stop"])
    cap: dict[str, Any] = {"block_words": v["block_words"], "clip_seconds": v["clip_seconds"],
                           "constrain": v["constrain"], "drop_chatter": not v["keep_chatter"],
                           "reject_fillers": not v["keep_fillers"],
                           "generation": validated(GenerationConfig, **gen)}
    if v.get("template"):
        cap["template"] = str(v["template"])
    vlm = None
    if v.get("vlm_url"):
        from howtocap.errors import HowtocapError
        from howtocap.llm.vlm import VLMOptions

        if v.get("llm_url"):
            raise HowtocapError("give --llm-url or --vlm-url, not both: the VLM writes the "
                                "captions")
        vlm = validated(VLMOptions, url=v["vlm_url"], model=v.get("vlm_model"),
                        frames=v["vlm_frames"])
    return validated(
        CaptionRunConfig,
        subtitles=str(v["subtitles"]) if v.get("subtitles") else None,
        ids=str(v["ids"]) if v.get("ids") else None, limit=v.get("limit"),
        asr=AsrModeOpt(v["asr"]).value, asr_model=v["asr_model"],
        llm=validated(LLMOptions, name=v["llm"], url=v["llm_url"], model=v["llm_model"],
                      api_key_env=v["api_key_env"], concurrency=v["concurrency"],
                      timeout=v["llm_timeout"], max_retries=v["llm_retries"]),
        caption=validated(CaptionConfig, **cap), vlm=vlm)


def _runner(v: dict[str, Any]) -> Any:
    from howtocap.engine.runners import make_runner

    return make_runner(RunnerName(v["runner"]).value, workers=v.get("workers"),
                       ray_address=v["ray_address"], ray_gpus=v["ray_gpus_per_stage"])


@app.command()
@user_errors
def caption(
    ctx: typer.Context,
    out_dir: OutDir,
    inputs: OptionalInputs = None,
    subtitles: Annotated[Path | None, typer.Option(help="HowTo100M-style subtitles: caption.json, "
                         "a pickle of it, sentencified JSON, a .parquet, or a folder of "
                         "<id>.csv. Without INPUTS: caption every video in it (text only).")]
    = None,
    ids: Annotated[Path | None, typer.Option(help="Caption only these videos: a text file, one "
                                                  "video id a line (# comments).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Caption only the first N videos (of "
                                                          "--subtitles, or of INPUTS).")] = None,
    asr: Annotated[AsrModeOpt, typer.Option(
        help="auto: Whisper only for videos without subtitles; always: Whisper on every video "
             "file, ignoring all subtitles; never: no Whisper (no subtitles = error).")]
    = AsrModeOpt.auto,  # type: ignore[attr-defined]
    asr_model: Annotated[str, typer.Option(help="default (bundled tiny.en), base, a CTranslate2 "
                                                "folder, or a faster-whisper model name.")]
    = "default",
    llm: Annotated[str, typer.Option(help=f"embedded (= {EMBEDDED_DEFAULT}), "
                                          f"{', '.join(LLM_NAMES)}, or a .gguf path.")]
    = "embedded",
    llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server, e.g. "
                                                     "http://127.0.0.1:8080/v1")] = None,
    llm_model: Annotated[str | None, typer.Option(help="Model name sent to --llm-url.")] = None,
    vlm_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible multimodal server (e.g. vLLM serving Qwen2-VL): each block "
             "is sent with --vlm-frames frames of its time span; needs the video files.")]
    = None,
    vlm_model: Annotated[str | None, typer.Option(help="Model name sent to --vlm-url.")] = None,
    vlm_frames: Annotated[int, typer.Option(min=1, max=32, help="Frames per block sent to "
                                                              "--vlm-url.")] = 4,
    api_key_env: Annotated[str, typer.Option(help="Env variable holding the API key.")]
    = "OPENAI_API_KEY",
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight (--llm-url).")] = 4,
    llm_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 120.0,
    llm_retries: Annotated[int, typer.Option(min=0, help="Retries on 429/5xx/timeouts.")] = 3,
    block_words: Annotated[int, typer.Option(min=10, help="Words per LLM block.")] = 200,
    clip_seconds: Annotated[float, typer.Option(help="Caption end = start + this.")] = 8.0,
    template: Annotated[str | None, typer.Option(
        help=f"Prompt: {', '.join(TEMPLATE_NAMES)} (default {DEFAULT_TEMPLATE_NAME}), or a "
             ".txt/.yaml/.json template file.")] = None,
    constrain: Annotated[bool, typer.Option(help="Constrain decoding to '<n>s: caption' lines "
                                                 "(grammar; servers that reject it are asked "
                                                 "without). Off by default (benchmarks/"
                                                 "results/captions.md).")] = False,
    keep_chatter: Annotated[bool, typer.Option(help="Keep captions such as 'Subscribe to the "
                                                    "channel.' (`run`: in the align filter "
                                                    "too).")] = False,
    keep_fillers: Annotated[bool, typer.Option(help="Keep captions that show nothing ('So "
                                                    "yeah, let's see.', 'Take your time.') as "
                                                    "training text; by default they are marked "
                                                    "in captions.parquet's `rejected` column "
                                                    "and not aligned.")] = False,
    temperature: Annotated[float | None, typer.Option()] = None,
    max_tokens: Annotated[int | None, typer.Option()] = None,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    force: Annotated[bool, typer.Option(help="Redo videos already captioned.")] = False,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any of these options.")]
    = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Subtitles (or Whisper ASR) -> LLM captions with timestamps -> DIR/captions.parquet."""
    from howtocap.caption.run import caption_run

    v = load_yaml_config(ctx, config, dict(locals()))
    summaries = caption_run(v["inputs"], v["out_dir"], _caption_config(v), force=v["force"],
                            progress=not v["quiet"], runner=_runner(v),
                            shard=parse_shard(v["shard"]), redo=v["redo"],
                            retry_failed=v["retry_failed"], max_attempts=v["max_attempts"])
    show_captions(v["out_dir"], limit=0)
    report_rejected(v["out_dir"])
    report_summary(*summaries)


def report_rejected(run_dir: Path) -> None:
    """One line: how many captions were rejected as showing nothing, by reason."""
    from howtocap.caption.run import rejected_counts
    from howtocap.engine.rundir import RunDir

    counts = rejected_counts(RunDir(run_dir, create=False))
    if counts:
        by = ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
        err.print(f"rejected {sum(counts.values())} captions that show nothing ({by}): not "
                  "aligned, kept in captions.parquet's `rejected` column (--keep-fillers "
                  "keeps them)", highlight=False)


def _run(**v: Any) -> None:
    """caption -> align in one command, resumable: DIR/captions.parquet, DIR/aligned.parquet,
    DIR/align_report.html. Takes every flag of `caption` and of `align`."""
    from howtocap.align_cli import align_settings, attach_videos, print_align_result
    from howtocap.engine.rundir import RunDir
    from howtocap.pipeline.run import run_pipeline

    v = load_yaml_config(v["ctx"], v["config"], v)
    cap_cfg, align_cfg = _caption_config(v), align_settings(v)
    if v.get("videos"):
        attach_videos(RunDir(v["out_dir"], create=False), v["videos"])
    summaries = run_pipeline(v["inputs"], v["out_dir"], caption=cap_cfg, align=align_cfg,
                             encoders=v["encoder"] or ["default"], runner=_runner(v),
                             shard=parse_shard(v["shard"]), force=v["force"],
                             device=v["device"], progress=not v["quiet"], redo=v["redo"],
                             retry_failed=v["retry_failed"], max_attempts=v["max_attempts"])
    print_align_result(Path(v["out_dir"]), v["shard"])
    show_captions(v["out_dir"], limit=0)
    report_rejected(v["out_dir"])
    report_summary(*summaries)


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

    from howtocap.engine.rundir import RunDir

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
    webdataset = "webdataset"


class ExportWhatOpt(str, Enum):
    auto = "auto"
    captions = "captions"
    aligned = "aligned"
    framecaps = "framecaps"


@app.command()
@user_errors
def export(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    format: Annotated[ExportFmt, typer.Option("--format", "-f")] = ExportFmt.howtocaption,
    what: Annotated[ExportWhatOpt, typer.Option(
        help="auto: kept aligned pairs if aligned, else captions (webdataset: else frame "
             "captions, as `train` does).")] = ExportWhatOpt.auto,
    out_file: Annotated[Path | None, typer.Option(
        "--out", "-o", help="File, or for webdataset a folder [default: DIR/webdataset].")]
    = None,
    unfiltered: Annotated[bool, typer.Option(help="All aligned pairs with their scores, as "
                                                   "HowToCaption's unfiltered release.")] = False,
    content: Annotated[str, typer.Option(
        help="webdataset: frames (JPEGs, for the dual encoder) or embeddings (per-second "
             "frame embeddings of --encoder from the run's cache, for mee).")] = "frames",
    frames_per_clip: Annotated[int, typer.Option(help="webdataset: frames stored per clip "
                                                      "(segment centres).")] = 4,
    image_size: Annotated[int, typer.Option(help="webdataset: frame size (shorter side, "
                                                 "centre crop).")] = 224,
    shard_size: Annotated[int, typer.Option(help="webdataset: clips per shard.")] = 1000,
    encoder: Annotated[str, typer.Option(help="webdataset --content embeddings: the encoder "
                                              "whose cached frame embeddings are stored.")]
    = "default",
    device: Annotated[str | None, typer.Option(help="cpu, cuda, … (embeddings not cached "
                                                    "yet are computed).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Write captions as HowToCaption JSON {video_id: {start, end, text}}, a CSV of pairs, or
    WebDataset tar shards of clips (frames or embeddings + captions) to train at scale."""
    if format == ExportFmt.webdataset:
        from howtocap.errors import HowtocapError
        from howtocap.io.webdataset import export_webdataset

        if unfiltered:
            raise HowtocapError("--unfiltered applies to howtocaption and csv, not webdataset")
        res = export_webdataset(run_dir, out_file, what=what.value, content=content,
                                frames_per_clip=frames_per_clip, image_size=image_size,
                                shard_size=shard_size, encoder=encoder, device=device,
                                progress=not quiet)
        err.print(f"wrote {res.n_samples} clips ({res.n_captions} {res.kind} captions) in "
                  f"{len(res.shards)} shard(s) to {res.out}"
                  f"{f'; skipped {len(res.skipped)} video(s)' if res.skipped else ''}",
                  highlight=False)
        return
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
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: Annotated[str | None, typer.Option(help=SHARD_HELP)] = None,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Label videos with image captions (Ventura et al.): caption M frames per captioner, keep
    the K best by CLIPScore -> DIR/framecaps.parquet (train on it with `howtocap train`)."""
    from howtocap.framecaps.config import FrameCapsConfig
    from howtocap.framecaps.run import framecaps_run

    summary = framecaps_run(inputs, out_dir, captioners=captioner or ["default"], scorer=scorer,
                            cfg=FrameCapsConfig(frames=frames, top_k=top_k), device=device,
                            progress=not quiet, shard=parse_shard(shard),
                            runner=_runner(dict(locals())), redo=redo,
                            retry_failed=retry_failed, max_attempts=max_attempts)
    report_summary(summary)


def _register_commands() -> None:
    """Commands that live beside their library code (each module's ``register(app)``)."""
    from howtocap.align_cli import align_cmd
    from howtocap.align_cli import register as register_align
    from howtocap.dvc.cli import register as register_dvc
    from howtocap.encoders.cli import register as register_encoders
    from howtocap.evaluate.cli import register as register_eval
    from howtocap.report.cli import register as register_stats
    from howtocap.samples_cli import register as register_samples
    from howtocap.search.cli import register as register_search
    from howtocap.status_cli import register as register_status
    from howtocap.subtitles_cli import register as register_subtitles
    from howtocap.tdr.cli import register as register_tdr
    from howtocap.train.cli import register as register_train

    register_align(app)
    run = _command_from(caption, align_cmd, drop=("run_dir",))(_run)
    app.command("run")(user_errors(run))
    register_encoders(app)
    register_samples(app)
    register_search(app)
    register_train(app)
    register_eval(app)
    register_dvc(app)
    register_tdr(app)
    register_stats(app)
    register_subtitles(app)
    register_status(app)


_register_commands()


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
