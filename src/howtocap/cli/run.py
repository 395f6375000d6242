"""``howtocap run``: caption -> align in one command; it takes every option of both (the
options of ``caption`` first; ``tests/test_cli_docs.py`` checks that none is missing)."""

from __future__ import annotations

from pathlib import Path

import typer

from howtocap.cli.align import (
    DeviceOpt,
    EncoderOpt,
    FpsOpt,
    KeepAllOpt,
    KeepTopOpt,
    NullZOpt,
    OffsetSecondsOpt,
    OffsetStepOpt,
    QuantileOpt,
    ReferenceCaptionsOpt,
    ReferenceVideosOpt,
    RenormalizeOpt,
    SampleVideosOpt,
    ThresholdOpt,
    VideosOpt,
    WithinShotOpt,
    align_settings,
    attach_videos,
    print_align_result,
)
from howtocap.cli.caption import (
    ApiKeyEnvOpt,
    AsrModelOpt,
    AsrModeOpt,
    AsrOpt,
    BlockWordsOpt,
    ClipSecondsOpt,
    ConcurrencyOpt,
    ConstrainOpt,
    ForceOpt,
    IdsOpt,
    KeepChatterOpt,
    KeepFillersOpt,
    LimitOpt,
    LlmModelOpt,
    LlmOpt,
    LlmRetriesOpt,
    LlmTimeoutOpt,
    LlmUrlOpt,
    MaxTokensOpt,
    OptionalInputs,
    ParseWorkersOpt,
    SeedOpt,
    StopOpt,
    SubtitlesOpt,
    TemperatureOpt,
    TemplateOpt,
    VlmFramesOpt,
    VlmModelOpt,
    VlmUrlOpt,
    caption_config,
    report_rejected,
    show_captions,
)
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
    make_runner,
    parse_shard,
    report_summary,
    user_errors,
    yaml_config,
)
from howtocap.cli.download import (
    AudioOpt,
    ConnectTimeoutOpt,
    FormatOpt,
    Formats,
    KeepMediaOpt,
    MaxHeightOpt,
    MaxSizeOpt,
    ReadTimeoutOpt,
    RetriesOpt,
    StorageOpt,
    SubLangsOpt,
    Switch,
    download_config,
)


@user_errors
@yaml_config
def run_cmd(
    *,
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
    encoder: EncoderOpt = None,
    offset_seconds: OffsetSecondsOpt = 10.0,
    offset_step: OffsetStepOpt = 1.0,
    fps: FpsOpt = 1.0,
    threshold: ThresholdOpt = None,
    quantile: QuantileOpt = None,
    keep_top: KeepTopOpt = None,
    null_z: NullZOpt = None,
    keep_all: KeepAllOpt = False,
    reference_captions: ReferenceCaptionsOpt = 256,
    reference_videos: ReferenceVideosOpt = 16,
    sample_videos: SampleVideosOpt = 1000,
    renormalize: RenormalizeOpt = False,
    within_shot: WithinShotOpt = False,
    videos: VideosOpt = None,
    device: DeviceOpt = None,
    format: FormatOpt = Formats.mp4,
    max_height: MaxHeightOpt = 360,
    audio: AudioOpt = True,
    max_size: MaxSizeOpt = "2G",
    sub_langs: SubLangsOpt = "en",
    connect_timeout: ConnectTimeoutOpt = 10.0,
    read_timeout: ReadTimeoutOpt = 30.0,
    retries: RetriesOpt = 3,
    storage_options: StorageOpt = None,
    keep_media: KeepMediaOpt = Switch.true,
) -> None:
    """caption -> align in one command, resumable: DIR/captions.parquet, DIR/aligned.parquet,
    DIR/align_report.html. Takes every flag of `caption` and of `align`; remote inputs
    (URLs, YouTube ids in a manifest) are downloaded first (the flags of `download`)."""
    from howtocap.engine.rundir import RunDir
    from howtocap.pipeline.run import run_pipeline

    cap_cfg = caption_config(
        subtitles=subtitles, ids=ids, limit=limit, asr=asr, asr_model=asr_model, llm=llm,
        llm_url=llm_url, llm_model=llm_model, vlm_url=vlm_url, vlm_model=vlm_model,
        vlm_frames=vlm_frames, api_key_env=api_key_env, concurrency=concurrency,
        llm_timeout=llm_timeout, llm_retries=llm_retries, block_words=block_words,
        clip_seconds=clip_seconds, template=template, constrain=constrain,
        keep_chatter=keep_chatter, keep_fillers=keep_fillers, parse_workers=parse_workers,
        temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)
    # --clip-seconds, --keep-chatter and --seed are caption's and align's at once
    align_cfg = align_settings(
        offset_seconds=offset_seconds, offset_step=offset_step, clip_seconds=clip_seconds,
        fps=fps, threshold=threshold, quantile=quantile, keep_top=keep_top, null_z=null_z,
        keep_chatter=keep_chatter, keep_all=keep_all, reference_captions=reference_captions,
        reference_videos=reference_videos, sample_videos=sample_videos, seed=seed,
        renormalize=renormalize, within_shot=within_shot)
    dl_cfg = download_config(format=format, max_height=max_height, audio=audio,
                             max_size=max_size, sub_langs=sub_langs,
                             connect_timeout=connect_timeout, read_timeout=read_timeout,
                             retries=retries, storage_options=storage_options,
                             keep_media=keep_media)
    if videos:
        attach_videos(RunDir(out_dir, create=False), videos)
    summaries = run_pipeline(inputs, out_dir, caption=cap_cfg, align=align_cfg,
                             encoders=encoder or ["default"],
                             runner=make_runner(runner, workers=workers, ray_address=ray_address,
                                                ray_gpus_per_stage=ray_gpus_per_stage),
                             shard=parse_shard(shard, (batch_size, batch_seconds)),
                             force=force, device=device,
                             progress=not quiet, redo=redo, retry_failed=retry_failed,
                             max_attempts=max_attempts, download=dl_cfg)
    print_align_result(Path(out_dir), shard)
    show_captions(out_dir, limit=0)
    report_rejected(out_dir)
    report_summary(*summaries)
