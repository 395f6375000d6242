"""The training configuration: one typed, validated record of a run (``TrainConfig``) and the
papers' recipes as typed presets of it (``RECIPES``).

Why one model: the loop, the tasks and the checkpoint read the same fields, so a value is
checked once, where it enters (``make_config``), and a bad one is one line naming the option,
never a traceback from deep in a run. Precedence: an explicit option (not ``None``) > the
recipe's setting > the field's default (``lr``'s depends on the model: ``DEFAULT_LR``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from howtocap.encoders.defaults import ENCODER
from howtocap.errors import validated

Model = Literal["dual", "mee"]
FrameSource = Literal["decode", "pixels", "webdataset"]  # webdataset: set for a shard folder
Optimizer = Literal["adamw", "adam"]
RecipeName = Literal["howtocaption", "second-round", "ventura"]

DEFAULT_LR: dict[str, float] = {"dual": 1e-5, "mee": 1e-3}


class TrainConfig(BaseModel):
    """Every setting of a training run (``dual``: fine-tune the encoder with InfoNCE; ``mee``:
    HowTo100M's gated units on frozen features). A field with a ``description`` is a flag of
    ``howtocap train`` (``cli.options``); ``shown`` is its default as ``--help`` words it when
    the recipe or another field decides it."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str = Field(description="Folder for checkpoints and logs.", json_schema_extra={
        "flag": "--out", "short": "-o", "path": True})
    model: Model = Field("dual", description=(
        "dual: fine-tune the encoder (InfoNCE); mee: HowTo100M gated embedding baseline on "
        "frozen features (max-margin)."))
    encoder: str = Field(ENCODER, description=(
        "Encoder to start from: default, hf:<id|folder>, openclip:<arch>/<pretrained>, or a "
        "checkpoint."))
    # the preset the values came from (recorded; its settings are merged in by the validator)
    recipe: RecipeName | None = Field(None, description=(
        "Preset of a paper's settings (explicit options override it): howtocaption (AdamW lr "
        "1e-6, batch 128, 4/12 frames, momentum 0.995, queue 2048, soft labels 0.6, crops "
        "0.5-1), second-round (the same with --alpha 0.1), ventura (Adam lr 1e-4, cosine, "
        "batch 16, 10 frames, 10 epochs)."))
    epochs: int = Field(5, ge=1, description="Passes over the clips.")
    batch_size: int = Field(32, ge=1, description="Clips per step and process.")
    lr: float = Field(DEFAULT_LR["dual"], gt=0, description="Peak learning rate.",
                      json_schema_extra={"shown": ", ".join(f"{v:g} {k}"
                                                            for k, v in DEFAULT_LR.items())})
    weight_decay: float = Field(0.05, ge=0, description="Weight decay (matrices only).")
    optimizer: Optimizer = Field("adamw", description="adamw (decoupled decay) or adam.")
    frames_per_clip: int = Field(4, ge=1, description="Frames drawn per clip.")
    eval_frames: int | None = Field(None, ge=1, description=(
        "Frames per clip at the per-epoch evaluation."), json_schema_extra={
        "shown": "--frames-per-clip"})
    alpha: float = Field(0.0, ge=0, description=(
        "L_align: weight of the pull towards a frozen copy of the start model."),
        json_schema_extra={"shown": "0; 0.1 with --recipe second-round"})
    momentum: float = Field(0.0, ge=0, lt=1, description=(
        "dual: EMA factor of a momentum model that gives the queue and soft labels (0 = none)."))
    queue_size: int = Field(0, ge=0, description=(
        "dual: momentum text/video embeddings kept as extra candidates (needs --momentum)."))
    soft_labels: float = Field(0.0, ge=0, le=1, description=(
        "dual: weight of the momentum model's softmax in the targets (0 = one-hot)."))
    crop_scale: tuple[float, float] | None = Field(None, description=(
        "dual: random-resized crops of the frames, area fraction MIN MAX (e.g. 0.5 1.0)."),
        json_schema_extra={"shown": "no crop"})
    temperature: float | None = Field(None, gt=0, description="Fixed InfoNCE temperature.",
                                      json_schema_extra={"shown": "learnable, starts at 0.07"})
    warmup: float = Field(0.05, ge=0, le=1, description="Warmup, as a fraction of all steps.")
    grad_clip: float = Field(20.0, ge=0, description="Max gradient norm (0 = off).")
    seed: int = Field(0, description="Seed of the initialisation, the split and the draws.")
    eval_fraction: float = Field(0.1, ge=0, lt=1, description=(
        "Share of videos held out for per-epoch retrieval metrics."))
    # dual: how frames are read (webdataset: set for a shard folder); mee: cached embeddings
    frames: FrameSource = Field("decode", description=(
        "decode: seek in the video for every draw; pixels: decode each video once into a uint8 "
        "cache (fast epochs, ~147 KB per video second at 224 px)."), json_schema_extra={
        "choices": ["decode", "pixels"]})
    cache_dir: str | None = Field(None, description="Cache folder.", json_schema_extra={
        "path": True, "shown": "SOURCE/cache for a run directory, else OUT/cache"})
    num_workers: int = Field(0, ge=0, description="Data-loading processes.")
    amp: bool = Field(True, description="Mixed precision (CUDA only).")
    mee_dim: int = Field(256, ge=1, description="Joint space size of the mee model.")
    margin: float = Field(0.1, ge=0, description="Ranking margin of the mee model.")
    clips_per_video: int = Field(2, ge=1, description=(
        "mee: clips of one video placed together in a batch (hard negatives); 1: no "
        "intra-video negatives (a batch holds clips of different videos)."))
    eval_batch_size: int = Field(64, ge=1)
    train_params: str | None = Field(None, description=(
        "dual: train only parameters whose name matches this regex (e.g. 'residual' for the "
        "default encoder's head)."), json_schema_extra={"shown": "all"})
    webdataset: str | None = None  # a shard folder streamed instead of pairs held in memory
    shuffle_buffer: int = Field(1000, ge=1, description=(  # mee: groups of clips
        "WebDataset shards: samples shuffled in memory per loading process."))

    @model_validator(mode="before")
    @classmethod
    def _recipe_and_lr(cls, data: Any) -> Any:
        """A recipe's settings under the values given; ``lr`` not given: the model's."""
        if not isinstance(data, dict):
            return data
        if data.get("recipe") in RECIPES:
            data = {**RECIPES[data["recipe"]].settings(), **data}
        if data.get("lr") is None:
            data = {**data, "lr": DEFAULT_LR.get(data.get("model", "dual"), DEFAULT_LR["dual"])}
        return data

    @field_validator("crop_scale", mode="before")
    @classmethod
    def _two_area_fractions(cls, v: Any) -> Any:
        if v is None:
            return v
        cs = tuple(v)
        if len(cs) != 2 or not 0 < cs[0] <= cs[1] <= 1:
            raise ValueError(f"needs two area fractions 0 < MIN <= MAX <= 1 "
                             f"(got {' '.join(map(str, cs))})")
        return None if cs[0] == cs[1] == 1 else cs  # the whole frame: no crop

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        """The checks over several fields (bounds are the fields'): the BLIP-style parts need
        the dual encoder, and a queue needs the momentum model whose embeddings it holds."""
        if self.queue_size > 0 and self.momentum == 0:
            raise ValueError("--queue-size needs --momentum: the queue holds the momentum "
                             "model's embeddings (e.g. --momentum 0.995)")
        if self.model == "mee":
            if self.recipe is not None:
                raise ValueError(f"--recipe {self.recipe} is a dual-encoder recipe; --model mee "
                                 "trains with its own max-margin loss")
            if self.momentum or self.queue_size or self.soft_labels:
                raise ValueError("--momentum, --queue-size and --soft-labels apply to --model "
                                 "dual only")
        return self


class _Preset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def settings(self) -> dict[str, Any]:
        """The fields this recipe sets (an explicit ``None``, e.g. "no crop", counts)."""
        return self.model_dump(exclude_unset=True)


# A paper's preset: the ``TrainConfig`` fields it may set, typed as there (derived, so a
# field's type is written once); unset fields keep their defaults, explicit options win.
Recipe = create_model("Recipe", __base__=_Preset, **{  # type: ignore[call-overload]
    name: (TrainConfig.model_fields[name].annotation | None, None) for name in (
        "epochs", "batch_size", "lr", "weight_decay", "frames_per_clip", "eval_frames", "alpha",
        "warmup", "optimizer", "momentum", "queue_size", "soft_labels", "crop_scale")})


# HowToCaption A.4 / its dual_encoder_retrieval.yaml: BLIP's ITC fine-tune
_HOWTOCAPTION = Recipe(optimizer="adamw", lr=1e-6, weight_decay=0.05, batch_size=128,
                       frames_per_clip=4, eval_frames=12, momentum=0.995, queue_size=2048,
                       soft_labels=0.6, crop_scale=(0.5, 1.0), alpha=0.0)
RECIPES: dict[RecipeName, _Preset] = {
    "howtocaption": _HOWTOCAPTION,
    # the fine-tune of the second filter-&-align round: the same plus L_align (alpha 0.1)
    "second-round": Recipe(**{**_HOWTOCAPTION.settings(), "alpha": 0.1}),
    # Ventura et al.: Adam, lr 1e-4 with cosine decay, batch 16, 10 frames, 10 epochs; a
    # random one of a clip's captions per epoch (always done here); no L_align, no momentum
    "ventura": Recipe(optimizer="adam", lr=1e-4, weight_decay=0.0, warmup=0.0, batch_size=16,
                      frames_per_clip=10, eval_frames=10, epochs=10, alpha=0.0, momentum=0.0,
                      queue_size=0, soft_labels=0.0, crop_scale=None),
}


def make_config(*, log: bool = False, **options: Any) -> TrainConfig:
    """``TrainConfig`` from options (``None`` = not given; a ``recipe``'s settings fill the
    rest); a bad value is one ``HowtocapError`` line. ``mee`` trains on frame embeddings,
    which cannot be cropped: a ``crop_scale`` is dropped (with a warning when ``log``)."""
    cfg = validated(TrainConfig, {k: v for k, v in options.items() if v is not None})
    if cfg.model == "mee" and cfg.crop_scale is not None:
        if log:
            from howtocap.progress import console

            console.print("[yellow]warning[/] --crop-scale ignored: mee trains on cached "
                          "frame embeddings, which cannot be cropped", highlight=False)
        cfg = cfg.model_copy(update={"crop_scale": None})
    return cfg
