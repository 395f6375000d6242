"""``howtocap stats DIR``: the HowToCaption paper's dataset statistics (its Table 12, defined
in docs/stats.md) of three corpora: ``subtitles``, ``captions`` (the LLM's) and ``kept``
(aligned rows the filter kept). As in the paper, text statistics use at most ``videos`` videos
drawn once with a fixed seed, the same for every corpus."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import io
import json
import math
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap import __version__
from howtocap.atomic import atomic_write_text
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.nlp import iter_words_and_verbs, load_spacy, model_label
from howtocap.progress import progress_bar
from howtocap.report import DEFAULT_SEED, DEFAULT_VIDEOS, DEFAULT_WORKERS

NGRAM_ORDERS = (1, 2, 3)
TOP_VERBS = 5  # "diverse" verbs are the ones outside this many most frequent lemmas
TABLES = ("videos", "subtitles", "captions", "aligned", "status", "signals")
SIGNALS = ("motion", "text_area", "face_area", "brightness", "sharpness", "aesthetic")
THUMBS = 3  # clips shown at each end of a signal's range
BATCH_SIZE = 512  # texts per spaCy batch


def mean_std(values: np.ndarray) -> dict[str, float | None]:
    """Mean and population std of the finite values; ``None`` when there are none (never NaN)."""
    arr = np.asarray(values, float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {"mean": None, "std": None}
    return {"mean": float(arr.mean()), "std": float(arr.std())}


def to_pct(ratios: dict[str, float | None]) -> dict[str, float | None]:
    """Fractions as percentages, as the paper's Table 12 prints them."""
    return {k: None if v is None else 100.0 * v for k, v in ratios.items()}


def ngram_ratios(seqs: Iterable[Sequence[str]],
                 orders: Sequence[int] = NGRAM_ORDERS) -> dict[str, float | None]:
    """Distinct / total n-grams per order, never crossing a sequence boundary. Distinct ones
    are counted by 64-bit hashes in compact arrays (~8 bytes per n-gram at 200k captions; a
    collision among a few million is vanishingly unlikely)."""
    hashes = {n: array("q") for n in orders}
    for seq in seqs:
        seq = tuple(seq)
        for n in orders:
            k = len(seq) - n + 1
            if k > 0:
                hashes[n].extend(hash(seq[i:i + n]) for i in range(k))
    out: dict[str, float | None] = {}
    for n in orders:
        total = len(hashes[n])
        out[str(n)] = (len(np.unique(np.frombuffer(hashes[n], dtype=np.int64))) / total
                       if total else None)
    return out


def verb_stats(verb_seqs: Sequence[Sequence[str]], top: int = TOP_VERBS) -> dict[str, Any]:
    """Verb counts, the diverse-verb percentage and verb n-gram ratios of one corpus."""
    counts = Counter(v for seq in verb_seqs for v in seq)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    frequent = sum(c for _, c in ranked[:top])
    return {"verbs": total, "verb_vocabulary": len(counts),
            "top_verbs": [[v, c] for v, c in ranked[:10]],
            "diverse_verbs_pct": 100.0 * (total - frequent) / total if total else None,
            "verb_ngram_unique_pct": to_pct(ngram_ratios(verb_seqs))}


def video_ids(frames: Iterable[pd.DataFrame | None]) -> list[str]:
    """Every video with a text in any of the tables, sorted (so a seed picks the same ones)."""
    return sorted({str(v) for f in frames if f is not None for v in f["video_id"].unique()})


def sample_videos(ids: Sequence[str], videos: int, seed: int) -> set[str] | None:
    """At most ``videos`` of ``ids``, drawn uniformly with a fixed seed (``None``: keep all,
    because ``videos`` is 0 or not exceeded)."""
    if videos == 0 or len(ids) <= videos:
        return None
    rng = np.random.default_rng(seed)
    return {ids[i] for i in rng.choice(len(ids), size=videos, replace=False)}


def corpus_stats(df: pd.DataFrame, nlp: Any, *, sample: set[str] | None, workers: int,
                 cache: dict[str, tuple[list[str], list[str]]], progress: Any,
                 label: str) -> dict[str, Any]:
    """All text statistics of one table (``video_id``, ``text``) on the ``sample`` videos' texts
    (None: all). ``cache`` (text -> words, verb lemmas) is shared by the corpora, so a caption
    both generated and kept, or any repeated text, is tagged once."""
    vids_all = df["video_id"].astype(str)
    used = df[vids_all.isin(sample)] if sample is not None else df
    texts = used["text"].fillna("").astype(str).tolist()
    todo = [t for t in dict.fromkeys(texts) if t not in cache]
    parsed = iter_words_and_verbs(nlp, todo, batch_size=BATCH_SIZE, n_process=workers)
    cache.update(zip(todo, progress.track(parsed, total=len(todo),
                                          description=f"spaCy: {label}"), strict=True))

    tokens = [cache[t][0] for t in texts]
    n_words = np.array([len(toks) for toks in tokens], dtype=int)
    per_video = pd.DataFrame({"video_id": used["video_id"].astype(str).to_numpy(),
                              "n": n_words}).groupby("video_id")["n"]
    words_per_video, texts_per_video = per_video.sum(), per_video.size()
    verbs = verb_stats([cache[t][1] for t in texts])

    return {
        "texts": int(len(df)), "videos": int(vids_all.nunique()), "texts_used": int(len(texts)),
        "videos_used": int(len(texts_per_video)), "sampled": bool(len(texts) < len(df)),
        "words": int(n_words.sum()), "vocabulary": len({w for toks in tokens for w in toks}),
        "words_per_caption": mean_std(n_words),
        "words_per_video": mean_std(words_per_video.to_numpy()),
        "captions_per_video": mean_std(texts_per_video.to_numpy()),
        "word_ngram_unique_pct": to_pct(ngram_ratios(tokens)),
        **verbs,
        # raw distributions for the histograms; popped before the JSON is written
        "_words_per_caption": n_words, "_captions_per_video": texts_per_video.to_numpy(),
    }


def run_summary(tables: dict[str, pd.DataFrame | None]) -> dict[str, Any]:
    """Videos ok/failed per stage, time per stage, caption counts, the commonest failures."""
    status = tables.get("status")
    status = status if status is not None else pd.DataFrame(columns=["video_id", "stage"])
    ids = {v for name in ("videos", "subtitles", "captions", "aligned", "status")
           if (t := tables.get(name)) is not None and "video_id" in t.columns
           for v in t["video_id"].astype(str)}

    stages = []
    if len(status):
        order = status.groupby("stage")["finished_at"].min().sort_values(kind="stable").index
        for stage in order:
            g = status[status["stage"] == stage]
            ok = g["status"] == "ok"
            stages.append({"stage": str(stage), "ok": int(ok.sum()), "failed": int((~ok).sum()),
                           "seconds_total": float(g["seconds"].sum()),
                           "seconds_mean": float(g["seconds"].mean())})
    errors = status[status["status"] != "ok"] if len(status) else status
    failures = []
    if len(errors):
        grouped = (errors.groupby(["stage", "message"], sort=False)["video_id"]
                   .agg(["size", "first"]).reset_index()
                   .sort_values(["size", "stage", "message"], ascending=[False, True, True]))
        failures = [{"stage": str(r.stage), "message": str(r.message), "count": int(r.size),
                     "example_video": str(r.first)} for r in grouped.head(5).itertuples()]

    captions, aligned, subs = tables.get("captions"), tables.get("aligned"), tables.get("subtitles")
    kept = int(aligned["kept"].astype(bool).sum()) if aligned is not None else None
    return {
        "videos": len(ids),
        "videos_failed": int(errors["video_id"].nunique()) if len(errors) else 0,
        "stages": stages, "failures": failures,
        "subtitles": int(len(subs)) if subs is not None else None,
        "subtitle_sources": ({str(k): int(v) for k, v in subs["source"].value_counts().items()}
                             if subs is not None else {}),
        "captions_generated": int(len(captions)) if captions is not None else None,
        "captions_aligned": int(len(aligned)) if aligned is not None else None,
        "captions_kept": kept,
        "kept_pct": (100.0 * kept / len(aligned)) if aligned is not None and len(aligned) else None,
    }


def alignment_stats(aligned: pd.DataFrame) -> dict[str, Any]:
    """How far captions moved and how well they scored, all rows and kept rows."""
    def block(df: pd.DataFrame) -> dict[str, Any]:
        off = df["offset"].to_numpy(float)
        off = off[np.isfinite(off)]
        return {"rows": int(len(df)),
                "offset": {**mean_std(off),
                           "median": float(np.median(off)) if len(off) else None,
                           "abs_mean": float(np.abs(off).mean()) if len(off) else None},
                "score": mean_std(df["score"].to_numpy(float))}
    return {"all": block(aligned), "kept": block(aligned[aligned["kept"].astype(bool)])}


def int_histogram(series: dict[str, np.ndarray], *, max_bins: int = 50,
                  clip_quantile: float = 0.995) -> dict[str, Any]:
    """Shared integer bins for counts (pre-binned, so stats.json alone can redraw them); values
    above the pooled 99.5% quantile go in the last."""
    pooled = np.concatenate([np.asarray(v, float) for v in series.values()]) if series else []
    if len(pooled) == 0:
        return {"edges": [], "clipped_at": None, "series": {}}
    top = int(math.ceil(np.quantile(pooled, clip_quantile)))
    step = max(1, math.ceil((top + 1) / max_bins))
    edges = np.arange(0, top + step + 1, step)
    clipped = bool(pooled.max() > top)
    counts = {k: np.histogram(np.minimum(np.asarray(v, float), top), edges)[0].tolist()
              for k, v in series.items()}
    return {"edges": edges.tolist(), "clipped_at": top if clipped else None, "series": counts}


def float_histogram(series: dict[str, np.ndarray], *, bins: int = 40) -> dict[str, Any]:
    """Shared equal-width bins over the pooled range."""
    arrays = {k: np.asarray(v, float) for k, v in series.items()}
    pooled = np.concatenate(list(arrays.values())) if arrays else np.array([])
    pooled = pooled[np.isfinite(pooled)]
    if pooled.size == 0:
        return {"edges": [], "clipped_at": None, "series": {}}
    lo, hi = float(pooled.min()), float(pooled.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    return {"edges": edges.tolist(), "clipped_at": None,
            "series": {k: np.histogram(v[np.isfinite(v)], edges)[0].tolist()
                       for k, v in arrays.items()}}


def signal_stats(signals: pd.DataFrame, videos: pd.DataFrame | None) -> dict[str, Any]:
    """Each signal's histogram, the share flagged static, and the ``THUMBS`` highest- and
    lowest-scoring clips with a thumbnail each (the one place the report decodes video)."""
    paths = {} if videos is None else {
        str(v): p for v, p in zip(videos["video_id"], videos["video_path"], strict=True)}
    cols = [c for c in SIGNALS if c in signals and signals[c].notna().any()]
    out: dict[str, Any] = {
        "rows": len(signals), "videos": int(signals["video_id"].nunique()),
        "static": float(signals["static"].astype(bool).mean()) if "static" in signals
        and len(signals) else None,
        "histograms": {c: float_histogram({"signals": signals[c].to_numpy(float)})
                       for c in cols}, "extremes": {}}
    for c in cols:
        ranked = signals[signals[c].notna()].sort_values(c, kind="stable")
        out["extremes"][c] = {
            "high": [_thumb(r, c, paths) for _, r in ranked.tail(THUMBS)[::-1].iterrows()],
            "low": [_thumb(r, c, paths) for _, r in ranked.head(THUMBS).iterrows()]}
    return out


def _thumb(row: pd.Series, signal: str, paths: dict[str, Any]) -> dict[str, Any]:
    """One clip of a signal's extremes, with a small JPEG of its middle frame (None when
    the video is gone or does not decode: the report still lists the clip)."""
    from howtocap.io.video import frame_at

    vid, start, end = str(row["video_id"]), float(row["start"]), float(row["end"])
    jpg = None
    if path := paths.get(vid):
        with contextlib.suppress(InputError, OSError):
            img = frame_at(path, (start + end) / 2)
            img.thumbnail((192, 108))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=80)
            jpg = base64.b64encode(buf.getvalue()).decode("ascii")
    return {"video_id": vid, "start": start, "end": end, "value": float(row[signal]),
            "jpg": jpg}


def read_tables(rd: RunDir) -> dict[str, pd.DataFrame | None]:
    """Every table the run has (``None`` where a stage has not run), read once; ``status``
    is every stage's records (those of unfinished shards too: a killed run still reports)."""
    out: dict[str, pd.DataFrame | None] = {}
    for name in TABLES:
        try:
            out[name] = _status(rd) if name == "status" else \
                rd.table(name) if rd.has_table(name) else None
        except (OSError, ValueError) as exc:
            where = rd.table_path(name) if name == "videos" else rd.root / name
            raise InputError(where, f"unreadable table ({' '.join(str(exc).split())[:200]})"
                             ) from None
    return out


def _status(rd: RunDir) -> pd.DataFrame | None:
    """Every stage's status records as one frame (None: no stage has run)."""
    parts = [p for s in sorted(rd.stages_with_results()) for t in rd.records(s)
             if len(p := t.to_pandas())]
    return pd.concat(parts, ignore_index=True) if parts else None


def compute_stats(rundir: RunDir, *, videos: int = DEFAULT_VIDEOS,
                  seed: int = DEFAULT_SEED, nlp: Any = None,
                  workers: int = DEFAULT_WORKERS, progress: bool = False) -> dict[str, Any]:
    """All statistics of a run directory as a JSON-ready dict (pure over its tables); text
    statistics on at most ``videos`` videos (0: all) drawn with ``seed``."""
    if videos < 0:
        raise HowtocapError(f"--videos must be 0 (all) or more, got {videos}")
    if workers < 1:
        raise HowtocapError(f"--workers must be at least 1, got {workers}")
    tables = read_tables(rundir)
    have = {n: t is not None and len(t) > 0 for n, t in tables.items()}
    if not any(have[n] for n in ("subtitles", "captions", "status")):
        raise HowtocapError(f"{rundir.root}: nothing to report (no subtitles, captions or status "
                            "yet); run `howtocap caption` on this directory first")
    nlp = nlp if nlp is not None else load_spacy()

    aligned = tables["aligned"]
    corpora_frames = {"subtitles": tables["subtitles"], "captions": tables["captions"],
                      "kept": (aligned[aligned["kept"].astype(bool)]
                               if aligned is not None else None)}
    t0 = time.perf_counter()
    ids = video_ids(corpora_frames.values())
    sample = sample_videos(ids, videos, seed)
    cache: dict[str, tuple[list[str], list[str]]] = {}
    with progress_bar("{task.description}", disable=not progress) as bar:
        text = {name: corpus_stats(frame, nlp, sample=sample, workers=workers, cache=cache,
                                   progress=bar, label=name)
                if frame is not None and len(frame) else None
                for name, frame in corpora_frames.items()}

    hist: dict[str, Any] = {h: int_histogram({k: v.pop(f"_{h}") for k, v in text.items() if v})
                            for h in ("words_per_caption", "captions_per_video")}
    if have["aligned"]:
        kept_mask = aligned["kept"].astype(bool).to_numpy()
        off, score = aligned["offset"].to_numpy(float), aligned["score"].to_numpy(float)
        hist["offset"] = float_histogram({"kept": off[kept_mask], "dropped": off[~kept_mask]})
        hist["score"] = float_histogram({"kept": score[kept_mask], "dropped": score[~kept_mask]})

    return {
        "run_dir": str(rundir.root),
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "howtocap_version": __version__,
        "spacy_model": model_label(nlp),
        "sample": {"videos_max": int(videos), "seed": int(seed),
                   "videos_total": len(ids),
                   "videos_used": len(sample) if sample is not None else len(ids),
                   "sampled": sample is not None},
        "missing": [n for n in ("subtitles", "captions", "aligned", "status") if not have[n]],
        "summary": run_summary(tables),
        "text": text,
        "alignment": alignment_stats(aligned) if have["aligned"] else None,
        "histograms": hist,
        "signals": signal_stats(tables["signals"], tables["videos"]) if have["signals"] else None,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def write_report(rundir: RunDir, stats: dict[str, Any]) -> Path:
    """``DIR/report.html`` from the stats dict (see ``howtocap.report.stats_html``)."""
    from howtocap.report.stats_html import render_html

    path = rundir.root / "report.html"
    atomic_write_text(path, render_html(stats))
    return path


def _jsonable(obj: Any) -> Any:
    """NaN/inf become ``null`` and numpy scalars plain numbers, so stats.json is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(rundir: RunDir, stats: dict[str, Any]) -> Path:
    path = rundir.root / "stats.json"
    atomic_write_text(path, json.dumps(_jsonable(stats), indent=2, allow_nan=False) + "\n")
    return path


def stats_run(run_dir: str | Path, *, videos: int = DEFAULT_VIDEOS,
              seed: int = DEFAULT_SEED, spacy_model: str | None = None,
              workers: int = DEFAULT_WORKERS, progress: bool = True) -> dict[str, Any]:
    """The ``howtocap stats DIR`` command: writes ``DIR/stats.json`` and ``DIR/report.html``."""
    root = Path(run_dir)
    if not root.is_dir():
        raise InputError(root, "no such run directory")
    rundir = RunDir(root, create=False)
    stats = compute_stats(rundir, videos=videos, seed=seed, nlp=load_spacy(spacy_model),
                          workers=workers, progress=progress)
    stats["outputs"] = {"json": str(rundir.root / "stats.json"),
                        "report": str(rundir.root / "report.html")}
    write_json(rundir, stats)
    write_report(rundir, stats)
    return stats
