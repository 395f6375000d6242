"""Figures in README.md and docs/*.md come from ``benchmarks/results/``, never from a keyboard.

Run: ``python benchmarks/render_docs.py`` rewrites every marker in place; ``--check`` changes
nothing and exits 1 listing each marker whose text differs from its results file or names a
missing file or path; ``--cli`` regenerates ``docs/cli.md`` from the Typer app (the only
part that imports howtocap). Standard library only otherwise, so the check runs anywhere.

Markers (kept in the rendered file, so a re-render finds them again):

* ``<!--fig FILE.json:dotted.path FORMAT-->VALUE<!--/fig-->``: one value of a results file.
  FILE is relative to ``benchmarks/results/``; the path is dict keys and list indices joined
  by dots (a key may itself contain dots or spaces: the longest matching key wins; in a list,
  ``key=value`` picks the first item whose ``key`` is ``value``); FORMAT, the text after the
  path, is a Python format spec, optionally followed by a literal suffix (``.1f×``, ``.1%``,
  ``.0f %``);
* ``<!--fig @NAME FORMAT-->VALUE<!--/fig-->``: a figure derived from several results (the
  ``DERIVED`` registry below, e.g. docs/scaling.md's plan);
* ``<!--table FILE.md#K-->`` … ``<!--/table-->``: the K-th Markdown table (1-based) of a
  results ``.md``, which its benchmark wrote from the same json; ``cols=a|b`` keeps only
  these columns (by header), ``rows=x|y`` only rows whose first cell is listed, in that order.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CLI_DOC = ROOT / "docs" / "cli.md"

FIG_RE = re.compile(r"<!--fig (?P<spec>.*?)-->(?P<value>.*?)<!--/fig-->")
TABLE_RE = re.compile(r"(?P<open><!--table (?P<spec>[^\n]*?)-->)\n(?P<body>.*?)"
                      r"(?P<close><!--/table-->)", re.S)
# [[fill]align][sign][z][#][0][width][grouping][.precision][type]; what follows is a suffix.
SPEC_RE = re.compile(r"(?:.?[<>=^])?[+\- ]?z?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?")


class FigureError(Exception):
    """A marker naming a file, path or derived figure that does not exist."""


def doc_files(root: Path = ROOT) -> list[Path]:
    """The pages whose figures are rendered: the README and every docs page."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


class Results:
    """Results files read once per render."""

    def __init__(self, folder: Path = RESULTS) -> None:
        self.folder = folder
        self._cache: dict[str, Any] = {}

    def load(self, name: str) -> Any:
        if name not in self._cache:
            path = self.folder / name
            if not path.is_file():
                raise FigureError(f"no results file benchmarks/results/{name}")
            text = path.read_text(encoding="utf-8")
            self._cache[name] = json.loads(text) if name.endswith(".json") else text
        return self._cache[name]

    def get(self, name: str, path: str) -> Any:
        return resolve(self.load(name), path, f"{name}:{path}")


def resolve(data: Any, path: str, where: str) -> Any:
    """Follow a dotted path; keys may contain dots themselves (the longest match wins)."""
    parts = path.split(".") if path else []
    i = 0
    while i < len(parts):
        if isinstance(data, dict):
            for j in range(len(parts), i, -1):
                key = ".".join(parts[i:j])
                if key in data:
                    data, i = data[key], j
                    break
            else:
                raise FigureError(f"{where}: no key {parts[i]!r}")
        elif isinstance(data, list) and "=" in parts[i]:  # the row whose key has this value
            for j in range(len(parts), i, -1):
                key, _, value = ".".join(parts[i:j]).partition("=")
                rows = [x for x in data if isinstance(x, dict) and str(x.get(key)) == value]
                if rows:
                    data, i = rows[0], j
                    break
            else:
                raise FigureError(f"{where}: no list item with {parts[i]!r}")
        elif isinstance(data, list):
            try:
                data, i = data[int(parts[i])], i + 1
            except (ValueError, IndexError):
                raise FigureError(f"{where}: no list index {parts[i]!r}") from None
        else:
            raise FigureError(f"{where}: {parts[i]!r} below a {type(data).__name__}")
    return data


def fmt(value: Any, spec: str, where: str) -> str:
    """``format(value, spec)``, with any text after the spec kept as a literal suffix."""
    if value is None or isinstance(value, float) and math.isnan(value):
        raise FigureError(f"{where}: no value (null)")
    if isinstance(value, (dict, list)):
        raise FigureError(f"{where}: a {type(value).__name__}, not a figure")
    m = SPEC_RE.match(spec)
    head, suffix = (m.group(0), spec[m.end():]) if m else ("", spec)
    try:
        return format(value, head) + suffix
    except (ValueError, TypeError) as exc:
        raise FigureError(f"{where}: format {spec!r}: {exc}") from None


# ---- figures derived from several results -------------------------------------------------
# docs/scaling.md's plan: its inputs are results files, its constants published figures
# (cited on the page) or the dataset's size.
HTM_HOURS = 134_000  # HowTo100M, ≈134k h of video [S1]
HTM_CAPTIONS = 70e6  # LLM captions before filtering (the brief's figure, an assumption)
HTM_SUBTITLES = 136e6  # ASR lines shipped with HowTo100M [S1]
HTM_PAIRS = 25e6  # aligned pairs kept by HowToCaption [S3]
BLOCK_WORDS = 200
A100_VIT_B_IMG_S = 2226  # [S13], PyTorch eager, batch 256
A100_TRAIN_FRACTION = 358 / 1014  # [S16], ViT-B/16 train vs inference samples/s
TRAIN_FRAMES = 300_000 * 128 * 4  # [S5]: 600 × 500 iterations, batch 128, 4 frames
A100_VIT_B_IMG_S_COMPILED = 5273  # [S13], AITemplate
VLLM_GEN_TOK_S = {"a40_14b": 530, "a40_8b": 1017, "a100_8b": 495, "a100_80_14b": 3004}  # [S9-S11]
HTM_VIDEOS = 1.2e6  # [S1]
MEAN_VIDEO_MIN = HTM_HOURS * 60 / HTM_VIDEOS
PAPER_RUN = "qwen2.5-coder-1.5b/paper"  # llm.json run with HowToCaption's prompt: token counts
SMALL_PAPER_RUN = "qwen2.5-coder-0.5b/paper"  # the fastest Qwen on our CPU


def _llm_run(r: Results, label: str) -> dict:
    """One run (model/template) of llm.json by its label."""
    for row in r.get("llm.json", "runs"):
        if row.get("label") == label:
            return row
    raise FigureError(f"llm.json: no run {label!r}")


def _default_llm(r: Results) -> dict:
    return _llm_run(r, r.get("llm.json", "choice.label"))


def _block_mean(r: Results, label: str, key: str) -> float:
    rows = [b[key] for b in _llm_run(r, label)["block_rows"] if b.get(key) is not None]
    if not rows:
        raise FigureError(f"llm.json: run {label!r} has no {key}")
    return sum(rows) / len(rows)


def _captions_per_block(r: Results) -> float:
    return _default_llm(r)["captions_per_block"]


def _blocks_total(r: Results) -> float:
    return HTM_CAPTIONS / _captions_per_block(r)


def _qwen_cpb(r: Results, pick: Callable[..., float]) -> float:
    return pick(x["captions_per_block"] for x in r.get("llm.json", "runs")
                if x["model"].startswith("qwen"))


def _gen_tokens_total(r: Results) -> float:
    return _blocks_total(r) * _block_mean(r, PAPER_RUN, "predicted_n")


def _llm_gpu_hours(r: Results, tok_s: float) -> float:
    return _gen_tokens_total(r) / tok_s / 3600


def _gpu_hours(r: Results, end: str) -> float:
    """The plan's A100-class GPU-hours: LLM + frame embedding + training (low or high end)."""
    frames = HTM_HOURS * 3600
    if end == "low":
        return (_llm_gpu_hours(r, max(VLLM_GEN_TOK_S.values()))
                + frames / A100_VIT_B_IMG_S_COMPILED / 3600 + _train_hours(r))
    return (_llm_gpu_hours(r, min(VLLM_GEN_TOK_S.values())) + frames / A100_VIT_B_IMG_S / 3600
            + 2 * _train_hours(r))


def _train_hours(r: Results) -> float:
    return TRAIN_FRAMES / (A100_VIT_B_IMG_S * A100_TRAIN_FRACTION) / 3600


def _shard_kb_per_frame(r: Results) -> float:
    """Our exported shards' size per stored 224-px JPEG frame (4 frames per clip)."""
    return r.get("webdataset.json", "setup.shards_mb") * 1000 / (
        4 * r.get("webdataset.json", "setup.clips"))


def _stats_vm_hours(r: Results) -> float:
    return (HTM_CAPTIONS + HTM_SUBTITLES) / r.get("stats.json", "end_to_end.texts_per_s") / 3600


CONTENT_KEY_BYTES = 3 * 2**20  # encoders.cache.content_key: 1 MiB at head, middle and tail


def _align_largest(r: Results, key: str) -> float:
    big = max(r.get("align_scale.json", "videos"))
    return r.get("align_scale.json", f"summary.{big}.{key}")


def _align_part(r: Results, part: str) -> float:
    """A part's share of align's profiled time (after the cut)."""
    secs = r.get("align_scale.json", "profile.after.seconds")
    return secs[part] / secs["align_run, in all"]


def _chatter_margin(r: Results) -> int:
    """Chatter captions the default filter drops on the held-out set beyond the target's."""
    n = r.get("filter.json", "held_out.chatter")
    dropped = r.get("filter.json", "held_out_modes.new default: null z >= 0.75 + text chatter "
                    "test.chatter_dropped")
    return round(dropped * n) - math.ceil(r.get("filter.json", "targets.chatter_dropped") * n)


def _dup(r: Results, key: str) -> float:
    """duplicates.json's largest synthetic k-NN run."""
    return r.get("duplicates.json", "time.synthetic")[-1][key]


def _table3(r: Results) -> list[dict[str, Any]]:
    """table3.json's trained variants (not the zero-shot row)."""
    return [v for k, v in r.get("table3.json", "results").items() if k != "zero_shot"]


def _faults(r: Results, kind: str) -> int:
    return sum(r.get("faults.json", f"faults.{kind}").values())


DERIVED: dict[str, Callable[[Results], float]] = {
    "faults.injected": lambda r: _faults(r, "injected"),
    "bench.textonly_minutes": lambda r: r.get("textonly.json", "total_seconds") / 60,
    "bench.llm_minutes": lambda r: r.get("llm.json", "seconds") / 60,
    "bench.mee_negatives_minutes": lambda r: r.get("mee_negatives.json", "seconds_total") / 60,
    "textonly.caption_run_minutes": lambda r: r.get("textonly.json", "caption_run.seconds") / 60,
    "textonly.ms_per_video": lambda r: r.get(
        "textonly.json", "caption_run.phases.captioning, a shard at a time (stage + chunk, shard "
        "and status files)") / r.get("textonly.json", "caption_run.done") * 1000,
    "textonly.engine_ms_per_video": lambda r: sum(
        v for k, v in r.get("textonly.json", "breakdown.ms_per_video").items()
        if k.startswith(("chunk commits", "shard finish"))),
    "webdataset.ms_per_clip": lambda r: 1000 / r.get(
        "webdataset.json", "data_only.webdataset.clips_per_s"),
    "tdr.train_s_per_video_epoch_max": lambda r: max(
        x["train_s_per_video_epoch"] for x in r.get("tdr.json", "rows")
        if x.get("train_s_per_video_epoch") is not None),
    "tdr.ndcg1_sd_max": lambda r: max(x.get("NDCG@1_sd", 0) for x in r.get("tdr.json", "rows")),
    "textonly.videos_per_s": lambda r: r.get("textonly.json", "caption_run.done") / r.get(
        "textonly.json", "caption_run.seconds"),
    "faults.survived": lambda r: _faults(r, "survived"),
    "fuzz.targets": lambda r: len(r.get("fuzz.json", "targets")),
    "faults.wall_ratio": lambda r: r.get("faults.json", "faults.seconds") / r.get(
        "faults.json", "clean.seconds"),
    # the prompt's rules before the block (llama.cpp's cache reuses them) against after it
    "llm.block_first_slowdown": lambda r: _llm_run(
        r, "qwen2.5-coder-1.5b/actions (block first)")["seconds_per_block"] / _llm_run(
        r, "qwen2.5-coder-1.5b/actions")["seconds_per_block"],
    # the generated narration's steps that no line speaks (report and tune splits)
    "captions.unspoken_share": lambda r: 1 - sum(
        r.get("captions.json", f"splits.{s}.spoken_steps") for s in ("report", "tune")) / sum(
        r.get("captions.json", f"splits.{s}.steps") for s in ("report", "tune")),
    # duplicates' synthetic k-NN set extrapolated to 100,000 videos of 5 minutes at its
    # keyframe rate: keyframes and the FAISS index's size
    "duplicates.seconds_per_keyframe": lambda r: _dup(r, "videos") * _dup(
        r, "seconds_per_video") / _dup(r, "keyframes"),
    "duplicates.keyframes_m_at_100k": lambda r: 100_000 * 300 / (
        _dup(r, "videos") * _dup(r, "seconds_per_video") / _dup(r, "keyframes")) / 1e6,
    "duplicates.index_gb_at_100k": lambda r: _dup(r, "index_mb") / 1000 * 100_000 * 300 / (
        _dup(r, "videos") * _dup(r, "seconds_per_video")),
    # the default encoder's 1000 class names embedded once at the measured text speed
    "encoders.class_names_s": lambda r: 1000 / r.get("encoders.json", "speed.texts_per_s"),
    # Table 3's training captions per variant, and the trained models' held-out R@1
    "table3.pairs_min": lambda r: min(v["quality"]["pairs"] for v in _table3(r)),
    "table3.pairs_max": lambda r: max(v["quality"]["pairs"] for v in _table3(r)),
    "table3.trained_r1_min": lambda r: min(v["mean"]["R@1"] for v in _table3(r)),
    "table3.trained_r1_max": lambda r: max(v["mean"]["R@1"] for v in _table3(r)),
    "webdataset.kb_per_clip": lambda r: 4 * _shard_kb_per_frame(r),
    # one step's share of the filler benchmark's pooled report steps
    "reject.one_step_share": lambda r: 1 / r.get(
        "reject.json", "pipeline.runs.default.after_align.steps"),
    "scaling.captions_per_block": _captions_per_block,
    "scaling.captions_per_block_min": lambda r: _qwen_cpb(r, min),
    "scaling.captions_per_block_max": lambda r: _qwen_cpb(r, max),
    "scaling.blocks_total_m": lambda r: _blocks_total(r) / 1e6,
    "scaling.blocks_total_min_m": lambda r: HTM_CAPTIONS / _qwen_cpb(r, max) / 1e6,
    "scaling.blocks_total_max_m": lambda r: HTM_CAPTIONS / _qwen_cpb(r, min) / 1e6,
    "scaling.words_per_video": lambda r: _blocks_total(r) / HTM_VIDEOS * BLOCK_WORDS,
    "scaling.words_per_minute": lambda r: _blocks_total(r) / HTM_VIDEOS * BLOCK_WORDS
    / MEAN_VIDEO_MIN,
    # only the first block is read without llama.cpp's prompt cache: its whole prompt
    "scaling.prompt_tokens_per_block": lambda r: _llm_run(r, PAPER_RUN)["block_rows"][0][
        "prompt_n"],
    "scaling.first_block_words": lambda r: _llm_run(r, PAPER_RUN)["block_rows"][0]["words"],
    "scaling.gen_tokens_per_block": lambda r: _block_mean(r, PAPER_RUN, "predicted_n"),
    "scaling.block_words": lambda r: _block_mean(r, PAPER_RUN, "words"),
    "scaling.prompt_tokens_total_b": lambda r: _blocks_total(r) * _llm_run(
        r, PAPER_RUN)["block_rows"][0]["prompt_n"] / 1e9,
    "scaling.gen_tokens_total_b": lambda r: _gen_tokens_total(r) / 1e9,
    **{f"scaling.llm_gpu_hours_{k}": (lambda r, v=v: _llm_gpu_hours(r, v))
       for k, v in VLLM_GEN_TOK_S.items()},
    "scaling.llm_gpu_hours_low": lambda r: _llm_gpu_hours(r, max(VLLM_GEN_TOK_S.values())),
    "scaling.llm_gpu_hours_high": lambda r: _llm_gpu_hours(r, min(VLLM_GEN_TOK_S.values())),
    "scaling.gpu_hours_low": lambda r: _gpu_hours(r, "low"),
    "scaling.gpu_hours_high": lambda r: _gpu_hours(r, "high"),
    "scaling.node_hours_low": lambda r: _gpu_hours(r, "low") / 8,
    "scaling.node_hours_high": lambda r: _gpu_hours(r, "high") / 8,
    "scaling.cpu_llm_vm_hours": lambda r: _gen_tokens_total(r) / _llm_run(
        r, SMALL_PAPER_RUN)["gen_tok_per_s"] / 3600,
    "scaling.asr_words_total_b": lambda r: _blocks_total(r) * BLOCK_WORDS / 1e9,
    "scaling.blocks_per_video": lambda r: _blocks_total(r) / HTM_VIDEOS,
    "scaling.frames_total_m": lambda r: HTM_HOURS * 3600 / 1e6,
    "scaling.asr_core_hours_per_1000h": lambda r: 1000 / r.get("asr.json", "configs.0.rtf") * 2,
    "scaling.decode_core_hours": lambda r: HTM_HOURS / r.get(
        "decode.json", "iter_frames.realtime_x") * 2,
    "scaling.decode_realtime_per_core": lambda r: r.get(
        "decode.json", "iter_frames.realtime_x") / 2,
    "scaling.cores_per_gpu": lambda r: A100_VIT_B_IMG_S / (r.get(
        "decode.json", "iter_frames.realtime_x") / 2),
    "scaling.embed_vm_hours": lambda r: HTM_HOURS * 3600 / r.get(
        "encoders.json", "speed.images_per_s") / 3600,
    "scaling.text_embed_vm_hours": lambda r: HTM_CAPTIONS / r.get(
        "encoders.json", "speed.texts_per_s") / 3600,
    "scaling.stats_vm_hours": _stats_vm_hours,
    "scaling.exact_query_s_at_pairs": lambda r: r.get(
        "serve.json", "exact_vs_hnsw.exact_ms_per_query") / 1000 * HTM_PAIRS / r.get(
        "serve.json", "exact_vs_hnsw.n"),
    "scaling.mee_cpu_hours": lambda r: 300_000 * 128 / r.get(
        "train.json", "throughput.mee_on_cached_embeddings.pairs_per_s") / 3600,
    "scaling.a100_train_img_s": lambda r: A100_VIT_B_IMG_S * A100_TRAIN_FRACTION,
    "scaling.a100_train_hours": _train_hours,
    "scaling.shard_kb_per_frame": lambda r: _shard_kb_per_frame(r),
    "scaling.shards_tb": lambda r: HTM_PAIRS * 4 * _shard_kb_per_frame(r) / 1e9,
    "scaling.clips_per_s_per_gpu": lambda r: A100_VIT_B_IMG_S * A100_TRAIN_FRACTION / 4,
    "scaling.a100_train_hours_x2": lambda r: 2 * _train_hours(r),
    # align over cached embeddings (bench_align_scale): our own time at HowTo100M's size, the
    # null z's share of it, and the video bytes the cache lookup's content key reads
    "align_scale.core_hours_at_htm": lambda r: _align_largest(r, "after_cpu_ms_per_video")
    * HTM_VIDEOS / 1000 / 3600,  # CPU time: wall time on the shared cores is not steady
    "align_scale.null_z_share": lambda r: _align_part(r, "the null z (reference_z, both "
                                                      "halves)"),
    "align_scale.cache_read_share": lambda r: _align_part(r, "reading the frame cache"),
    "align_scale.content_key_tb_at_htm": lambda r: HTM_VIDEOS * CONTENT_KEY_BYTES / 1e12,
    # align's list of the run's videos (bench_align_scale's memory rows): MB per 100k videos,
    # the compact RunVideos against the list of VideoItems it replaced
    "align_scale.run_videos_mb_per_100k": lambda r: r.get(
        "align_scale.json", "memory.driver_mb.run_videos_mb") * 1e5 / r.get(
        "align_scale.json", "memory.driver_mb.videos"),
    "align_scale.item_list_mb_per_100k": lambda r: r.get(
        "align_scale.json", "memory.driver_mb.item_list_mb") * 1e5 / r.get(
        "align_scale.json", "memory.driver_mb.videos"),
    # the default filter's held-out chatter margin: captions dropped beyond the target's count
    "filter.held_out_chatter_margin": lambda r: _chatter_margin(r),
    # the filler test's parse (bench_parse): parser processes that 300 videos/s (issue #22's
    # HTTP target) need, at one worker's measured rate
    "parse.workers_for_300": lambda r: 300 / r.get("parse.json", "by_workers.1.videos_per_s"),
    # two parser processes against one (the rows' own speedup is against the Matcher baseline)
    "parse.two_vs_one": lambda r: (r.get("parse.json", "by_workers.2.videos_per_s")
                                   / r.get("parse.json", "by_workers.1.videos_per_s")),
}


def derived(name: str, r: Results) -> Any:
    if name not in DERIVED:
        raise FigureError(f"no derived figure @{name} (known: {', '.join(sorted(DERIVED))})")
    try:
        return DERIVED[name](r)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise FigureError(f"@{name}: {type(exc).__name__} {exc}") from None


def render_fig(spec: str, r: Results) -> str:
    """The text a ``fig`` marker's spec renders to now."""
    spec = spec.strip()
    if spec.startswith("@"):
        name, _, form = spec[1:].partition(" ")
        return fmt(derived(name, r), form, f"@{name}")
    file, sep, rest = spec.partition(":")
    if not sep or " " not in rest:
        raise FigureError(f"malformed marker spec {spec!r} (FILE.json:path FORMAT)")
    # FORMAT is the last word; should that path not exist, a suffix with a space (".1f %")
    # is tried, the longest path that exists winning
    splits = [i for i, c in enumerate(rest) if c == " "][::-1]
    first: FigureError | None = None
    for i in splits:
        try:
            value = r.get(file, rest[:i])
        except FigureError as exc:
            first = first or exc
            continue
        return fmt(value, rest[i + 1:], f"{file}:{rest[:i]}")
    raise first  # type: ignore[misc]


# ---- whole tables ---------------------------------------------------------------------------
def md_tables(text: str) -> list[list[str]]:
    """Every Markdown table of a page, as lists of its lines."""
    tables: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def render_table(spec: str, r: Results) -> str:
    """The table a ``table`` marker's spec renders to now (ending with a newline)."""
    head, *opts = spec.split(" ", 1)
    file, _, k = head.partition("#")
    if not file.endswith(".md") or not k.isdigit():
        raise FigureError(f"malformed table spec {spec!r} (FILE.md#K [cols=a|b] [rows=x|y])")
    tables = md_tables(r.load(file))
    if not 1 <= int(k) <= len(tables):
        raise FigureError(f"{file}: no table #{k} (it has {len(tables)})")
    lines = tables[int(k) - 1]
    options = dict(o.split("=", 1) for o in re.findall(r"(?:cols|rows)=[^=]*?(?= (?:cols|rows)=|$)",
                                                       opts[0] if opts else ""))
    header, rows = _cells(lines[0]), [_cells(x) for x in lines[2:]]
    keep = list(range(len(header)))
    if "cols" in options:
        want = options["cols"].split("|")
        missing = [c for c in want if c not in header]
        if missing:
            raise FigureError(f"{file}#{k}: no column {missing[0]!r}")
        keep = [header.index(c) for c in want]
    if "rows" in options:
        by_first = {row[0]: row for row in rows}
        want = options["rows"].split("|")
        missing = [x for x in want if x not in by_first]
        if missing:
            raise FigureError(f"{file}#{k}: no row {missing[0]!r}")
        rows = [by_first[x] for x in want]
    out = ["| " + " | ".join(header[i] for i in keep) + " |",
           "|" + "|".join("---" for _ in keep) + "|"]
    out += ["| " + " | ".join(row[i] if i < len(row) else "" for i in keep) + " |" for row in rows]
    return "\n".join(out) + "\n"


# ---- rendering and checking pages -----------------------------------------------------------
@dataclass
class Problem:
    """One marker that is stale (its text differs from the results) or broken."""

    file: Path
    line: int
    spec: str
    message: str

    def __str__(self) -> str:
        try:
            where = self.file.relative_to(ROOT)
        except ValueError:
            where = self.file
        return f"{where}:{self.line}: {self.spec}: {self.message}"


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


CODE_RE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def _in_code(text: str) -> list[tuple[int, int]]:
    """Spans of code (fenced blocks, inline code): a marker shown there is an example."""
    return [m.span() for m in CODE_RE.finditer(text)]


def render_text(text: str, r: Results, file: Path) -> tuple[str, list[Problem]]:
    """``text`` with every marker re-rendered, and every marker that was stale or broken."""
    problems: list[Problem] = []

    def example(m: re.Match[str], spans: list[tuple[int, int]]) -> bool:
        return any(a <= m.start() < b for a, b in spans)

    def table(m: re.Match[str]) -> str:
        if example(m, code):
            return m.group(0)
        try:
            new = render_table(m["spec"], r)
        except FigureError as exc:
            problems.append(Problem(file, _line_of(text, m.start()), m["spec"], str(exc)))
            return m.group(0)
        if new != m["body"]:
            problems.append(Problem(file, _line_of(text, m.start()), m["spec"],
                                    "table differs from its results file"))
        return f"{m['open']}\n{new}{m['close']}"

    def fig(m: re.Match[str]) -> str:
        if example(m, code):
            return m.group(0)
        try:
            new = render_fig(m["spec"], r)
        except FigureError as exc:
            problems.append(Problem(file, _line_of(text, m.start()), m["spec"], str(exc)))
            return m.group(0)
        if new != m["value"]:
            problems.append(Problem(file, _line_of(text, m.start()), m["spec"],
                                    f"says {m['value']!r}, results say {new!r}"))
        return f"<!--fig {m['spec']}-->{new}<!--/fig-->"

    code = _in_code(text)
    text = TABLE_RE.sub(table, text)
    code = _in_code(text)
    return FIG_RE.sub(fig, text), problems


def markers(text: str) -> Iterator[str]:
    """Every marker spec of a page (tables and figures), examples in code left out."""
    code = _in_code(text)
    for regex in (TABLE_RE, FIG_RE):
        yield from (m["spec"] for m in regex.finditer(text)
                    if not any(a <= m.start() < b for a, b in code))


def process(files: list[Path], r: Results, write: bool) -> list[Problem]:
    """Check (and with ``write``, rewrite) every page; returns what was stale or broken."""
    problems: list[Problem] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        new, found = render_text(text, r, path)
        problems += found
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    return problems


# ---- the CLI reference ---------------------------------------------------------------------
CLI_NOTES = """## Where the step options come from

The step options of `caption`, `align`, `download`, `run` and `train` are the fields of the
steps' configs (`CaptionRunConfig` in `src/howtocap/caption/config.py`, `AlignConfig` in
`src/howtocap/align/config.py`, `DownloadConfig` in `src/howtocap/download/config.py`,
`TrainConfig` in `src/howtocap/train/config.py`): each field's name, default, bounds and help
are declared there once, and `run` takes the union (a flag two declare, `--clip-seconds` or
`--keep-chatter`, sets both). A `train` setting that `--recipe` sets is the recipe's unless
typed. A `--config` YAML file
(`caption`, `align`, `run`) takes the same names as keys (`block-words` or `block_words`); an
unknown key is refused. A value out of its bounds is refused in one line naming the flag.

Removed: `--seed` of `caption`, `align` and `run`. In `run` it set both the LLM's sampling seed
and align's sampling seed; they are now `--llm-seed` (`caption`, `run`) and `--align-seed`
(`align`, `run`).
"""


def cli_reference() -> str:
    """docs/cli.md as Typer's own docs generator writes it for the ``howtocap`` app."""
    import typer.cli
    from typer.main import get_command

    from howtocap.cli import app

    body = typer.cli.get_docs_for_click(obj=get_command(app), ctx=typer.Context(
        get_command(app)), name="howtocap", title="`howtocap` command reference")
    note = ("<!-- generated by `python benchmarks/render_docs.py --cli` from the Typer app; "
            "do not edit by hand -->\n\n")
    return note + body.strip() + "\n\n" + CLI_NOTES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 listing stale or broken markers")
    ap.add_argument("--cli", action="store_true", help="also regenerate docs/cli.md")
    ap.add_argument("files", nargs="*", type=Path, help="pages (default: README.md, docs/*.md)")
    args = ap.parse_args(argv)
    failed = False
    if args.cli:
        text = cli_reference()
        if args.check:
            if not CLI_DOC.is_file() or CLI_DOC.read_text(encoding="utf-8") != text:
                print(f"{CLI_DOC.relative_to(ROOT)}: differs from the app; run "
                      "python benchmarks/render_docs.py --cli")
                failed = True
        else:
            CLI_DOC.write_text(text, encoding="utf-8")
    problems = process(args.files or doc_files(), Results(), write=not args.check)
    for p in problems:
        print(p)
    if args.check:
        failed |= bool(problems)
    else:
        broken = [p for p in problems if not p.message.startswith(("says ", "table differs"))]
        print(f"rendered {len(problems) - len(broken)} changed marker(s); {len(broken)} broken")
        failed |= bool(broken)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
