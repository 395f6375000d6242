"""Prompt templates: the paper's final prompt, the built-in ones (``DEFAULT_TEMPLATE_NAME``), or
the user's own file (its format: docs/captions.md, "Templates").

We only build chat *messages*; the backend applies the model's own chat template, so the same
template works for every model. The built-in templates' examples come from topics and recipe
types the benchmarks never score, so no template has seen its answers. Every built-in template
ends with its block: llama.cpp then reuses the cached prompt up to the block and reads only the
block.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from howtocap.errors import InputError

if TYPE_CHECKING:  # blocks loads pandas; the CLI reads the template names at start-up
    from howtocap.caption.blocks import Block

PLACEHOLDERS = ("{asr}", "<block>", "{}")
# As in the paper's config, the block sits in quotes and (as the reference's blocks did) starts
# on a new line.
_TEMPLATES = Path(__file__).with_name("templates")
BUILTIN = {"fewshot": _TEMPLATES / "fewshot.json", "actions": _TEMPLATES / "actions.json",
           "concise": _TEMPLATES / "concise.json", "steps": _TEMPLATES / "steps.json"}
TEMPLATE_NAMES = ("paper", *BUILTIN)
# Chosen by benchmarks/quality/bench_real_captions.py (benchmarks/results/real_captions.md).
DEFAULT_TEMPLATE_NAME = "steps"

PAPER_PROMPT = (
    "I will give you an automatically recognized speech with timestamps from a video segment "
    "that is cut from a long video. Write a summary for this video segment. Write only short "
    "sentences. Describe only one action per sentence. Keep only actions that happen in the "
    "present time. Begin each sentence with an estimated timestamp. Here is this automatically "
    'recognized speech: "\n{asr}".'
)


@dataclass(frozen=True)
class Template:
    prompt: str = PAPER_PROMPT
    system: str | None = None
    examples: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def render(self, asr: str) -> str:
        for ph in PLACEHOLDERS:
            if ph in self.prompt:
                return self.prompt.replace(ph, asr)
        raise ValueError("template has no placeholder")  # guarded by check_template


def check_template(prompt: str, origin: str = "template") -> str:
    if not any(ph in prompt for ph in PLACEHOLDERS):
        raise InputError(origin, "prompt template has no placeholder for the speech; put {asr} "
                                 "(or <block>) where the ASR block should go")
    return prompt


def load_template(path: str | Path) -> Template:
    """Read a template file (text or YAML); a bad file is one clear line naming it."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        names = "" if p.suffix or len(p.parts) > 1 else \
            f" (and not a built-in template: {', '.join(TEMPLATE_NAMES)})"
        raise InputError(p, f"prompt template file not found{names}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the name
        raise InputError(p, f"cannot read prompt template ({exc})") from None
    if p.suffix.lower() not in (".yaml", ".yml", ".json"):
        return Template(prompt=check_template(raw.strip(), str(p)))
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(p, f"invalid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
        raise InputError(p, "YAML template needs a 'prompt:' string")
    examples = data.get("examples") or []
    try:
        pairs = tuple((str(a), str(b)) for a, b in examples)
    except (TypeError, ValueError):
        raise InputError(p, "'examples:' must be a list of [asr, answer] pairs") from None
    system = data.get("system")
    return Template(prompt=check_template(data["prompt"].strip(), str(p)),
                    system=str(system) if system else None, examples=pairs)


@functools.cache
def _builtin(name: str) -> Template:
    """A shipped template, read once per process (it is resolved for every video)."""
    return load_template(BUILTIN[name])


def resolve_template(template: str | Path | Template | None) -> Template:
    """A Template, a built-in name, a path to a file, template text, or None (the default)."""
    if template is None:
        template = DEFAULT_TEMPLATE_NAME
    if template == "paper":
        return Template()
    if isinstance(template, str) and template in BUILTIN:
        return _builtin(template)
    if isinstance(template, Template):
        return template
    if isinstance(template, Path) or (not any(ph in template for ph in PLACEHOLDERS)
                                      and "\n" not in template and len(template) < 4096):
        return load_template(template)
    return Template(prompt=check_template(str(template)))


def build_messages(block: Block, template: Template | str | None = None) -> list[dict[str, str]]:
    """Chat messages for one block: optional system, few-shot pairs, then the block."""
    tpl = resolve_template(template)
    return [*_prefix(tpl), {"role": "user", "content": tpl.render(block.text)}]


@functools.lru_cache(maxsize=16)
def _prefix(tpl: Template) -> tuple[dict[str, str], ...]:
    """The messages before the block (system, few-shot pairs), rendered once per template:
    every request of a run shares them (the same objects, so the client encodes them once;
    nobody may change them)."""
    system = [{"role": "system", "content": tpl.system}] if tpl.system else []
    return (*system, *(msg for asr, answer in tpl.examples for msg in (
        {"role": "user", "content": tpl.render(asr.strip())},
        {"role": "assistant", "content": answer.strip()})))


def template_text(template: str) -> dict[str, Any]:
    """The prompt as the LLM sees it (a template file's edit changes the fingerprint)."""
    t = resolve_template(template)
    return {"prompt": t.prompt, "system": t.system, "examples": [list(e) for e in t.examples]}
