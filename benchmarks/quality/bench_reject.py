"""Rejecting captions that show nothing (``caption.filler``): precision/recall against labels, and
filler kept / steps covered after a default ``run`` with and without ``--keep-fillers``.

Run: python benchmarks/quality/bench_reject.py [--quick] [--no-pipeline] [--work DIR]
     -> benchmarks/results/reject.{json,md,png}

1. **The test alone**, on labelled text (no LLM):
   (a) ``benchmarks/data/filler_captions.json``: captions phrased as a small LLM writes them,
       labelled step or a reason (written for this benchmark);
   (b) ``benchmarks/data/spoken_youcook2.json`` (the caption benchmark of issue #20, built by
       ``benchmarks/spoken.py`` from YouCook2's human annotations; read from this worktree or
       the ``capbench`` worktree): its narration lines (kind step / filler / chatter / aside)
       and YouCook2's own step sentences. The rules were tuned on its ``tune`` split only;
       ``report`` and ``extra`` were never used to tune them.
   Positives are fillers (a: every non-step label; b: kind ``filler``); precision and recall
   are over step + filler lines; chatter and asides are reported apart (chatter is the chatter
   patterns' job, ``caption.chatter``).
2. **A default run** (embedded LLM, default template and align) on narrated sample videos
   with labelled filler and chatter segments (``make_fixture_set(fillers=3, chatter=2)``,
   espeak-ng speech, WebVTT subtitles), once with ``--keep-fillers`` (the baseline) and once
   with the default rejection, in the same process. The LLM is asked once: the second run
   replays the first run's replies (same prompts, greedy decoding), so the two rows differ
   only by the rejection. A caption belongs to the segment whose narration shares most of
   its words (the LLM's timestamps are often one segment off; no shared word: the segment
   its start falls in); a step is covered when a kept caption (the ``aligned`` table,
   ``kept``) belongs to it. Sample sets by seed: ``TUNE_SEEDS`` (the rules were looked at
   and changed there) apart, ``REPORT_SEEDS`` pooled for the verdict (counts added).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import DATA, ROOT, machine, write_results

sys.path.insert(0, str(ROOT / "src"))

from howtocap.caption.chatter import is_chatter  # noqa: E402
from howtocap.caption.filler import REASONS, load_parser, reject_reasons  # noqa: E402

GENERATED = DATA / "filler_captions.json"
SPOKEN = DATA / "spoken_youcook2.json"  # benchmarks/spoken.py writes it
TARGETS = {"filler_kept_max": 0.05, "steps_covered_min": 0.90, "references_kept_min": 0.98}
N_VIDEOS, FILLERS, CHATTER = 6, 3, 2
# The sample sets of the pipeline part. The rules were looked at and changed on the tune set
# only; the report sets (fixed before any of them was run with these rules) are pooled for
# the verdict. Seed 20 alone was the report set until the tune/report split: 6 videos, 27 steps
# (one step is 3.7 %), too few for a 5 % filler target.
TUNE_SEEDS = (21,)
REPORT_SEEDS = (20, 22)


def pr(rejected: list[bool], positive: list[bool]) -> dict[str, Any]:
    """Precision and recall of ``rejected`` against ``positive`` labels."""
    tp = sum(r and p for r, p in zip(rejected, positive, strict=True))
    n_rej, n_pos = sum(rejected), sum(positive)
    return {"precision": round(tp / n_rej, 4) if n_rej else None,
            "recall": round(tp / n_pos, 4) if n_pos else None,
            "positives": n_pos, "rejected": n_rej, "true_positives": tp}


def generated_set(nlp: Any) -> dict[str, Any]:
    rows = json.loads(GENERATED.read_text())["captions"]
    texts, labels = [r[0] for r in rows], [r[1] for r in rows]
    t0 = time.perf_counter()
    why = reject_reasons(texts, nlp)
    secs = time.perf_counter() - t0
    out = pr([bool(w) for w in why], [lab != "step" for lab in labels])
    steps = [w for w, lab in zip(why, labels, strict=True) if lab == "step"]
    out.update({
        "captions": len(rows), "steps": len(steps),
        "steps_kept": round(sum(not w for w in steps) / len(steps), 4),
        "recall_by_label": {r: round(sum(bool(w) for w, lab in zip(why, labels, strict=True)
                                         if lab == r) / max(1, labels.count(r)), 4)
                            for r in REASONS},
        "reason_agrees": round(sum(w == lab for w, lab in zip(why, labels, strict=True)
                                   if lab != "step" and w) / max(1, out["true_positives"]), 4),
        "steps_rejected": [t for t, w, lab in zip(texts, why, labels, strict=True)
                           if lab == "step" and w],
        "fillers_kept": [t for t, w, lab in zip(texts, why, labels, strict=True)
                         if lab != "step" and not w],
        "captions_per_s": round(len(rows) / secs, 1)})
    return out


def spoken_set(nlp: Any) -> dict[str, Any]:
    path = SPOKEN
    data = json.loads(path.read_text())
    res: dict[str, Any] = {"file": str(path.relative_to(path.parents[2])),
                           "source": data.get("source", ""), "seed": data.get("seed")}
    for split in ("tune", "report", "extra"):
        vids = [v for v in data["videos"] if v["split"] == split]
        lines = [ln for v in vids for ln in v["lines"]]
        texts, kinds = [ln["text"] for ln in lines], [ln["kind"] for ln in lines]
        t0 = time.perf_counter()
        why = reject_reasons(texts, nlp)
        secs = time.perf_counter() - t0
        sf = [i for i, k in enumerate(kinds) if k in ("step", "filler")]
        out = pr([bool(why[i]) for i in sf], [kinds[i] == "filler" for i in sf])
        share = {k: round(sum(bool(w) for w, kk in zip(why, kinds, strict=True) if kk == k)
                          / max(1, kinds.count(k)), 4) for k in ("step", "filler", "chatter",
                                                                 "aside")}
        with_chatter = {k: round(sum(bool(w) or is_chatter(t) for t, w, kk in
                                     zip(texts, why, kinds, strict=True) if kk == k)
                                 / max(1, kinds.count(k)), 4) for k in ("chatter", "aside")}
        refs = [s["sentence"] for v in vids for s in v["steps"]]
        ref_why = reject_reasons(refs, nlp)
        out.update({
            "videos": len(vids), "lines": Counter(kinds),
            "rejected_share_by_kind": share,
            "rejected_share_with_chatter_patterns": with_chatter,
            "references": len(refs),
            "references_kept": round(sum(not w for w in ref_why) / max(1, len(refs)), 4),
            "references_rejected": [f"{t} ({w})" for t, w in zip(refs, ref_why, strict=True)
                                    if w],
            "steps_rejected": [f"{t} ({w})" for t, w, k in zip(texts, why, kinds, strict=True)
                               if k == "step" and w],
            "fillers_kept": sorted({t for t, w, k in zip(texts, why, kinds, strict=True)
                                    if k == "filler" and not w}),
            "lines_per_s": round(len(texts) / secs, 1)})
        res[split] = out
    return res


class ReplayLLM:
    """The real LLM, asked once per distinct prompt; a repeated prompt gets the same reply."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.cache: dict[str, Any] = {}
        self.asked = 0

    def chat_many(self, batch: list[Any], gen: Any) -> list[Any]:
        keys = [json.dumps([m, gen.model_dump(mode="json")], sort_keys=True) for m in batch]
        todo = [(k, m) for k, m in zip(keys, batch, strict=True) if k not in self.cache]
        if todo:
            self.asked += len(todo)
            for (k, _), reply in zip(todo, self.inner.chat_many([m for _, m in todo], gen),
                                     strict=True):
                self.cache[k] = reply
        return [self.cache[k] for k in keys]

    def chat(self, messages: Any, gen: Any) -> Any:
        return self.chat_many([messages], gen)[0]

    def prefill(self, run_dir: Path, cfg: Any) -> int:
        """Replies for prompts this process did not ask (a resumed baseline run): each block's
        captions in ``run_dir`` written back as ``<t>s: caption`` lines, which parse to the
        very same captions. Returns how many prompts were added."""
        from howtocap.caption.blocks import make_blocks
        from howtocap.caption.prompt import build_messages
        from howtocap.engine.rundir import RunDir

        rd = RunDir(run_dir, create=False)
        gen, template = cfg.resolved_generation(), cfg.resolved_template()
        added = 0
        captions = rd.table("captions")
        if captions.empty:
            return 0
        subs = dict(iter(rd.table("subtitles").groupby("video_id", sort=False)))
        for vid, caps in captions.groupby("video_id", sort=True):
            for block in make_blocks(subs[vid].reset_index(drop=True), cfg.block_words):
                b = caps[caps["block"] == block.index]
                key = json.dumps([build_messages(block, template), gen.model_dump(mode="json")],
                                 sort_keys=True)
                if key not in self.cache and len(b):
                    self.cache[key] = "\n".join(f"{r.start:g}s: {r.text}" for r in b.itertuples())
                    added += 1
        return added


_STOP = set(re.findall(r"\S+", "the and a an of to in on into it its this that then now so okay "
                        "just with from for out one all our your my you we i is are be"))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 2 and w not in _STOP}


def _segment_of(gt: pd.DataFrame) -> Any:
    """The segment a caption came from: the one whose narration shares most of its words
    (the LLM's timestamps are often a segment off), else the one its start falls in."""
    by_video = {v: g.sort_values("start") for v, g in gt.groupby("video_id")}

    def find(video_id: str, t: float, text: str) -> tuple[str, int]:
        g = by_video[video_id]
        words = _words(text)
        overlap = [len(words & _words(n)) for n in g["narration"]]
        if max(overlap, default=0) > 0:
            best = max(range(len(g)), key=lambda i: (overlap[i],
                                                     -abs(g["start"].iloc[i] - t)))
            return str(g["kind"].iloc[best]), int(g["step"].iloc[best])
        hit = g[(g["start"] - 0.5 <= t) & (t < g["end"])]
        return (str(hit.iloc[0]["kind"]), int(hit.iloc[0]["step"])) if len(hit) else ("none", -1)

    return find


def pipeline_rates(run_dir: Path, gt: pd.DataFrame) -> dict[str, Any]:
    """Filler share among kept captions and steps covered, at the caption and align stage."""
    find = _segment_of(gt)
    from howtocap.engine.rundir import RunDir

    rd = RunDir(run_dir, create=False)
    caps, al = rd.table("captions"), rd.table("aligned")
    caps["seg"] = [find(v, t, x) for v, t, x in zip(caps["video_id"], caps["start"],
                                                      caps["text"], strict=True)]
    al["seg"] = [find(v, t, x) for v, t, x in zip(al["video_id"], al["orig_start"], al["text"],
                                                  strict=True)]
    steps = {(r.video_id, int(r.step)) for r in gt.itertuples() if r.kind == "step"}

    def rates(df: pd.DataFrame) -> dict[str, Any]:
        kinds = Counter(k for k, _ in df["seg"])
        n = len(df)
        covered = {(v, s) for v, (k, s) in zip(df["video_id"], df["seg"], strict=True)
                   if k == "step"}
        return _shares({"captions": n, "by_segment": dict(kinds),
                        "steps": len(steps), "steps_covered_n": len(covered & steps)})

    kept_caps = caps[caps["rejected"].fillna("") == ""]
    rej = caps[caps["rejected"].fillna("") != ""]
    return {
        "caption_stage": rates(kept_caps),
        "after_align": rates(al[al["kept"].astype(bool)]),
        "aligned_rows": len(al),
        "rejected": {k: int(n) for k, n in rej["rejected"].value_counts().items()},
        "rejected_by_segment": dict(Counter(k for k, _ in rej["seg"])),
        "rejected_captions": [f"{t} [{k}, {w}]" for t, (k, _), w in
                              zip(rej["text"], rej["seg"], rej["rejected"], strict=True)],
        "fillers_kept_after_align": sorted(
            t for t, (k, _), kept in zip(al["text"], al["seg"], al["kept"], strict=True)
            if k == "filler" and kept),
    }


def _shares(r: dict[str, Any]) -> dict[str, Any]:
    """Filler and chatter share of the captions and the share of steps covered, from counts."""
    n, kinds = r["captions"], r["by_segment"]
    return {**r, "filler_share": round(kinds.get("filler", 0) / n, 4) if n else None,
            "chatter_share": round(kinds.get("chatter", 0) / n, 4) if n else None,
            "steps_covered": round(r["steps_covered_n"] / r["steps"], 4)}


def pooled(sets: list[dict[str, Any]]) -> dict[str, Any]:
    """Several sample sets' pipeline results as one: counts added, shares recomputed."""
    out: dict[str, Any] = {"videos": sum(p["videos"] for p in sets),
                           "seeds": [p["seed"] for p in sets],
                           "llm": sets[0]["llm"],
                           "llm_requests": sum(p["llm_requests"] for p in sets),
                           "replies_from_baseline_captions": sum(
                               p.get("replies_from_baseline_captions", 0) for p in sets),
                           "segments": dict(sum((Counter(p["segments"]) for p in sets),
                                                Counter())),
                           "runs": {}}
    for label in sets[0]["runs"]:
        runs = [p["runs"][label] for p in sets]
        row: dict[str, Any] = {}
        for stage in ("caption_stage", "after_align"):
            parts = [r[stage] for r in runs]
            row[stage] = _shares({
                "captions": sum(x["captions"] for x in parts),
                "by_segment": dict(sum((Counter(x["by_segment"]) for x in parts), Counter())),
                "steps": sum(x["steps"] for x in parts),
                "steps_covered_n": sum(x["steps_covered_n"] for x in parts)})
        row["rejected"] = dict(sum((Counter(r["rejected"]) for r in runs), Counter()))
        row["rejected_by_segment"] = dict(sum((Counter(r["rejected_by_segment"])
                                               for r in runs), Counter()))
        for key in ("rejected_captions", "fillers_kept_after_align"):
            row[key] = [x for r in runs for x in r[key]]
        row["seconds"] = round(sum(r["seconds"] for r in runs), 1)
        out["runs"][label] = row
    return out


def pipeline(n_videos: int, work: Path | None = None, seed: int = REPORT_SEEDS[0]
             ) -> dict[str, Any]:
    """Both runs in ``work`` (kept, and resumed when run again: the runs are resumable and the
    videos and ground truth are reused) or in a temporary folder."""
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
        return _pipeline(n_videos, work, seed)
    with tempfile.TemporaryDirectory(prefix="bench-reject-") as tmp_name:
        return _pipeline(n_videos, Path(tmp_name), seed)


def _pipeline(n_videos: int, tmp: Path, seed: int) -> dict[str, Any]:
    from howtocap.caption.captioner import CaptionConfig
    from howtocap.caption.config import CaptionRunConfig
    from howtocap.llm import LLMOptions, from_options
    from howtocap.pipeline.run import run_pipeline
    from howtocap.samples import ground_truth, make_fixture_set

    res: dict[str, Any] = {"videos": n_videos, "seed": seed, "fillers_per_video": FILLERS,
                           "chatter_per_video": CHATTER}
    truth = tmp / "ground_truth.csv"
    if truth.exists():
        gt = pd.read_csv(truth)
    else:
        videos = make_fixture_set(tmp / "videos", n_videos=n_videos, seed=seed,
                                  fillers=FILLERS, chatter=CHATTER)
        gt = ground_truth(videos)
        gt.to_csv(truth, index=False)
    if gt["video_id"].nunique() != n_videos:
        raise SystemExit(f"{truth} holds other videos than --videos {n_videos}")
    res["segments"] = dict(Counter(gt["kind"]))
    llm = ReplayLLM(from_options(LLMOptions()))
    res["llm"] = llm.name
    rows: dict[str, Any] = {}
    for label, reject in (("keep_fillers", False), ("default", True)):
        cfg = CaptionRunConfig(caption=CaptionConfig(reject_fillers=reject))
        if reject:
            res["replies_from_baseline_captions"] = llm.prefill(tmp / "keep_fillers", cfg.caption)
        t0 = time.perf_counter()
        run_pipeline([tmp / "videos"], tmp / label, caption=cfg, llm=llm, progress=False)
        rows[label] = {**pipeline_rates(tmp / label, gt),
                       "seconds": round(time.perf_counter() - t0, 1)}
    res["llm_requests"] = llm.asked
    res["runs"] = rows
    return res


def report(res: dict[str, Any]) -> list[str]:
    g = res["generated"]
    lines = ["# Rejecting captions that show nothing", "",
             f"{res['machine']}; load average {res['load_average_start']} → "
             f"{res['load_average_end']}. How to read: benchmarks/quality/bench_reject.py "
             "docstring.", "",
             "## The test alone, on labelled text", "",
             "| set | lines | fillers | precision | recall | steps kept |",
             "|---|---|---|---|---|---|",
             f"| (a) captions written for this benchmark | {g['captions']} | {g['positives']} "
             f"| {g['precision']:.1%} | {g['recall']:.1%} | {g['steps_kept']:.1%} |"]
    sp = res.get("spoken_youcook2")
    if sp:
        for split in ("tune", "report", "extra"):
            s = sp[split]
            lines.append(f"| (b) spoken YouCook2, `{split}` narration lines"
                         f"{' (rules tuned here)' if split == 'tune' else ''} | "
                         f"{s['lines']['step'] + s['lines']['filler']} | {s['positives']} | "
                         f"{s['precision']:.1%} | {s['recall']:.1%} | "
                         f"{1 - s['rejected_share_by_kind']['step']:.1%} |")
        lines += ["", "| spoken YouCook2 split | YouCook2 step sentences kept | chatter "
                  "rejected (+ chatter patterns) | asides rejected (+ patterns) |",
                  "|---|---|---|---|"]
        for split in ("tune", "report", "extra"):
            s = sp[split]
            r, c = s["rejected_share_by_kind"], s["rejected_share_with_chatter_patterns"]
            lines.append(f"| `{split}` | {s['references_kept']:.1%} of {s['references']} | "
                         f"{r['chatter']:.0%} ({c['chatter']:.0%}) | {r['aside']:.0%} "
                         f"({c['aside']:.0%}) |")
        rep = sp["report"]
        lines += ["", f"Report split: steps rejected: {rep['steps_rejected'] or 'none'}; "
                  f"fillers kept: {rep['fillers_kept'] or 'none'}; YouCook2 sentences "
                  f"rejected: {rep['references_rejected'] or 'none'}."]
    else:
        lines += ["", "(b) not measured: benchmarks/data/spoken_youcook2.json is not there."]
    lines += ["", f"(a) steps rejected: {g['steps_rejected'] or 'none'}; fillers kept: "
              f"{g['fillers_kept'] or 'none'}. Speed: {g['captions_per_s']:.0f} captions/s "
              "(one process, parser on)."]
    pl = res.get("pipeline")
    if pl:
        lines += ["", "## After a default `run`", "",
                  f"{pl['videos']} narrated sample videos (report sets, seeds "
                  f"{', '.join(map(str, pl['seeds']))}, pooled; segments: "
                  f"{pl['segments']}), LLM `{pl['llm']}`: {pl['llm_requests']} prompts asked "
                  "in this invocation (the baseline resumes its run in `--work`, so captions "
                  "made by an earlier invocation are kept), "
                  f"{pl.get('replies_from_baseline_captions', 0)} replies replayed to the "
                  "default run from the baseline's captions, which parse back to the same "
                  "captions. Captions are matched to the segment whose narration shares most "
                  "of their words. Targets: ≤ "
                  f"{TARGETS['filler_kept_max']:.0%} filler among kept captions and ≥ "
                  f"{TARGETS['steps_covered_min']:.0%} of steps covered.", "",
                  "| run | stage | captions | filler share | chatter share | steps covered |",
                  "|---|---|---|---|---|---|"]
        for label, name in (("keep_fillers", "`--keep-fillers` (baseline)"),
                            ("default", "default (rejection on)")):
            r = pl["runs"][label]
            for stage, sname in (("caption_stage", "captions (not rejected)"),
                                 ("after_align", "kept after align")):
                x = r[stage]
                lines.append(f"| {name} | {sname} | {x['captions']} | "
                             f"{x['filler_share']:.1%} | {x['chatter_share']:.1%} | "
                             f"{x['steps_covered']:.1%} |")
        lines += ["", "Each sample set alone (default run, kept after align; the tune set is where "
                  "the rules were looked at, so it is never part of the verdict):", "",
                  "| seed | role | videos | captions | filler share | steps covered |",
                  "|---|---|---|---|---|---|"]
        for role, sets in (("tune", res.get("pipeline_tune", [])),
                           ("report", res.get("pipeline_sets", []))):
            for p in sets:
                x = p["runs"]["default"]["after_align"]
                lines.append(f"| {p['seed']} | {role} | {p['videos']} | {x['captions']} | "
                             f"{x['filler_share']:.1%} | {x['steps_covered']:.1%} |")
        d = pl["runs"]["default"]
        lines += ["", f"Rejected in the default run: {d['rejected']} (by segment: "
                  f"{d['rejected_by_segment']}).", "",
                  "Rejected captions: " + "; ".join(d["rejected_captions"]), "",
                  "Filler captions still kept after align: "
                  f"{d['fillers_kept_after_align'] or 'none'}.",
                  "", f"Verdict: {res['verdict']}"]
    return lines


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sets = [("(a) generated", res["generated"])]
    sp = res.get("spoken_youcook2")
    if sp:
        sets += [(f"(b) {s}", sp[s]) for s in ("tune", "report", "extra")]
    x = range(len(sets))
    axes[0].bar([i - 0.2 for i in x], [s["precision"] for _, s in sets], 0.4, label="precision")
    axes[0].bar([i + 0.2 for i in x], [s["recall"] for _, s in sets], 0.4, label="recall")
    axes[0].set_xticks(list(x), [n for n, _ in sets])
    axes[0].set_ylim(0, 1.05)
    axes[0].set_title("filler rejection vs labels")
    axes[0].legend(loc="lower right")
    pl = res.get("pipeline")
    if pl:
        labels = ["--keep-fillers", "default"]
        runs = [pl["runs"]["keep_fillers"]["after_align"], pl["runs"]["default"]["after_align"]]
        axes[1].bar([0, 1], [r["filler_share"] for r in runs], 0.4, label="filler share (kept)")
        axes[1].bar([0.4, 1.4], [r["steps_covered"] for r in runs], 0.4, label="steps covered")
        axes[1].axhline(TARGETS["filler_kept_max"], color="C0", ls=":")
        axes[1].axhline(TARGETS["steps_covered_min"], color="C1", ls=":")
        axes[1].set_xticks([0.2, 1.2], labels)
        axes[1].set_ylim(0, 1.05)
        axes[1].set_title(f"after a default run ({pl['videos']} sample videos)")
        axes[1].legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def verdict(res: dict[str, Any]) -> str:
    pl = res.get("pipeline")
    if not pl:
        return "pipeline not run"
    d, b = pl["runs"]["default"]["after_align"], pl["runs"]["keep_fillers"]["after_align"]
    ok_f = d["filler_share"] <= TARGETS["filler_kept_max"]
    ok_s = d["steps_covered"] >= TARGETS["steps_covered_min"]
    parts = [f"filler among kept captions {b['filler_share']:.1%} → {d['filler_share']:.1%} "
             f"({'meets' if ok_f else 'misses'} ≤ {TARGETS['filler_kept_max']:.0%})",
             f"steps covered {b['steps_covered']:.1%} → {d['steps_covered']:.1%} "
             f"({'meets' if ok_s else 'misses'} ≥ {TARGETS['steps_covered_min']:.0%})"]
    return "; ".join(parts) + ("." if ok_f and ok_s else
                               " — target missed; see the lists above for why.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="2 videos")
    ap.add_argument("--videos", type=int, default=N_VIDEOS, help="sample videos in the run")
    ap.add_argument("--work", type=Path, help="keep (and resume) the runs in this folder")
    ap.add_argument("--no-pipeline", action="store_true", help="only the test on text")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(REPORT_SEEDS),
                    help="report sample sets, pooled for the verdict")
    ap.add_argument("--tune-seeds", type=int, nargs="*", default=list(TUNE_SEEDS),
                    help="tune sample sets (rules studied here; shown apart, never pooled)")
    args = ap.parse_args()
    res: dict[str, Any] = {"machine": machine(),
                           "load_average_start": [round(x, 2) for x in os.getloadavg()],
                           "targets": TARGETS}
    nlp = load_parser()
    res["generated"] = generated_set(nlp)
    res["spoken_youcook2"] = spoken_set(nlp)
    if not args.no_pipeline:
        n = 2 if args.quick else args.videos

        def one(seed: int) -> dict[str, Any]:
            return pipeline(n, args.work / str(seed) if args.work else None, seed)

        res["pipeline_tune"] = [one(seed) for seed in args.tune_seeds]
        res["pipeline_sets"] = [one(seed) for seed in args.seeds]
        res["pipeline"] = pooled(res["pipeline_sets"])
    res["verdict"] = verdict(res)
    res["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    write_results("reject", res, report(res), plot=lambda png: plot(res, png), indent=1,
                  default=str)


if __name__ == "__main__":
    main()
