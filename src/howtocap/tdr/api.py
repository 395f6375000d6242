"""``howtocap tdr train | eval | export`` as library calls: inputs read and checked, frame
features through the pipeline (resumable, one line per broken video), then a small model
trained, scored or run on those features."""

from __future__ import annotations

import functools
import io
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from howtocap.atomic import atomic_write_bytes, atomic_write_parquet, atomic_write_text
from howtocap.encoders.defaults import ENCODER
from howtocap.errors import HowtocapError, InputError
from howtocap.io.inputs import VIDEO_EXTS, VideoItem
from howtocap.subtitles.policy import ASR_MODE
from howtocap.tdr.config import EVERY, SPLIT, TdrConfig
from howtocap.tdr.data import SPLITS, VideoAnn, goal_sentences, read_annotations, read_scripts
from howtocap.tdr.features import FrameFeatures, tdr_features_run
from howtocap.tdr.losses import aux_loss, fcl_labels, kofcl_labels, pair_mask, tdr_loss
from howtocap.tdr.metrics import gold_ranks, isolated_steps, ndcg_at, recall_at, rouge_l
from howtocap.tdr.model import TdrModel

BASELINES = ("bm25", "text", "image", "joint")
CKPT_FILE = "tdr.pt"


@dataclass
class Inputs:
    """Annotations, scripts and the videos found for them (with what was missing)."""

    anns: dict[str, VideoAnn]
    scripts: dict[str, list[list[str]]]
    items: list[VideoItem]
    problems: list[str] = field(default_factory=list)


def load_inputs(annotations: str | Path, scripts: str | Path, videos: str | Path,
                split: str | None = None) -> Inputs:
    """Read both files and find ``DIR/<vid>.<ext>`` for each annotated video of ``split``
    (all splits when ``None``); a missing video or goal is one problem line, not a stop."""
    if split is not None and split not in SPLITS:
        raise HowtocapError(f"--split must be one of {', '.join(SPLITS)}, not {split!r}")
    anns = read_annotations(annotations)
    scr = read_scripts(scripts)
    vdir = Path(videos)
    if not vdir.is_dir():
        raise InputError(vdir, "not a folder of videos")
    by_stem = {p.stem: p.resolve() for p in sorted(vdir.iterdir(), reverse=True)  # first wins
               if p.suffix.lower() in VIDEO_EXTS and p.is_file()}
    items, problems = [], []
    for vid, ann in anns.items():
        if split is not None and ann.subset != split:
            continue
        if vid not in by_stem:
            problems.append(f"{vdir / vid}.*: no video file for annotated video {vid!r}")
        elif ann.goal not in scr:
            problems.append(f"{scripts}: no scripts for goal {ann.goal!r} (video {vid!r})")
        else:
            items.append(VideoItem(vid, by_stem[vid]))
    if not items:
        raise HowtocapError(f"no annotated videos{f' of split {split!r}' if split else ''} "
                            f"found in {vdir}" + (f" ({problems[0]})" if problems else ""))
    return Inputs(anns, scr, items, problems)


@dataclass
class VideoBatch:
    """One video as the model sees it: frame features, gold step per frame (-1: none)."""

    video_id: str
    image: torch.Tensor
    text: torch.Tensor
    gold: torch.Tensor
    objects: list[frozenset[str] | None]
    isolated: np.ndarray  # per frame: its step is isolated


def make_batch(ann: VideoAnn, ff: FrameFeatures, device: torch.device) -> VideoBatch:
    gold = [ann.step_at(float(t)) for t in ff.times]
    iso_step = isolated_steps([s.key_objects for s in ann.steps])
    return VideoBatch(
        ann.video_id, torch.from_numpy(ff.image).to(device), torch.from_numpy(ff.text).to(device),
        torch.tensor([-1 if g is None else g for g in gold], device=device),
        [None if g is None else ann.steps[g].key_objects for g in gold],
        np.array([g is not None and iso_step[g] for g in gold]))


def _features(inp: Inputs, root: Path, cfg: TdrConfig, model: Any, *, subtitles: str | None,
              asr: str, device: str | None, progress: bool
              ) -> tuple[dict[str, FrameFeatures], list[str]]:
    """Each video's frame features (kept under ``root``: a re-run resumes) and the problems of
    the inputs and the videos, one line each."""
    summary, feats = tdr_features_run(inp.items, root, encoder=cfg.encoder, every=cfg.every,
                                      window=cfg.window, subtitles=subtitles, asr=asr,
                                      device=device, model=model, progress=progress)
    return feats, [*inp.problems, *(f"{vid}: {msg}" for vid, msg in summary.failed)]


@functools.cache
def _encoder(name: str, device: str | None) -> Any:
    """One frozen encoder per (name, device) per process: train → eval → export in one
    process (a notebook, a benchmark) load it once (loading is most of a small run)."""
    from howtocap.encoders import create

    return create(name, device=device)


def _encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    return model.encode_texts(list(texts)).astype(np.float32)


@dataclass
class TrainResult:
    checkpoint: Path
    videos: int
    frames: int
    seconds: float
    seconds_per_video_epoch: float
    log: list[dict[str, float]]
    problems: list[str]


def train(annotations: str | Path, scripts: str | Path, videos: str | Path, out: str | Path,
          cfg: TdrConfig | None = None, *, subtitles: str | None = None, asr: str = ASR_MODE,
          work: str | Path | None = None, device: str | None = None, progress: bool = True,
          encoder_model: Any | None = None,
          on_epoch: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train on the ``training`` split; writes ``OUT/tdr.pt`` and ``OUT/train_log.csv``."""
    from howtocap.encoders.base import pick_device

    cfg = cfg or TdrConfig()
    inp = load_inputs(annotations, scripts, videos, "training")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    enc = encoder_model or _encoder(cfg.encoder, device)
    feats, problems = _features(inp, Path(work) if work else out / "work", cfg, enc,
                                subtitles=subtitles, asr=asr, device=device, progress=progress)
    if not feats:
        raise HowtocapError("no training video could be read: " + "; ".join(problems[:3]))
    dev = pick_device(device)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    batches = [make_batch(inp.anns[vid], ff, dev) for vid, ff in feats.items()]
    caps = {vid: torch.from_numpy(_encode(enc, [s.sentence for s in inp.anns[vid].steps])).to(dev)
            for vid in feats}
    model = TdrModel(enc.dim, d_model=cfg.d_model, d_r=cfg.d_r, context=cfg.context,
                     modality=cfg.modality).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    aux: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for b in batches:  # pair labels and masks, once
        steps = b.gold.tolist()
        labels = fcl_labels(steps) if cfg.aux == "fcl" else kofcl_labels(b.objects, cfg.mu)
        aux[b.video_id] = (labels.to(dev), pair_mask(steps).to(dev))
    log: list[dict[str, float]] = []
    threads = torch.get_num_threads()
    if dev.type == "cpu":  # a model this small only loses to thread hand-offs (many times)
        torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        for epoch in range(cfg.epochs):
            model.train()
            rng.shuffle(batches)
            tot = aux_tot = 0.0
            for b in batches:  # one video per batch: its other captions are the negatives
                g, q = model.frames(b.image, b.text)
                loss = l_tdr = tdr_loss(model.relevance(q, model.sentences(caps[b.video_id])),
                                        b.gold)
                l_aux = torch.zeros((), device=dev)
                if cfg.aux != "none" and cfg.lam > 0:
                    l_aux = aux_loss(g, model.aux_w, *aux[b.video_id])
                    loss = l_tdr + cfg.lam * l_aux
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += float(l_tdr.detach())
                aux_tot += float(l_aux.detach())
            log.append({"epoch": epoch + 1, "loss_tdr": tot / len(batches),
                        "loss_aux": aux_tot / len(batches), "seconds": time.perf_counter() - t0})
            if on_epoch:
                on_epoch(epoch + 1, log[-1]["loss_tdr"])
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - t0
    ckpt = out / CKPT_FILE
    buf = io.BytesIO()
    torch.save({"config": cfg.model_dump(), "d_in": enc.dim, "state": model.state_dict()}, buf)
    atomic_write_bytes(ckpt, buf.getvalue())
    atomic_write_text(out / "train_log.csv", pd.DataFrame(log).to_csv(index=False))
    atomic_write_text(out / "tdr.json", json.dumps(
        {"config": cfg.model_dump(), "videos": len(batches), "problems": problems}, indent=1))
    return TrainResult(ckpt, len(batches), int(sum(len(b.gold) for b in batches)), seconds,
                       seconds / max(1, len(batches) * cfg.epochs), log, problems)


def load_checkpoint(path: str | Path, device: str | None = None) -> tuple[TdrModel, TdrConfig]:
    from howtocap.encoders.base import pick_device

    p = Path(path) / CKPT_FILE if Path(path).is_dir() else Path(path)
    if not p.is_file():
        raise InputError(p, "no TDR checkpoint here (train one with `howtocap tdr train`)")
    try:
        data = torch.load(p, map_location="cpu", weights_only=True)
        cfg = TdrConfig(**data["config"])
        model = TdrModel(int(data["d_in"]), d_model=cfg.d_model, d_r=cfg.d_r,
                         context=cfg.context, modality=cfg.modality)
        model.load_state_dict(data["state"])
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise InputError(p, f"not a TDR checkpoint ({' '.join(str(exc).split())[:200]})") \
            from None
    return model.to(pick_device(device)).eval(), cfg


@dataclass
class Scorer:
    """Frame × candidate relevance for one video: a trained model or a training-free baseline
    (``bm25`` over the transcript; ``text``/``image``/``joint``: cosine of the frozen encoder's
    transcript / image / summed embedding with the sentence embedding)."""

    encoder: Any
    model: TdrModel | None = None
    baseline: str | None = None

    def __call__(self, ff: FrameFeatures, sentences: Sequence[str]
                 ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(scores ``(frames, sentences)``, frame representation g, sentence embeddings d)."""
        if self.baseline == "bm25":
            return _bm25(ff.transcripts, sentences), None, None
        emb = _encode(self.encoder, sentences)
        if self.model is not None:
            dev = next(self.model.parameters()).device
            with torch.no_grad():
                g, q = self.model.frames(torch.from_numpy(ff.image).to(dev),
                                         torch.from_numpy(ff.text).to(dev))
                d = self.model.sentences(torch.from_numpy(emb).to(dev))
                return (q @ d.T).cpu().numpy(), g.cpu().numpy(), d.cpu().numpy()
        query = {"text": ff.text, "image": ff.image}.get(self.baseline or "", ff.image + ff.text)
        norm = np.linalg.norm(query, axis=1, keepdims=True)
        query = query / np.where(norm > 0, norm, 1.0)
        return query @ emb.T, query, emb


def _bm25(queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(docs), stopwords="en", show_progress=False),
                    show_progress=False)
    toks = bm25s.tokenize(list(queries), stopwords="en", show_progress=False, return_ids=False)
    vocab = retriever.vocab_dict
    known = [[t for t in q if t in vocab] for q in toks]  # bm25s rejects unseen words
    return np.stack([retriever.get_scores(q) if q else np.zeros(len(docs))
                     for q in known]).astype(np.float64)


def _scorer(checkpoint: str | Path | None, baseline: str | None, device: str | None,
            encoder_model: Any | None) -> tuple[Scorer, TdrConfig]:
    if (checkpoint is None) == (baseline is None):
        raise HowtocapError("give either --checkpoint or --baseline")
    if baseline is not None and baseline not in BASELINES:
        raise HowtocapError(f"--baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    model, cfg = load_checkpoint(checkpoint, device) if checkpoint is not None \
        else (None, TdrConfig())
    # bm25 needs no encoder; the feature stage loads one only if a video lacks features
    enc = encoder_model if encoder_model is not None or baseline == "bm25" \
        else _encoder(cfg.encoder, device)
    return Scorer(enc, model, baseline), cfg


def _work_root(work: str | Path | None, checkpoint: str | Path | None) -> Path:
    """Where frame features live: ``--work``, else beside the checkpoint (train wrote the
    training videos' features there), else ``.howtocap-tdr/`` in the current folder."""
    if work is not None:
        return Path(work)
    if checkpoint is not None:
        p = Path(checkpoint)
        return (p if p.is_dir() else p.parent) / "work"
    return Path(".howtocap-tdr")


def evaluate(annotations: str | Path, scripts: str | Path, videos: str | Path, *,
             checkpoint: str | Path | None = None, baseline: str | None = None,
             split: str = SPLIT, subtitles: str | None = None, asr: str = ASR_MODE,
             work: str | Path | None = None, encoder: str | None = None,
             every: float | None = None, device: str | None = None, progress: bool = True,
             encoder_model: Any | None = None) -> dict[str, Any]:
    """R@1/3/5, NDCG@1/3/5 and isolated-frame R@1 of a checkpoint or a baseline on ``split``."""
    scorer, cfg = _scorer(checkpoint, baseline, device, encoder_model)
    if checkpoint is None:  # a baseline: the sampling and encoder are the user's choice
        cfg = TdrConfig(encoder=encoder or ENCODER, every=every or EVERY)
    inp = load_inputs(annotations, scripts, videos, split)
    feats, problems = _features(inp, _work_root(work, checkpoint), cfg, scorer.encoder,
                                subtitles=subtitles, asr=asr, device=device, progress=progress)
    ranks, iso_ranks = [], []
    ndcg: dict[int, list[float]] = {1: [], 3: [], 5: []}
    t0 = time.perf_counter()
    for vid, ff in feats.items():
        ann = inp.anns[vid]
        b = make_batch(ann, ff, torch.device("cpu"))
        gold = b.gold.numpy()
        keep = gold >= 0
        if not keep.any():
            continue
        caps = [s.sentence for s in ann.steps]
        r = gold_ranks(scorer(ff, caps)[0][keep], gold[keep])
        ranks.append(r)
        iso_ranks.append(r[b.isolated[keep]])
        sents = goal_sentences(inp.scripts, ann.goal)
        ss, _, _ = scorer(ff, sents)
        rel = rouge_l(caps, sents)
        for k in ndcg:
            ndcg[k] += [ndcg_at(ss[i], rel[gold[i]], k) for i in np.flatnonzero(keep)]
    seconds = time.perf_counter() - t0
    all_r = np.concatenate(ranks) if ranks else np.zeros(0, int)
    iso = np.concatenate(iso_ranks) if iso_ranks else np.zeros(0, int)
    return {
        "method": baseline or str(checkpoint), "split": split, "videos": len(ranks),
        "frames": int(len(all_r)), "isolated_frames": int(len(iso)),
        **recall_at(all_r), **{f"NDCG@{k}": float(np.mean(v)) if v else float("nan")
                               for k, v in ndcg.items()},
        "isolated_R@1": float(np.mean(iso <= 1)) if len(iso) else float("nan"),
        "retrieval_seconds_per_video": seconds / max(1, len(ranks)),
        "problems": problems,
    }


def export(annotations: str | Path, scripts: str | Path, videos: str | Path, out: str | Path, *,
           checkpoint: str | Path, split: str | None = None, subtitles: str | None = None,
           asr: str = ASR_MODE, work: str | Path | None = None, device: str | None = None,
           progress: bool = True, encoder_model: Any | None = None) -> dict[str, Any]:
    """``OUT/<vid>.npy`` ``[frames, d_g + d_r]`` (frame representation ⊕ the embedding of its
    top retrieved script sentence, the paper's [g; d]) and ``OUT/retrieved.parquet``."""
    scorer, cfg = _scorer(checkpoint, None, device, encoder_model)
    inp = load_inputs(annotations, scripts, videos, split)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    feats, problems = _features(inp, _work_root(work, checkpoint), cfg, scorer.encoder,
                                subtitles=subtitles, asr=asr, device=device, progress=progress)
    rows = []
    shapes = {}
    for vid, ff in feats.items():
        sents = goal_sentences(inp.scripts, inp.anns[vid].goal)
        sc, g, d = scorer(ff, sents)
        assert g is not None and d is not None
        best = sc.argmax(axis=1)
        arr = np.concatenate([g, d[best]], axis=1).astype(np.float32)
        npy = io.BytesIO()
        np.save(npy, arr, allow_pickle=False)
        atomic_write_bytes(out / f"{vid}.npy", npy.getvalue())
        shapes[vid] = list(arr.shape)
        rows += [{"video_id": vid, "time": float(t), "sentence": sents[j],
                  "score": float(sc[i, j])}
                 for i, (t, j) in enumerate(zip(ff.times, best, strict=True))]
    atomic_write_parquet(pd.DataFrame(rows, columns=["video_id", "time", "sentence", "score"]),
                         out / "retrieved.parquet")
    info = {"videos": len(shapes), "shapes": shapes, "d_g": cfg.d_model, "d_r": cfg.d_r,
            "every": cfg.every, "problems": problems}
    atomic_write_text(out / "features.json", json.dumps(info, indent=1))
    return info


def summary_line(res: dict[str, Any]) -> str:
    keys = ["R@1", "R@3", "R@5", "NDCG@1", "NDCG@3", "NDCG@5", "isolated_R@1"]
    return "  ".join(f"{k} {res[k]:.3f}" for k in keys)


__all__ = ["BASELINES", "TdrConfig", "evaluate", "export", "load_inputs", "train"]
