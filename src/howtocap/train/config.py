"""The training configuration: one typed, validated record of a run (``TrainConfig``) and the
papers' recipes as typed presets of it (``RECIPES``).

Why one model: the loop, the tasks and the checkpoint read the same fields, so a value is
checked once, where it enters (``make_config``), and a bad one is one line naming the option
(``--momentum: Input should be less than 1 (got 1.5)``), never a traceback from deep in a run.
``train_config.json`` and the checkpoint's ``config`` are ``TrainConfig.model_dump()``.

Precedence: an option given explicitly (not ``None``) > the recipe's setting > the field's
default (``lr``'s default depends on the model: ``DEFAULT_LR``).
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError

Model = Literal["dual", "mee"]
FrameSource = Literal["decode", "pixels", "webdataset"]  # webdataset: set for a shard folder
Optimizer = Literal["adamw", "adam"]
RecipeName = Literal["howtocaption", "second-round", "ventura"]

DEFAULT_LR: dict[str, float] = {"dual": 1e-5, "mee": 1e-3}


class TrainConfig(BaseModel):
    """Every setting of a training run (``dual``: fine-tune the encoder with InfoNCE; ``mee``:
    HowTo100M's gated units on frozen features)."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str
    model: Model = "dual"
    encoder: str = ENCODER
    epochs: int = Field(5, ge=1)
    batch_size: int = Field(32, ge=1)
    lr: float = Field(DEFAULT_LR["dual"], gt=0)  # not given: DEFAULT_LR[model]
    weight_decay: float = Field(0.05, ge=0)
    frames_per_clip: int = Field(4, ge=1)
    # L_align: HowToCaption uses 0.1 only for the second-round fine-tune
    alpha: float = Field(0.0, ge=0)
    temperature: float | None = Field(None, gt=0)
    warmup: float = Field(0.05, ge=0, le=1)  # fraction of all steps
    grad_clip: float = Field(20.0, ge=0)
    seed: int = 0
    eval_fraction: float = Field(0.1, ge=0, lt=1)
    frames: FrameSource = "decode"  # dual: how frames are read; mee: cached frame embeddings
    cache_dir: str | None = None
    num_workers: int = Field(0, ge=0)
    amp: bool = True
    mee_dim: int = Field(256, ge=1)
    margin: float = Field(0.1, ge=0)
    clips_per_video: int = Field(2, ge=1)
    eval_batch_size: int = Field(64, ge=1)
    train_params: str | None = None  # regex over parameter names; None = all
    webdataset: str | None = None  # a shard folder streamed instead of pairs held in memory
    shuffle_buffer: int = Field(1000, ge=1)  # samples (mee: groups of clips) per loader worker
    optimizer: Optimizer = "adamw"
    momentum: float = Field(0.0, ge=0, lt=1)  # EMA factor of the momentum model (0 = none)
    queue_size: int = Field(0, ge=0)  # momentum embeddings kept as extra candidates (0 = none)
    # weight of the teacher's softmax in the targets (0 = one-hot)
    soft_labels: float = Field(0.0, ge=0, le=1)
    crop_scale: tuple[float, float] | None = None  # random-resized-crop area range
    # frames per clip at evaluation (None = frames_per_clip)
    eval_frames: int | None = Field(None, ge=1)
    recipe: RecipeName | None = None  # the preset the values came from (recorded, not read)

    @model_validator(mode="before")
    @classmethod
    def _lr_of_the_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lr") is None:
            data = {**data, "lr": DEFAULT_LR.get(data.get("model", "dual"), DEFAULT_LR["dual"])}
        return data

    @field_validator("crop_scale", mode="before")
    @classmethod
    def _two_area_fractions(cls, v: Any) -> Any:
        if v is None:
            return v
        cs = tuple(v)
        if len(cs) != 2 or not 0 < cs[0] <= cs[1] <= 1:
            raise ValueError(f"--crop-scale needs two area fractions 0 < MIN <= MAX <= 1 "
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


class Recipe(BaseModel):
    """A paper's preset: the ``TrainConfig`` fields it sets, typed as there; the fields it does
    not set keep their defaults, and options given explicitly override it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    frames_per_clip: int | None = None
    eval_frames: int | None = None
    alpha: float | None = None
    warmup: float | None = None
    optimizer: Optimizer | None = None
    momentum: float | None = None
    queue_size: int | None = None
    soft_labels: float | None = None
    crop_scale: tuple[float, float] | None = None

    def settings(self) -> dict[str, Any]:
        """The fields this recipe sets (an explicit ``None``, e.g. "no crop", counts)."""
        return self.model_dump(exclude_unset=True)


# HowToCaption A.4 / its dual_encoder_retrieval.yaml: BLIP's ITC fine-tune
_HOWTOCAPTION = Recipe(optimizer="adamw", lr=1e-6, weight_decay=0.05, batch_size=128,
                       frames_per_clip=4, eval_frames=12, momentum=0.995, queue_size=2048,
                       soft_labels=0.6, crop_scale=(0.5, 1.0), alpha=0.0)
RECIPES: dict[RecipeName, Recipe] = {
    "howtocaption": _HOWTOCAPTION,
    # the fine-tune of the second filter-&-align round: the same plus L_align (alpha 0.1)
    "second-round": Recipe(**{**_HOWTOCAPTION.settings(), "alpha": 0.1}),
    # Ventura et al.: Adam, lr 1e-4 with cosine decay, batch 16, 10 frames, 10 epochs; a
    # random one of a clip's captions per epoch (always done here); no L_align, no momentum
    "ventura": Recipe(optimizer="adam", lr=1e-4, weight_decay=0.0, warmup=0.0, batch_size=16,
                      frames_per_clip=10, eval_frames=10, epochs=10, alpha=0.0, momentum=0.0,
                      queue_size=0, soft_labels=0.0, crop_scale=None),
}


def make_config(*, recipe: str | None = None, log: bool = False, **options: Any) -> TrainConfig:
    """``TrainConfig`` from options (``None`` = not given) over ``recipe``'s settings; a bad
    value is one ``HowtocapError`` line. ``mee`` trains on frame embeddings, which cannot be
    cropped: a ``crop_scale`` is dropped (with a warning when ``log``)."""
    if recipe is not None and recipe not in RECIPES:
        raise HowtocapError(f"--recipe must be {_either(tuple(RECIPES))}, not {recipe!r}")
    preset = RECIPES[recipe].settings() if recipe is not None else {}
    given = {k: v for k, v in options.items() if v is not None}
    try:
        cfg = TrainConfig(**{**preset, **given, "recipe": recipe})
    except ValidationError as exc:
        raise config_error(exc) from None
    if cfg.model == "mee" and cfg.crop_scale is not None:
        if log:
            from howtocap.progress import console

            console.print("[yellow]warning[/] --crop-scale ignored: mee trains on cached "
                          "frame embeddings, which cannot be cropped", highlight=False)
        cfg = cfg.model_copy(update={"crop_scale": None})
    return cfg


def config_error(exc: ValidationError) -> HowtocapError:
    """Pydantic's report as one line in the CLI's words: ``--model must be dual or mee, not
    'x'``; several problems are joined with ``;``."""
    msgs = []
    for e in exc.errors():
        name = str(e["loc"][0]) if e["loc"] else ""
        if e["type"] == "literal_error" and name in TrainConfig.model_fields:
            choices = _literal_values(TrainConfig.model_fields[name].annotation)
            msgs.append(f"{_flag(name)} must be {_either(choices)}, not {e['input']!r}")
        elif e["type"] == "value_error":
            msgs.append(str(e["ctx"]["error"]))
        elif e["type"] == "extra_forbidden":
            msgs.append(f"{name!r} is not a training option")
        else:
            msgs.append(f"{_flag(name) if name else 'training options'}: {e['msg']} "
                        f"(got {e['input']!r})")
    return HowtocapError("; ".join(msgs))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _either(choices: tuple[str, ...]) -> str:
    return " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"


def _literal_values(tp: Any) -> tuple[str, ...]:
    if get_origin(tp) is Literal:
        return tuple(get_args(tp))
    return tuple(v for arg in get_args(tp) for v in _literal_values(arg))
