"""``howtocap caption``: subtitles or Whisper -> LLM captions with timestamps.

Its options are named types here because ``run`` takes every one of them too.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from howtocap.caption.prompt import DEFAULT_TEMPLATE_NAME, TEMPLATE_NAMES
from howtocap.cli.common import (
    BatchSecondsOpt,
    BatchSizeOpt,
    ConfigOpt,
    MaxAttemptsOpt,
    OutDir,
    QuietOpt,
    RayAddressOpt,
    RayGpusOpt,
    RedoOpt,
    RetryFailedOpt,
    RunnerName,
    RunnerOpt,
    ShardOpt,
    WorkersOpt,
    err,
    make_runner,
    out,
    parse_shard,
    report_summary,
    user_errors,
    validated,
    yaml_config,
)
from howtocap.llm.models import EMBEDDED_DEFAULT, REGISTRY
from howtocap.subtitles.policy import ASR_MODES

LLM_NAMES = tuple(REGISTRY)

AsrModeOpt = Enum("AsrModeOpt", {m: m for m in ASR_MODES}, type=str)  # type: ignore[misc]

OptionalInputs = Annotated[list[Path] | None, typer.Argument(
    help="Video files, folders of videos, or manifest CSVs (video_id,video_path"
         "[,subtitle_path]). None: caption every video of --subtitles from its text alone.",
    show_default=False)]
SubtitlesOpt = Annotated[Path | None, typer.Option(
    help="HowTo100M-style subtitles: caption.json, a pickle of it, sentencified JSON, a "
         ".parquet, or a folder of <id>.csv. Without INPUTS: caption every video in it (text "
         "only).")]
IdsOpt = Annotated[Path | None, typer.Option(help="Caption only these videos: a text file, one "
                                                  "video id a line (# comments).")]
LimitOpt = Annotated[int | None, typer.Option(min=1, help="Caption only the first N videos (of "
                                                          "--subtitles, or of INPUTS).")]
AsrOpt = Annotated[AsrModeOpt, typer.Option(
    help="auto: Whisper only for videos without subtitles; always: Whisper on every video "
         "file, ignoring all subtitles; never: no Whisper (no subtitles = error).")]
AsrModelOpt = Annotated[str, typer.Option(help="default (bundled tiny.en), base, a CTranslate2 "
                                               "folder, or a faster-whisper model name.")]
LlmOpt = Annotated[str, typer.Option(help=f"embedded (= {EMBEDDED_DEFAULT}), "
                                          f"{', '.join(LLM_NAMES)}, or a .gguf path.")]
LlmUrlOpt = Annotated[list[str] | None, typer.Option(
    help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1. Several times (or a file of "
         "URLs, one a line): replicas of one model, each request to the least busy; a dead one "
         "is dropped and its work re-sent.")]
LlmModelOpt = Annotated[str | None, typer.Option(help="Model name sent to --llm-url.")]
VlmUrlOpt = Annotated[str | None, typer.Option(
    help="OpenAI-compatible multimodal server (e.g. vLLM serving Qwen2-VL): each block is sent "
         "with --vlm-frames frames of its time span; needs the video files.")]
VlmModelOpt = Annotated[str | None, typer.Option(help="Model name sent to --vlm-url.")]
VlmFramesOpt = Annotated[int, typer.Option(min=1, max=32, help="Frames per block sent to "
                                                             "--vlm-url.")]
ApiKeyEnvOpt = Annotated[str, typer.Option(help="Env variable holding the API key.")]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, help="Requests in flight per server "
                                                         "(--llm-url).")]
LlmTimeoutOpt = Annotated[float, typer.Option(help="Seconds per request.")]
LlmRetriesOpt = Annotated[int, typer.Option(min=0, help="Retries on 429/5xx/timeouts.")]
BlockWordsOpt = Annotated[int, typer.Option(min=10, help="Words per LLM block.")]
ClipSecondsOpt = Annotated[float, typer.Option(help="Caption end = start + this.")]
TemplateOpt = Annotated[str | None, typer.Option(
    help=f"Prompt: {', '.join(TEMPLATE_NAMES)} (default {DEFAULT_TEMPLATE_NAME}), or a "
         ".txt/.yaml/.json template file.")]
ConstrainOpt = Annotated[bool, typer.Option(
    help="Constrain decoding to '<n>s: caption' lines (grammar; servers that reject it are "
         "asked without). Off by default (benchmarks/results/captions.md).")]
KeepChatterOpt = Annotated[bool, typer.Option(
    help="Keep captions such as 'Subscribe to the channel.' (`run`: in the align filter "
         "too).")]
KeepFillersOpt = Annotated[bool, typer.Option(
    help="Keep captions that show nothing ('So yeah, let's see.', 'Take your time.') as "
         "training text; by default they are marked in captions.parquet's `rejected` column "
         "and not aligned.")]
ParseWorkersOpt = Annotated[int | None, typer.Option(
    min=0, help="Processes that parse captions for the filler test (default: with --llm-url "
                "one per core, up to 8; none with an LLM in this process; 0: in this "
                "process).")]
TemperatureOpt = Annotated[float | None, typer.Option()]
MaxTokensOpt = Annotated[int | None, typer.Option()]
StopOpt = Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")]
SeedOpt = Annotated[int | None, typer.Option()]
ForceOpt = Annotated[bool, typer.Option(help="Redo videos already captioned.")]


@user_errors
@yaml_config
def caption_cmd(
    ctx: typer.Context,
    out_dir: OutDir,
    inputs: OptionalInputs = None,
    subtitles: SubtitlesOpt = None,
    ids: IdsOpt = None,
    limit: LimitOpt = None,
    asr: AsrOpt = AsrModeOpt.auto,  # type: ignore[attr-defined]
    asr_model: AsrModelOpt = "default",
    llm: LlmOpt = "embedded",
    llm_url: LlmUrlOpt = None,
    llm_model: LlmModelOpt = None,
    vlm_url: VlmUrlOpt = None,
    vlm_model: VlmModelOpt = None,
    vlm_frames: VlmFramesOpt = 4,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    concurrency: ConcurrencyOpt = 4,
    llm_timeout: LlmTimeoutOpt = 120.0,
    llm_retries: LlmRetriesOpt = 3,
    block_words: BlockWordsOpt = 200,
    clip_seconds: ClipSecondsOpt = 8.0,
    template: TemplateOpt = None,
    constrain: ConstrainOpt = False,
    keep_chatter: KeepChatterOpt = False,
    keep_fillers: KeepFillersOpt = False,
    parse_workers: ParseWorkersOpt = None,
    temperature: TemperatureOpt = None,
    max_tokens: MaxTokensOpt = None,
    stop: StopOpt = None,
    seed: SeedOpt = None,
    force: ForceOpt = False,
    redo: RedoOpt = False,
    retry_failed: RetryFailedOpt = False,
    max_attempts: MaxAttemptsOpt = 3,
    workers: WorkersOpt = None,
    runner: RunnerOpt = RunnerName.local,  # type: ignore[attr-defined]
    ray_address: RayAddressOpt = None,
    ray_gpus_per_stage: RayGpusOpt = None,
    shard: ShardOpt = None,
    batch_size: BatchSizeOpt = None,
    batch_seconds: BatchSecondsOpt = None,
    config: ConfigOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Subtitles (or Whisper ASR) -> LLM captions with timestamps -> DIR/captions.parquet."""
    from howtocap.caption.run import caption_run

    cfg = caption_config(
        subtitles=subtitles, ids=ids, limit=limit, asr=asr, asr_model=asr_model, llm=llm,
        llm_url=llm_url, llm_model=llm_model, vlm_url=vlm_url, vlm_model=vlm_model,
        vlm_frames=vlm_frames, api_key_env=api_key_env, concurrency=concurrency,
        llm_timeout=llm_timeout, llm_retries=llm_retries, block_words=block_words,
        clip_seconds=clip_seconds, template=template, constrain=constrain,
        keep_chatter=keep_chatter, keep_fillers=keep_fillers, parse_workers=parse_workers,
        temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)
    summaries = caption_run(inputs, out_dir, cfg, force=force, progress=not quiet,
                            runner=make_runner(runner, workers=workers, ray_address=ray_address,
                                               ray_gpus_per_stage=ray_gpus_per_stage),
                            shard=parse_shard(shard, (batch_size, batch_seconds)),
                            redo=redo, retry_failed=retry_failed,
                            max_attempts=max_attempts)
    show_captions(out_dir, limit=0)
    report_rejected(out_dir)
    report_summary(*summaries)


def caption_config(
    *, subtitles: Path | str | None, ids: Path | str | None, limit: int | None, asr: str,
    asr_model: str, llm: str, llm_url: list[str] | str | None, llm_model: str | None,
    vlm_url: str | None,
    vlm_model: str | None, vlm_frames: int, api_key_env: str, concurrency: int,
    llm_timeout: float, llm_retries: int, block_words: int, clip_seconds: float,
    template: str | None, constrain: bool, keep_chatter: bool, keep_fillers: bool,
    parse_workers: int | None = None, temperature: float | None, max_tokens: int | None,
    stop: list[str] | None, seed: int | None,
) -> Any:
    """The typed settings of `caption` (and `run`), validated before anything is written."""
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.llm import LLMOptions
    from howtocap.llm.base import GenerationConfig

    gen: dict[str, Any] = {k: x for k, x in (("temperature", temperature),
                                             ("max_tokens", max_tokens), ("seed", seed))
                           if x is not None}
    if stop:
        gen["stop"] = list(stop)
    cap: dict[str, Any] = {"block_words": block_words, "clip_seconds": clip_seconds,
                           "constrain": constrain, "drop_chatter": not keep_chatter,
                           "reject_fillers": not keep_fillers,
                           "generation": validated(GenerationConfig, **gen)}
    if template:
        cap["template"] = str(template)
    vlm = None
    if vlm_url:
        from howtocap.caption.vlm import VLMOptions
        from howtocap.errors import HowtocapError

        if llm_url:
            raise HowtocapError("give --llm-url or --vlm-url, not both: the VLM writes the "
                                "captions")
        vlm = validated(VLMOptions, url=vlm_url, model=vlm_model, frames=vlm_frames)
    return validated(
        CaptionRunConfig,
        subtitles=str(subtitles) if subtitles else None, ids=str(ids) if ids else None,
        limit=limit, asr=AsrModeOpt(asr).value, asr_model=asr_model,
        llm=validated(LLMOptions, name=llm, url=llm_url, model=llm_model,
                      api_key_env=api_key_env, concurrency=concurrency, timeout=llm_timeout,
                      max_retries=llm_retries),
        caption=validated(CaptionConfig, **cap), vlm=vlm, parse_workers=parse_workers)


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
