"""LLM captions of one video's subtitles (HowToCaption stage 1): blocks -> prompt -> LLM ->
parsed ``<n>s: caption`` lines. Blocks that fail after a retry are warnings while any block
gave captions; a video whose every block failed is an error (its subtitles stay kept: they
are the ``subtitles`` stage's output)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from howtocap.caption import chatter, filler
from howtocap.caption.blocks import Block
from howtocap.caption.captioner import CaptionConfig, CaptionError, acaption_rows
from howtocap.caption.prompt import template_text
from howtocap.caption.vlm import VLMOptions, attach_frames
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import HowtocapError, ModelOutputError, ServiceError
from howtocap.llm import LLMOptions, from_options
from howtocap.llm.base import Messages, is_blocking, run_inline, run_sync


def block_frames(path: Path | None, block: Block, opts: VLMOptions) -> list[tuple[float, bytes]]:
    """``(time, JPEG)`` of ``opts.frames`` frames at the centres of equal parts of the block's
    span, decoded by seeking (PyAV). A video without readable frames raises one line."""
    from howtocap.io.video import encode_jpeg, sample_frames, segment_times  # PyAV: when used

    if path is None:
        raise HowtocapError("--vlm-url needs the video file to take frames from, and this "
                            "video has none (subtitles only); give the video or drop "
                            "--vlm-url")
    times = segment_times(block.start, max(block.end, block.start), opts.frames)
    imgs = sample_frames(path, times, size=opts.frame_side, fit=True)
    return [(float(t), encode_jpeg(img, opts.jpeg_quality)) for t, img in zip(times, imgs,
                                                                               strict=True)]


class CaptionStage(BaseStage):
    name = "caption"
    reads = ("subtitles",)
    writes = ("captions",)
    columnar = True  # subtitles in, captions out as plain columns: no frame per video

    def __init__(self, llm: LLMOptions, cfg: CaptionConfig, *, model: Any | None = None,
                 vlm: VLMOptions | None = None, parse_workers: int | None = None) -> None:
        if vlm is not None:  # the VLM writes the captions, through the same client as --llm-url
            llm = llm.model_copy(update={"url": vlm.url, "model": vlm.model})
        self.llm, self.cfg, self.vlm = llm, cfg, vlm
        self._model = model  # an LLM built by the caller (tests, notebooks)
        # the spaCy parser of the filler test and the imperative rewrite, loaded per worker;
        # None with both off: spaCy is never imported
        self._nlp: Any | None = None
        # processes that parse the captions (None: filler.default_parse_workers); not in the
        # fingerprint: the answers do not depend on where they are found
        self.parse_workers = parse_workers
        self.model_name = str(getattr(model, "name", type(model).__name__)) \
            if model is not None else None

    @property
    def resources(self) -> Resources:  # type: ignore[override]
        if self.llm.url:  # an HTTP client: in the driver, `concurrency` per server in flight
            return Resources(kind="llm", threads=self.llm.in_flight, remote=False)
        return Resources(kind="llm", models=True)

    def load(self) -> None:
        remote = bool(self.llm.url) and self.model_name is None  # a server, not a model given
        if self._model is None:
            self._model = from_options(self.llm)
        if self.cfg.reject_fillers or self.cfg.imperative:  # both read one parse a caption
            workers = self.parse_workers if self.parse_workers is not None else \
                filler.default_parse_workers(remote_llm=remote)
            self._nlp = filler.ParserPool(workers) if workers else filler.load_parser()

    def unload(self) -> None:
        """Stop the parser processes (a few hundred MB, idle once the videos are captioned:
        ``run`` goes on to align) and close the LLM this stage built (its connections, or the
        embedded model's memory); a second pass builds it again. A caller's model stays."""
        for part in (self._nlp, self._model if self.model_name is None else None):
            close = getattr(part, "close", None)
            if close is not None:
                close()
        self._nlp = None
        if self.model_name is None:
            self._model = None

    def fingerprint(self) -> dict[str, Any]:
        """The LLM's identity, the prompt's text and every caption setting (not how hard the
        server is pushed: concurrency, timeouts and retries do not change a caption)."""
        from howtocap.llm.identity import llm_identity

        llm = {"kind": "object", "name": self.model_name} if self.model_name else \
            llm_identity(self.llm)
        if self.vlm is not None:
            llm = {**llm, **self.vlm.identity()}
        cfg = self.cfg.model_dump(mode="json")
        cfg["template"] = template_text(self.cfg.template)
        if self.cfg.reject_fillers:  # new rules reject other captions
            cfg["filler_rules"] = filler.RULES_VERSION
        if self.cfg.drop_chatter:
            cfg["chatter_rules"] = chatter.RULES_ID
        return {**super().fingerprint(), "llm": llm, "caption": cfg}

    def process(self, video: VideoInput) -> StageOutput:
        """A blocking model (embedded, or a caller's) is called in place, with no loop."""
        if is_blocking(self._model):
            return run_inline(self._caption(video, inline=True))
        return run_sync(self._caption(video))

    async def aprocess(self, video: VideoInput) -> StageOutput:
        """One video's captions as a coroutine (the local runner keeps ``2 x in_flight``
        of them on one event loop)."""
        return await self._caption(video)

    async def _caption(self, video: VideoInput, inline: bool = False) -> StageOutput:
        subs = video.tables["subtitles"]
        if not len(subs):
            raise HowtocapError("no subtitles to caption")
        attach = None
        if self.vlm is not None:
            vlm, path = self.vlm, video.item.video_path

            def attach(block: Block, msgs: Messages) -> Messages:
                return attach_frames(msgs, block_frames(path, block, vlm))
        try:
            captions, stats = await acaption_rows(video.video_id, subs, self._model, self.cfg,
                                                  attach=attach, nlp=self._nlp, inline=inline)
        except CaptionError as exc:
            whys = [why for _, why in exc.stats.failed_blocks]
            if whys and all(w.startswith("LLM server") for w in whys):
                raise ServiceError(str(exc)) from None
            raise ModelOutputError(str(exc)) from None
        warnings = [stats.failure_summary()] if stats.failed_blocks else []
        if stats.blocks and not len(captions):
            warnings.append("no caption: the LLM found only channel chatter")
        rejected = {f"rejected_{why}": float(n) for why, n in stats.rejected.items()}
        return StageOutput({"captions": captions}, warnings,
                           metrics={"captions": float(len(captions)),
                                    "llm_blocks": float(stats.blocks), **rejected})
