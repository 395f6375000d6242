"""A step's options are declared once, as fields of its pydantic config; this turns them into
Typer options (as open_clip's ``params.py`` declares each parameter once).

A field with a ``description`` is an option: its flag (``--field-name``), default, bounds
(``ge``/``gt``/``le``/``lt``, shown by ``--help`` as Click's ranges) and help all come from the
field; without a default it is a required flag. Keys of its ``json_schema_extra``: ``flag``
(the name), ``short`` (``-x``), ``invert`` (the flag sets the opposite: ``--keep-chatter`` for
``drop_chatter``), ``multiple`` (false: one value of a ``str | list`` field), ``path`` (a file
name, kept as text), ``text`` (typed as text, read by the model's own validator: ``2G``),
``switch`` (a bool typed as a value: ``--keep-media false``), ``negatable`` (false: no
``--no-`` form, ``--redo``), ``choices`` (the values offered of a ``Literal`` field), ``shown``
(the default as ``--help`` words it). A nested model declared in another package (the LLM's
``LLMOptions``) takes its flags from the parent field's ``{"flags": {sub-field: {"flag",
"help", ...}}}`` table, its defaults and bounds still from its own fields.

``@settings_options(caption=CaptionRunConfig)`` replaces a command's ``caption`` parameter by
those options; ``run`` passes several models (a flag two share, e.g. ``--clip-seconds``, sets
both), every stage command ``runner=RunnerConfig`` (``--workers``, ``--shard``, ``--redo`` …).
A ``--config`` YAML file fills the same names. A bad value is one line naming the flag."""

from __future__ import annotations

import functools
import inspect
import keyword
import operator
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import annotated_types as at
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from howtocap.cli.common import load_yaml_config
from howtocap.errors import flag_of, validated

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Opt:
    """One option: where its value goes in the model, and the field that declares it."""

    path: tuple[str, ...]  # ("caption", "generation", "seed")
    flag: str  # "--llm-seed"
    info: FieldInfo
    extra: dict[str, Any]  # the field's (or its parent table's) flag keys
    optional_parent: tuple[str, ...] | None  # a nested model that is None unless given (vlm)

    @property
    def param(self) -> str:
        name = self.flag.lstrip("-").replace("-", "_")
        return name + "_" if keyword.iskeyword(name) else name  # --lambda

    @property
    def help(self) -> str:
        return self.extra.get("help") or self.info.description or ""

    @property
    def default(self) -> Any:
        if self.extra.get("unset"):
            return None
        if self.extra.get("switch"):
            return "true" if self.info.default else "false"
        if self.info.default_factory is not None:
            value = self.info.default_factory()  # type: ignore[call-arg]
            return value or None  # an empty list: no default shown
        value = None if self.info.default is PydanticUndefined else self.info.default
        return (not value) if self.extra.get("invert") else value


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def _plain(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``None``, and whether ``None`` was allowed."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        return functools.reduce(operator.or_, args), optional
    return annotation, False


def model_options(model: type[BaseModel], table: dict[str, Any] | None = None,
                  path: tuple[str, ...] = (), optional: tuple[str, ...] | None = None
                  ) -> Iterator[Opt]:
    """Every option of ``model``, nested models' included, in declaration order."""
    for name, info in model.model_fields.items():
        extra = {**_extra(info), **((table or {}).get(name) or {})}
        sub, nullable = _plain(info.annotation)
        if isinstance(sub, type) and issubclass(sub, BaseModel) and (
                "flags" in extra or table is None and any(True for _ in model_options(sub))):
            opt_parent = optional or (path + (name,) if nullable else None)
            yield from model_options(sub, extra.get("flags"), path + (name,), opt_parent)
        elif table is not None and name in table or table is None and info.description:
            yield Opt(path + (name,), flag_of(name, extra), info, extra, optional)


def bounds(info: FieldInfo) -> str:
    """The field's bounds as Click writes a range (``x>=1``, ``0<x<=1``), for ``--help``;
    the model alone checks them (a bad value: one line naming the flag)."""
    low = high = ""  # "0<", "1<=" / "<=1", "<1"
    for m in info.metadata:
        if isinstance(m, at.Ge | at.Gt):
            low = f"{m.ge}<=" if isinstance(m, at.Ge) else f"{m.gt}<"
        elif isinstance(m, at.Le | at.Lt):
            high = f"<={m.le}" if isinstance(m, at.Le) else f"<{m.lt}"
    if low and not high:  # x>=1 rather than 1<=x
        bound, op = low.rstrip("<="), low[len(low.rstrip("<=")):]
        return f"x{op.replace('<', '>')}{bound}"
    return f"{low}x{high}" if low or high else ""


def _parameter(opt: Opt) -> inspect.Parameter:
    """The Typer parameter of an option (its annotation carries the ``typer.Option``)."""
    plain, _ = _plain(opt.info.annotation)
    if typing.get_origin(plain) in (typing.Union, types.UnionType):  # str | list[str]
        plain = list[str] if opt.extra.get("multiple", True) else str
    if opt.extra.get("path"):  # a file name, stored as text
        plain = Path
    elif opt.extra.get("text"):  # read by the model's own validator: 2G, en,de, JSON
        plain = str
    elif opt.extra.get("switch"):  # a value, `--keep-media false`, as the docs write it
        plain = Literal["true", "false"]
    elif opt.extra.get("choices"):
        plain = Literal[tuple(opt.extra["choices"])]  # type: ignore[valid-type]
    negatable = plain is bool and opt.extra.get("negatable", True)
    decls = [opt.flag + (f"/--no-{opt.flag[2:]}" if negatable else "")]
    if opt.extra.get("short"):
        decls.append(opt.extra["short"])
    shown = "" if opt.extra.get("text") else bounds(opt.info)
    # escaped: Rich would read [x>=1] as markup
    notes = [f"  \\[{shown}]"] if shown else []
    if opt.extra.get("unset") or "shown" in opt.extra:  # Click shows no default of None
        value = opt.extra.get("shown", opt.info.default)
        notes.append(f"  \\[default: {f'{value:g}' if isinstance(value, float) else value}]")
    option = typer.Option(*decls, help=opt.help + "".join(notes))
    required = opt.info.is_required() and opt.optional_parent is None  # (vlm's url: not)
    default = inspect.Parameter.empty if required else opt.default
    annotation = plain if default is not None else plain | None
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, option])


def _flags(models: dict[str, type[BaseModel]], skip: tuple[str, ...] = ()
           ) -> dict[str, list[tuple[str, Opt]]]:
    """Options by parameter name over the models; one a shared flag sets in each. A ``skip``
    entry names a parameter (``workers``: in every model) or one model's (``download.workers``)."""
    found: dict[str, list[tuple[str, Opt]]] = {}
    for key, model in models.items():
        for opt in model_options(model):
            if opt.param not in skip and f"{key}.{opt.param}" not in skip:
                found.setdefault(opt.param, []).append((key, opt))
    for param, opts in found.items():
        defaults = {repr(o.default) for _, o in opts}
        if len(defaults) > 1:  # a shared flag must mean one thing
            raise TypeError(f"--{param}: its models disagree on its default ({defaults})")
    return found


def build(model: type[BaseModel], values: dict[str, Any], opts: list[Opt],
          flags: dict[tuple[str, ...], str] | None = None) -> Any:
    """The model from option values by parameter name (a missing or None value: the field's
    default); a bad value is one ``HowtocapError`` line naming the flag."""
    # a nested model that is None unless given (vlm) is built only when one of its flags was
    given = {None} | {o.optional_parent for o in opts
                      if values.get(o.param) not in (None, o.default, [], ())}
    data: dict[str, Any] = {}
    for opt in opts:
        value = values.get(opt.param)
        if value is None or value in ([], ()) or opt.optional_parent not in given:
            continue
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        if opt.extra.get("invert"):
            value = not value
        node = data
        for part in opt.path[:-1]:
            node = node.setdefault(part, {})
        node[opt.path[-1]] = value
    return validated(model, data, {o.path: o.flag for o in opts} | (flags or {}))


def settings_options(*, skip: tuple[str, ...] = (), unset: tuple[str, ...] = (),
                     **models: type[BaseModel]) -> Callable[[F], F]:
    """The command's parameters named like ``models`` become one option per flag of those
    models (in its place; ``skip`` fields keep their defaults) and get each model validated.
    ``unset`` flags default to "not given" (a recipe's settings: the model sees only the flags
    typed, ``--help`` shows the field's default). Its ``ctx`` and ``config`` parameters, when it
    has them, apply a ``--config`` YAML file first (flags typed on the command line win)."""

    def decorate(fn: F) -> F:
        found = {param: [(key, replace(opt, extra={**opt.extra, "unset": True})
                          if opt.path[-1] in unset else opt) for key, opt in opts]
                 for param, opts in _flags(models, skip).items()}
        own = inspect.signature(fn, eval_str=True).parameters
        params: list[inspect.Parameter] = []
        for p in own.values():
            if p.name in models:  # a flag several models share: in the first one's place
                params += [_parameter(opts[0][1]) for opts in found.values()
                           if opts[0][0] == p.name]
                continue
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise TypeError(f"{fn.__name__}: a flag of its models is also its own parameter")

        @functools.wraps(fn)
        def command(**values: Any) -> Any:
            if "config" in values:
                values = load_yaml_config(values["ctx"], values["config"], values)
            built = {key: build(model, values, [o for opts in found.values()
                                                for k, o in opts if k == key])
                     for key, model in models.items()}
            return fn(**{k: v for k, v in values.items() if k in own and k not in built},
                      **built)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate
