"""``howtocap align DIR``: the per-video scoring stage (``DIR/align_scores/``, independent of
the filter, so a new filter re-filters without rescoring; a re-captioned video is rescored
alone), then the global filter as a reduce step (``DIR/aligned/``, a file per shard of scores).

The driver works a shard (or a window of whole videos) at a time: only a shard's rows are in
video id order once videos were appended, so what needs the whole run in id order (the
reference draw, the sampled threshold) ranks the run's videos once by id.
"""

from __future__ import annotations

import itertools
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from howtocap.align import stream
from howtocap.align.config import AlignConfig
from howtocap.align.filter import (
    describe_filter,
    empty_aligned,
    filter_counts,
    filter_mode,
    filter_window,
    threshold_of,
)
from howtocap.align.stage import SCORES, AlignStage
from howtocap.align.stream import (
    columns_of,
    video_windows,
    write_windows,
)
from howtocap.align.videos import RunVideos
from howtocap.atomic import (
    CorruptFile,
    atomic_write_parquet,
    corrupt_parquet,
    dead_here,
    writer_tag,
)
from howtocap.encoders.defaults import ENCODER
from howtocap.encoders.windows import rows_covering
from howtocap.engine.core import (
    MAX_ATTEMPTS,
    Shard,
    StageSummary,
    prepare_stages,
    run_stage,
)
from howtocap.engine.memory import give_back_memory
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir, shard_name, shard_number
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform, kept_captions

STAGE = AlignStage.name
INPUTS = "align_inputs"  # fingerprints/align_inputs/shard-k.parquet: each video's captions' hash

Windows = Callable[[], Iterable[pd.DataFrame]]  # a fresh pass over a table, whole videos
ORDER = ["video_id", "start", "end", "text"]  # the order of aligned's rows


def _fingerprint(item: VideoItem, text: str) -> str:
    return format(hash_text(f"{item.video_path}\n{text}"), "016x")


def _fingerprint_stream(windows: Iterable[pd.DataFrame], items: Sequence[VideoItem]
                        ) -> Iterator[tuple[str, str]]:
    """Per item, in video id order, a hash of its captions and video path (what its scores
    were computed from), from windows of whole videos of the kept captions in id order (a
    shard's, with the shard's items): an item whose id is at most the window's largest is
    hashed with that window's text (its captions are all there, or it has none)."""
    todo = sorted(items, key=lambda it: it.video_id)
    at = 0
    for df in windows:
        texts = _csv_per_video(df, [c for c in ("start", "end", "text") if c in df.columns])
        top = max(texts, default=None)
        while top is not None and at < len(todo) and todo[at].video_id <= top:
            yield todo[at].video_id, _fingerprint(todo[at], texts.get(todo[at].video_id, ""))
            at += 1
    yield from ((it.video_id, _fingerprint(it, "")) for it in todo[at:])


def _csv_per_video(captions: pd.DataFrame, cols: list[str],
                   chunk: int = 200_000) -> dict[str, str]:
    """``_csv_per_group`` exactly (the recorded fingerprints hash it), from one ``to_csv`` per
    chunk of rows split into lines instead of a call per video (a fixed cost that adds up over
    HowTo100M); a video whose text holds a line break is written alone."""
    if len(captions) == 0 or not cols:
        return _csv_per_group(captions, cols)
    keyed = captions["video_id"].notna().to_numpy()  # groupby leaves rows without an id out
    vids = captions["video_id"].astype(str).to_numpy(dtype=object)
    alone: set[str] = set()
    if "text" in cols:
        broken = captions["text"].astype(str).str.contains("\n", regex=False).to_numpy(bool)
        alone = set(vids[broken & keyed].tolist())
    lines: dict[str, list[str]] = {}
    for lo in range(0, len(captions), chunk):
        part = captions.iloc[lo:lo + chunk]
        rows = part[cols].to_csv(index=False, header=False).split("\n")
        if len(rows) != len(part) + 1:  # not one line per row after all: the old way
            return _csv_per_group(captions, cols)
        for vid, ok, row in zip(vids[lo:lo + chunk], keyed[lo:lo + chunk], rows, strict=False):
            if ok and vid not in alone:
                lines.setdefault(vid, []).append(row)
    out = {vid: "\n".join(rs) + "\n" for vid, rs in lines.items()}
    if alone:
        out.update(_csv_per_group(captions[np.isin(vids, list(alone)) & keyed], cols))
    return out


def _csv_per_group(captions: pd.DataFrame, cols: list[str]) -> dict[str, str]:
    """The per-video ``to_csv`` itself (what ``_csv_per_video`` reproduces)."""
    return {str(vid): g[cols].to_csv(index=False, header=False)
            for vid, g in captions.groupby("video_id", sort=False)}


def _inputs_dir(rundir: RunDir) -> Path:
    """Beside the stage's fingerprint (``RunDir`` places it), a file per shard."""
    return rundir.fingerprints.folder / INPUTS


def _recorded_fingerprints(path: Path) -> Iterator[tuple[str, str]]:
    """A shard's recorded fingerprints, in id order (none when the file is missing or
    unreadable: every video counts as new, none as changed)."""
    try:
        batches = list(stream.open_parquet(path).iter_batches(
            batch_size=stream.ROWS, columns=["video_id", "fingerprint"]))
    except (FileNotFoundError, pa.ArrowException, OSError):
        return
    for rb in batches:
        yield from zip(rb.column(0).to_pylist(), rb.column(1).to_pylist(), strict=True)


def _forget_changed_videos(rundir: RunDir, captions: _Captions, videos: RunVideos) -> None:
    """Re-captioned (or re-pointed) videos lose their old scores, so they are aligned again.

    A shard at a time: its kept videos' fingerprints (from its captions file) against the
    ones recorded for the shard (``align_inputs/shard-k.parquet``, in id order), their union
    written back when a video is new or changed; the changed videos are forgotten before the
    new file replaces the old, so a kill in between finds them changed again."""

    schema = pa.schema([("video_id", pa.string()), ("fingerprint", pa.string())])
    folder = _inputs_dir(rundir)
    for k, pos in videos.shards():
        path = folder / shard_name(k)
        old = dict(_recorded_fingerprints(path))
        now = dict(_fingerprint_stream(captions.kept(shard=k), videos.items(pos)))
        if all(old.get(vid) == fp for vid, fp in now.items()):
            continue
        rundir.forget(STAGE, [vid for vid, fp in now.items() if old.get(vid, fp) != fp])
        folder.mkdir(parents=True, exist_ok=True)
        union = {**old, **now}
        ids = sorted(union)
        table = pa.table([ids, [union[vid] for vid in ids]], schema=schema)
        atomic_write_parquet(table, path)


class _Captions:
    """The run's captions, a window of whole videos of a shard file at a time: every pass reads
    them again, the driver never holds the table. A corrupt file is dropped
    (``RunDir.drop_corrupt``: its caption shard is redone) and left out."""

    def __init__(self, rundir: RunDir) -> None:
        if not rundir.has_table("captions"):
            raise InputError(rundir.root, "no captions (DIR/captions/; run `howtocap caption` "
                                          "first)")
        if not rundir.table_path("videos").exists():  # (a videos/ folder of files is not it)
            raise InputError(rundir.root, "no videos.parquet (run `howtocap caption` first: it "
                                          "records which file each video came from)")
        self.rundir = rundir
        self.files: dict[int, Path] = {}
        for path in rundir.table_files("captions"):
            if not path.name.startswith("shard-"):
                raise InputError(path, "a one-file captions table: this version reads the "
                                       "captions/ folder of shard files")
            self.files[shard_number(path)] = path
        self.columns: list[str] = []
        need = {"video_id", "start", "text"}
        for path in self.files.values():
            try:
                cols = columns_of(path)
            except CorruptFile as exc:
                rundir.drop_corrupt(path, exc)
                continue
            if not need <= set(cols):
                raise InputError(path, f"lacks columns {sorted(need - set(cols))}")
            self.columns += [c for c in cols if c not in self.columns]
        self.files = {k: p for k, p in self.files.items() if p.exists()}

    def windows(self, columns: Sequence[str] | None = None, shard: int | None = None
                ) -> Iterator[pd.DataFrame]:
        """Every shard file's windows in shard order (``shard``: that shard's, if it has a
        file)."""
        for k in sorted(self.files) if shard is None else [shard]:
            if k in self.files:
                yield from file_windows(self.rundir, self.files[k], columns)

    def kept(self, columns: Sequence[str] | None = None, shard: int | None = None
             ) -> Iterator[pd.DataFrame]:
        """The kept captions (``kept_captions``), a window at a time."""
        with_rejected = None if columns is None else \
            [c for c in (*columns, "rejected") if c in self.columns]
        for df in self.windows(with_rejected, shard):
            yield kept_captions(df)


def file_windows(rundir: RunDir, path: Path, columns: Sequence[str] | None = None
                 ) -> Iterator[pd.DataFrame]:
    """``video_windows`` of one shard file; a corrupt one is dropped (``RunDir.drop_corrupt``)
    and yields no more."""
    try:
        cols = None if columns is None else [c for c in columns if c in columns_of(path)]
        yield from video_windows(path, cols)
    except CorruptFile as exc:
        rundir.drop_corrupt(path, exc)
    except (pa.ArrowException, OSError) as exc:  # a page's checksum, found as it is read
        rundir.drop_corrupt(path, corrupt_parquet(path, exc))


def _video_items(rundir: RunDir) -> RunVideos:
    """``videos.parquet`` as compact columns, with their shards."""
    return RunVideos.read(rundir.table_path("videos"), rundir.shard_size)


def _captioned(rundir: RunDir, videos: RunVideos) -> None:
    """Keep the videos with something to align: a caption record ``ok`` in a finished caption
    shard (its captions file is written), or (captions brought in without status records) no
    caption nor subtitles record at all. One captioned in an unfinished shard waits."""
    keep = np.zeros(len(videos), dtype=bool)
    for k, pos in videos.shards(kept=False):
        ids = videos.id_list(pos)
        ok = np.asarray(rundir.done("caption", ids), dtype=bool)
        arr = pa.array(ids, pa.string())
        captioned, subtitled = (  # which have a record of the stage
            pc.is_in(arr, value_set=rundir.writer(stage, k).records(["status"]).column("video_id"))
            .to_numpy(zero_copy_only=False) for stage in ("caption", "subtitles"))
        keep[pos] = np.where(captioned, ok, ~subtitled)
    videos.select(keep)


def _unknown_ids(windows: Iterable[pd.DataFrame], videos: RunVideos) -> list[str]:
    """Video ids of the (kept) captions that ``videos`` do not list, sorted: each window's
    ids against the run's ids of its span (both in id order: no set of every id)."""
    out: set[str] = set()
    for df in windows:
        ids = np.asarray(pd.unique(df["video_id"]), dtype=object)
        if not len(ids):
            continue
        known = videos.span(min(ids), max(ids))
        hit = pc.is_in(pa.array(ids.tolist(), pa.string()), value_set=known)
        out.update(ids[~hit.to_numpy(zero_copy_only=False)].tolist())
    return sorted(out)


def read_aligned(rundir: RunDir) -> pd.DataFrame:
    """``DIR/aligned/`` as written by ``align_run`` (filtered; ``kept`` is meaningful)."""
    if not rundir.has_table("aligned"):
        raise InputError(rundir.root, "no aligned table (run `howtocap align` first)")
    return rundir.table("aligned")


def _staged(rundir: RunDir, name: str, kind: str) -> Path:
    """A folder beside ``DIR/<name>/`` that only this process writes (``kind``: new, old);
    the ones of this host's dead processes are removed first."""
    for left in rundir.root.glob(f".{name}.*"):
        tag = left.name[len(name) + 2:].rpartition(".")[0]
        if left.is_dir() and dead_here(tag):
            shutil.rmtree(left, ignore_errors=True)
    path = rundir.root / f".{name}.{writer_tag()}.{kind}"
    shutil.rmtree(path, ignore_errors=True)
    return path


def _swap_in(rundir: RunDir, name: str, staged: Path) -> None:
    """``staged`` becomes ``DIR/<name>/`` (two renames): a reader finds the old table or
    the new one, never shards of both."""
    folder = rundir.root / name
    old = _staged(rundir, name, "old")
    if folder.exists():
        folder.rename(old)
    staged.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def finish_align(rundir: RunDir, cfg: AlignConfig, encoder_names: Sequence[str],
                 *, report: bool = True, table: bool = True
                 ) -> tuple[pd.DataFrame | None, float]:
    """The reduce step: the global filter over the per-video scores, written to
    ``DIR/aligned/`` + report + config; returns the table read back (None unless ``table``)
    and the threshold.

    Its memory is a window, not the run: the threshold comes from a first pass over the
    scores (``_threshold``), then each shard file's windows are filtered and written as row
    groups. The rows are the whole-table ``apply_filter``'s, row for row (in shard order). A
    corrupt scores file is dropped (``align_run`` rescores its shard and filters again)."""
    from howtocap.align.report import ReportStats, write_report_from

    give_back_memory()  # what the scoring freed, before the filter's own peak adds to it
    files = [p for p in rundir.table_files(SCORES) if p.name.startswith("shard-")]
    thr = _threshold(rundir, files, cfg)
    stats = ReportStats()
    counts = Counter({"no_null_z": 0, "chatter_dropped": 0, "chatter_dropped_only_by_text": 0})
    n = {"kept": 0, "outside": 0}

    def filtered(windows: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for window in windows:
            merged = conform(window, "aligned")
            # each video's rows by where they now are (the stage writes caption order)
            merged = merged.sort_values(ORDER, kind="stable", ignore_index=True)
            # the guard's drops (no window inside the video within ±T): like the reference,
            # they leave the table; counted and listed
            out_mask = merged.pop("outside").fillna(False).to_numpy(dtype=bool) \
                if "outside" in merged else np.zeros(len(merged), dtype=bool)
            outside = merged[out_mask].reset_index(drop=True)
            merged = merged[~out_mask].reset_index(drop=True)
            n["outside"] += len(outside)
            # the chatter test is part of the filter, not the stage: --keep-chatter re-filters
            aligned = filter_window(merged, cfg, thr)
            n["kept"] += int(aligned["kept"].sum())
            counts.update(filter_counts(aligned, cfg))
            if report:
                stats.add_outside(outside)
                stats.add(aligned)
            yield aligned

    staged = _staged(rundir, "aligned", "new")
    pairs = 0
    try:
        staged.mkdir(parents=True)
        for path in files:
            frames = filtered(file_windows(rundir, path))
            first = next(frames, None)
            if first is not None:  # (None: the file was corrupt, dropped)
                pairs += write_windows(staged / path.name, itertools.chain([first], frames))
        if not any(staged.iterdir()):  # no scores: an empty table, with its columns
            pairs += write_windows(staged / shard_name(0), filtered([empty_aligned()]))
        _swap_in(rundir, "aligned", staged)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    config = {**cfg.model_dump(), "encoders": list(encoder_names),
              "scoring_key": cfg.scoring_key(encoder_names), "threshold_used": thr,
              "filter": describe_filter(cfg, thr),
              "kept": n["kept"], "pairs": pairs, "outside_video": n["outside"], **counts}
    rundir.configs.write(STAGE, config)
    if report:
        write_report_from(stats, thr, config, rundir.root / "align_report.html")
    return (read_aligned(rundir) if table else None), thr


def _id_order(chunks: list[Any]) -> np.ndarray:
    """``order[r]``: the position, among ids read in chunks (Arrow strings, each once), of
    the r-th smallest id: the rank a whole-table ``groupby`` (sorted by id) gives them."""
    ids = pa.concat_arrays(chunks) if chunks else pa.array([], pa.string())
    return pc.sort_indices(ids).to_numpy().astype(np.int64)


def _threshold(rundir: RunDir, files: Sequence[Path], cfg: AlignConfig) -> float:
    """``apply_filter``'s threshold without holding the scores: the per-video groups counted
    in a first pass (their ids kept, ranked by id as the whole table's ``groupby`` ranks
    them), ``choose_threshold``'s draw among them (the same rng call on the same count), and
    a second pass for the drawn videos' scores; with no sample every score is pooled."""
    if filter_mode(cfg) in ("keep_all", "null_z"):
        return -np.inf
    if cfg.threshold is not None:
        return float(cfg.threshold)

    def groups() -> Iterator[tuple[list[str], list[np.ndarray]]]:
        for path in files:
            for w in file_windows(rundir, path, ["video_id", "score", "outside"]):
                if "outside" in w:
                    w = w[~w["outside"].fillna(False).to_numpy(dtype=bool)]
                gs = list(w.groupby("video_id", sort=True)["score"])
                yield [str(v) for v, _ in gs], [g.to_numpy(dtype=np.float64) for _, g in gs]

    n_groups = total = 0
    ids: list[Any] = []
    pool: list[np.ndarray] | None = []
    for keys, gs in groups():
        ids.append(pa.array(keys, pa.string()))
        n_groups += len(gs)
        total += sum(len(g) for g in gs)
        if pool is not None:
            pool += gs
            if 0 < cfg.sample_videos < n_groups:
                pool = None  # it will be a sample, drawn below
    if total == 0:
        return -np.inf
    sampled = 0 < cfg.sample_videos < n_groups
    if sampled:
        rng = np.random.default_rng(cfg.seed)
        pick = rng.choice(n_groups, size=cfg.sample_videos, replace=False)  # ranks
        chosen = np.zeros(n_groups, dtype=bool)
        chosen[_id_order(ids)[pick]] = True
        del ids
        pool, at = [], 0
        for _, gs in groups():
            pool += [g for g, c in zip(gs, chosen[at:at + len(gs)], strict=False) if c]
            at += len(gs)
    assert pool is not None
    return threshold_of(np.concatenate(pool) if pool else np.zeros(0), total, sampled, cfg)


REFERENCE = "align_reference"


Reference = tuple[pd.DataFrame, list[str]]  # (video_id, text) of captions; clip video ids


def recorded_reference(rundir: RunDir, cfg: AlignConfig) -> Reference:
    """The default filter's references drawn for this run directory with these settings."""
    old = rundir.configs.read(REFERENCE) or {}
    if (old.get("size"), old.get("videos"), old.get("seed")) != (
            cfg.reference_captions, cfg.reference_videos, cfg.seed):
        return pd.DataFrame(columns=["video_id", "text"]), []
    return (pd.DataFrame(old.get("captions", []), columns=["video_id", "text"]),
            [str(v) for v in old.get("clip_videos", [])])


def _caption_pool(df: pd.DataFrame) -> pd.DataFrame:
    """The distinct ``(video_id, text)`` of a window of whole videos, sorted: the window's
    videos' stretch of the whole run's sorted pool."""
    pool = df[["video_id", "text"]].astype(str).drop_duplicates()
    return pool.sort_values(["video_id", "text"]).reset_index(drop=True)


def _pool_groups(pool: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sorted pool's videos: ``(ids, first row, row count)`` of each, in its order."""
    vids = pool["video_id"].to_numpy(dtype=object)
    if not len(vids):
        return vids, np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.concatenate([[0], np.flatnonzero(vids[1:] != vids[:-1]) + 1]).astype(np.int64)
    return vids[first], first, np.diff(np.append(first, len(vids)))


def draw_reference(rundir: RunDir, windows: Windows, clip_files: Callable[[], Sequence[str]],
                   cfg: AlignConfig, *, redo: bool = False) -> Reference:
    """The default filter's references: ``reference_captions`` random captions of the run and
    the clips of ``reference_videos`` random videos, drawn once and recorded so that later
    runs score against the same ones; ``redo`` or new settings draw again.

    ``windows()``: a pass over every caption (rejected ones too), windows of whole videos,
    the same at each pass; ``clip_files()``: the videos with a file, sorted. Two passes draw
    what one sorted pool of the whole table drew: the first counts each video's distinct
    ``(video_id, text)`` (and ranks the videos by id), the rng picks among that count, the
    second takes the picked rows."""
    old = recorded_reference(rundir, cfg)
    if (len(old[0]) or old[1]) and STAGE in rundir.stages_with_results() and not redo:
        return old
    rng = np.random.default_rng(cfg.seed)
    ids: list[Any] = []
    sizes: list[np.ndarray] = []
    for df in windows():
        vids, _, count = _pool_groups(_caption_pool(df))
        ids.append(pa.array(vids.tolist(), pa.string()))
        sizes.append(count)
    count = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    size = int(count.sum())
    pick = np.sort(rng.choice(size, size=min(cfg.reference_captions, size), replace=False))
    # each video's first row in the whole sorted pool: its videos by id, each one's rows
    order = _id_order(ids)
    del ids
    start = np.empty(len(count), np.int64)
    start[order] = np.cumsum(count[order]) - count[order]
    rows: list[pd.DataFrame] = []
    at = taken = 0
    for df in windows():
        pool = _caption_pool(df)
        _, first, n = _pool_groups(pool)
        if taken >= len(pick) or at + len(n) > len(count):
            break
        s = start[at:at + len(n)]
        lo = np.searchsorted(pick, s)
        hi = np.searchsorted(pick, s + n)
        for j in np.flatnonzero(hi > lo).tolist():
            rows.append(pool.iloc[first[j] + pick[lo[j]:hi[j]] - s[j]])
            taken += int(hi[j] - lo[j])
        at += len(n)
    ref = pd.concat(rows).sort_values(["video_id", "text"]).reset_index(drop=True) if rows \
        else pd.DataFrame(columns=["video_id", "text"])
    files = clip_files()
    chosen = [files[i] for i in np.sort(rng.choice(
        len(files), size=min(cfg.reference_videos, len(files)), replace=False))]
    rundir.configs.write(REFERENCE, {"size": cfg.reference_captions,
                                    "videos": cfg.reference_videos, "seed": cfg.seed,
                                    "captions": ref.to_numpy().tolist(), "clip_videos": chosen})
    return ref, chosen


class _IdsAt(Sequence[str]):
    """The ids of some of the run's videos, held as their positions (8 bytes each)."""

    def __init__(self, videos: RunVideos, positions: np.ndarray) -> None:
        self.videos, self.at = videos, positions

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i: Any) -> Any:
        return self.videos.id_list([self.at[i]])[0]


def _clip_files(videos: RunVideos) -> Sequence[str]:
    """The videos whose file is there, sorted (``draw_reference``'s clip candidates)."""
    found = [pos[np.array([it.video_path is not None and it.video_path.is_file()
                           for it in videos.items(pos)], dtype=bool)]
             for pos in videos.positions(kept=False)]
    return _IdsAt(videos, np.concatenate(found) if found else np.zeros(0, np.int64))


def clip_bank(rundir: RunDir, clip_videos: Sequence[str], models: Sequence[Any],
              cfg: AlignConfig, paths: Mapping[str, Any]
              ) -> tuple[list[np.ndarray], list[str]] | None:
    """Every clip (``clip_seconds`` long, 1-s steps) of the reference videos (files in
    ``paths``), per encoder, pooled as alignment pools them, from the frame cache. A video that
    does not decode is left out (the stage reports it)."""
    from howtocap.encoders.cache import frame_embeddings_multi

    if not clip_videos or not models:
        return None
    banks: list[list[np.ndarray]] = [[] for _ in models]
    owners: list[str] = []
    for vid in clip_videos:
        try:
            frames = frame_embeddings_multi(Path(paths[vid]), [m.frame_encoder for m in models],
                                            fps=cfg.fps, cache_dir=rundir.cache_dir)
        except Exception:  # noqa: BLE001 - a broken video fails in the stage, one line
            continue
        n = min(len(f.emb) for f in frames)
        if n == 0:
            continue
        extent = n / cfg.fps
        ws = np.arange(0.0, max(extent - cfg.clip_seconds, 0.0) + 1e-9, 1.0)
        lo, hi = rows_covering(ws, np.minimum(ws + cfg.clip_seconds, extent), n, cfg.fps)
        for bank, f, m in zip(banks, frames, models, strict=True):
            pooled = m.pool_clips(f.emb[:n], lo[:, None], hi[:, None], cfg.renormalize)
            bank.append(np.asarray(pooled, dtype=np.float32)[:, 0])
        owners += [vid] * len(ws)
    if not owners:
        return None
    return [np.concatenate(b) for b in banks], owners


def align_stage(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
                device: str | None = None, encoders: Sequence[Any] | None = None,
                from_names: bool = True, reference: Reference | None = None,
                clips: tuple[list[np.ndarray], list[str]] | None = None) -> AlignStage:
    """The align stage of these settings (no ``reference``: the recorded one). With
    ``within_shot`` the run's recorded shots settings are part of its fingerprint."""
    from howtocap.shots.run import recorded_config

    ref_caps, ref_videos = reference if reference is not None \
        else recorded_reference(rundir, cfg)
    shots = recorded_config(rundir).model_dump() if cfg.within_shot else None
    return AlignStage(list(encoder_names) or [ENCODER], cfg, rundir.cache_dir, device=device,
                      models=encoders, models_from_names=from_names, reference=ref_caps,
                      clip_videos=ref_videos, clips=clips, shots_settings=shots)


WINDOW = 10_000  # videos taken through the scoring stage at a time (``align_run``): the
# engine holds a window's items and selection (a window of 50,000 peaked higher)


def _score_windows(rundir: RunDir, videos: RunVideos, stage: AlignStage,
                   opts: dict[str, Any]) -> StageSummary:
    """The scoring stage over the kept videos a ``WINDOW`` at a time, in run order: what the
    engine keeps per video (selection, claims, attempts, items) is a window's, not the run's."""
    summary = StageSummary(stage.name)
    windows = videos.windows(WINDOW)
    first = next(windows, [])  # no video: the stage still runs (its summary, its stats)
    for items in itertools.chain([first], windows):
        summary.add(run_stage(rundir, items, stage, **opts))
    return summary


def align_run(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
              runner: Runner | None = None, device: str | None = None, progress: bool = True,
              encoders: Sequence[Any] | None = None, shard: Shard | None = None,
              redo: bool = False, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, shots_ready: bool = False,
              batching: BatchConfig | None = None) -> StageSummary:
    """Score every captioned video (resumable), then filter globally.

    Other encoders or window settings are refused unless ``redo``. ``encoders`` (already
    built) override the names (none: ``default``). ``shots_ready``: the caller has just run
    the shots stage (``run --within-shot``). With a ``shard`` only that shard's videos are
    scored and the global filter is left to a final run without a shard."""
    in_process = runner is None or runner.in_process  # None: run_stage's LocalRunner
    names_in = list(encoder_names) or [ENCODER]
    from_names = encoders is None
    captions = _Captions(rundir)
    videos = _video_items(rundir)
    # The reference is drawn from every caption, rejected ones too: they are "other captions"
    # all the same, so the rejection never changes which others the filter keeps. Rejected
    # captions themselves are not aligned (they stay in captions/ with their reason).
    reference = draw_reference(rundir, lambda: captions.windows(["video_id", "text"]),
                               lambda: _clip_files(videos), cfg, redo=redo)
    clip_paths = videos.paths_of(reference[1])
    stage = align_stage(rundir, names_in, cfg, device=device, encoders=encoders,
                        from_names=from_names, reference=reference)
    cid = prepare_stages(rundir, [stage], redo=redo)[STAGE]  # before any model is loaded
    from howtocap.encoders import create  # a model is loaded here once, shared with the stage

    if encoders is None and in_process:
        encoders = [create(n, device=device) for n in names_in]
    names = [e.name for e in encoders] if encoders is not None else names_in
    if len(set(names)) != len(names):
        raise HowtocapError(f"the same encoder was given twice: {', '.join(names)}")
    key = cfg.scoring_key(names)
    rundir.configs.write(STAGE, {**cfg.model_dump(), "encoders": names, "scoring_key": key})
    unknown = _unknown_ids(captions.kept(["video_id"]), videos)
    if unknown:  # captions of videos videos.parquet lacks (brought in by hand): numbered
        rundir.record_videos(VideoItem(v, None) for v in unknown)
        videos = _video_items(rundir)
    _captioned(rundir, videos)  # a failed video's error is in the status table: no empty "ok"
    _forget_changed_videos(rundir, captions, videos)
    give_back_memory()  # the passes over the captions: freed, not to be kept under the scoring
    if cfg.within_shot and not shots_ready:
        from howtocap.shots.run import shots_run  # the run's settings, over the video files

        shots_run(rundir, runner=runner, progress=progress, shard=shard, batching=batching,
                  windows=lambda: ([it for it in part if it.video_path]
                                   for part in videos.windows(WINDOW)))
    clips = None
    if reference[1]:  # the default filter's reference clips, from the driver's encoders
        clips = clip_bank(rundir, reference[1], encoders if encoders is not None
                          else [create(n, device=device) for n in names_in], cfg, clip_paths)
    stage = align_stage(rundir, names_in, cfg, device=device, encoders=encoders,
                        from_names=from_names, reference=reference, clips=clips)
    opts = {"runner": runner, "progress": progress, "shard": shard,
            "retry_failed": retry_failed, "max_attempts": max_attempts, "cid": cid,
            "batching": batching}
    summary = _score_windows(rundir, videos, stage, opts)
    if shard is None:  # the filter is global: it needs every shard's scores
        finish_align(rundir, cfg, names, table=False)
        if rundir.corrupted:  # a corrupt scores file was dropped: rescore its shard
            rundir.corrupted.clear()
            summary.absorb(_score_windows(rundir, videos, stage, opts))
            finish_align(rundir, cfg, names, table=False)
    return summary
