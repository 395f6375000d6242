"""``howtocap align DIR``: the per-video scoring stage over every captioned video, then the
global filter as a reduce step.

Scores per video go to ``DIR/parts/align_scores/`` (independent of the filter), so changing only
the filter re-filters without rescoring; changing encoders or window settings rescores
everything, and a re-captioned (or re-pointed) video is rescored alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from howtocap.align import stream
from howtocap.align.config import AlignConfig
from howtocap.align.filter import (
    describe_filter,
    filter_counts,
    filter_mode,
    filter_window,
    threshold_of,
)
from howtocap.align.stage import SCORES, AlignStage
from howtocap.align.stream import (
    columns_of,
    sorted_by_video,
    video_windows,
    write_windows,
)
from howtocap.align.videos import RunVideos
from howtocap.engine.core import (
    MAX_ATTEMPTS,
    Batching,
    Shard,
    StageSummary,
    prepare_stages,
    run_stage,
)
from howtocap.engine.memory import give_back_memory
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform, kept_captions

STAGE = AlignStage.name
INPUTS = "align_inputs"  # parts/fingerprints/align_inputs.parquet: each video's captions' hash

Windows = Callable[[], Iterable[pd.DataFrame]]  # a fresh pass over a table, whole videos


def _fingerprint(item: VideoItem, text: str) -> str:
    return format(hash_text(f"{item.video_path}\n{text}"), "016x")


def _fingerprints(captions: pd.DataFrame, items: Sequence[VideoItem]) -> dict[str, str]:
    """Per video, a hash of its captions and video path: what its scores were computed from."""
    cols = [c for c in ("start", "end", "text") if c in captions.columns]
    texts = _csv_per_video(captions, cols)
    return {it.video_id: _fingerprint(it, texts.get(it.video_id, "")) for it in items}


def _in_id_order(items: Sequence[VideoItem] | RunVideos) -> Iterator[VideoItem]:
    """The items by video id (stable): the run's kept videos as they are stored, made a
    chunk at a time; a list sorted."""
    if isinstance(items, RunVideos):
        return items.kept_items()
    return iter(sorted(items, key=lambda it: it.video_id))


def _fingerprint_stream(windows: Iterable[pd.DataFrame], items: Sequence[VideoItem] | RunVideos
                        ) -> Iterator[tuple[str, str]]:
    """``_fingerprints`` of every item, in video id order, from windows of whole videos of
    the kept captions (in id order): an item whose id is at most the window's largest is
    hashed with that window's text (its captions are all there, or it has none)."""
    todo = _in_id_order(items)
    it = next(todo, None)
    for df in windows:
        cols = [c for c in ("start", "end", "text") if c in df.columns]
        texts = _csv_per_video(df, cols)
        if not texts:
            continue
        top = max(texts)
        while it is not None and it.video_id <= top:
            yield it.video_id, _fingerprint(it, texts.get(it.video_id, ""))
            it = next(todo, None)
    while it is not None:
        yield it.video_id, _fingerprint(it, "")
        it = next(todo, None)


def _csv_per_video(captions: pd.DataFrame, cols: list[str],
                   chunk: int = 200_000) -> dict[str, str]:
    """Each video's ``cols`` exactly as ``g[cols].to_csv(index=False, header=False)`` writes
    them (the recorded fingerprints are hashes of that text, so it must not change): one
    ``to_csv`` per chunk of rows, split into lines, instead of a call per video (a fixed cost
    that adds up over a HowTo100M run). CSV formats every row on its own, so a row is one line
    unless a text holds a line break: such a video is written alone, as before."""
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


def _inputs_path(rundir: RunDir) -> Path:
    """Beside the stage's fingerprint (``RunDir`` places it; config/ held the old JSON)."""
    return rundir.fingerprint_path(STAGE).with_name(f"{INPUTS}.parquet")


def _recorded_fingerprints(rundir: RunDir) -> Iterator[tuple[str, str]]:
    """The fingerprints recorded by earlier runs, in video id order: the Parquet table, a
    record batch at a time, or an older run's ``config/align_inputs.json`` (read whole, once:
    this run writes the table, which is read from then on)."""

    path = _inputs_path(rundir)
    if path.exists():
        for rb in stream.open_parquet(path).iter_batches(batch_size=stream.ROWS,
                                                    columns=["video_id", "fingerprint"]):
            yield from zip(rb.column(0).to_pylist(), rb.column(1).to_pylist(), strict=True)
        return
    yield from sorted((rundir.read_config(INPUTS) or {}).items())


def recorded_fingerprints(rundir: RunDir) -> dict[str, str]:
    """Every video's recorded caption fingerprint, whole (for tests and tools)."""
    return dict(_recorded_fingerprints(rundir))


def _joined(old: Iterator[tuple[str, str]], now: Iterator[tuple[str, str]]
            ) -> Iterator[tuple[str, str | None, str | None]]:
    """``(video_id, old, now)`` of two id-sorted streams (None where one lacks the id)."""
    a, b = next(old, None), next(now, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None
            yield a[0], a[1], None
            a = next(old, None)
        elif a is None or b[0] < a[0]:
            yield b[0], None, b[1]
            b = next(now, None)
        else:
            yield a[0], a[1], b[1]
            a, b = next(old, None), next(now, None)


def _forget_changed_videos(rundir: RunDir, windows: Iterable[pd.DataFrame],
                           items: Sequence[VideoItem] | RunVideos) -> None:
    """Re-captioned (or re-pointed) videos lose their old scores, so they are aligned again.

    The recorded fingerprints and this run's are joined as two id-sorted streams and their
    union written to ``align_inputs.parquet`` a window at a time (the JSON dict of
    every video it replaces was read and rewritten whole); the changed videos are forgotten
    before the new table replaces the old, so a kill in between finds them changed again."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from howtocap.atomic import atomic_write

    schema = pa.schema([("video_id", pa.string()), ("fingerprint", pa.string())])

    def write(tmp: str) -> None:
        changed: list[str] = []
        with pq.ParquetWriter(tmp, schema, write_page_checksum=True) as writer:
            ids: list[str] = []
            fps: list[str] = []
            for vid, old, now in _joined(_recorded_fingerprints(rundir),
                                         _fingerprint_stream(windows, items)):
                if old is not None and now is not None and old != now:
                    changed.append(vid)
                ids.append(vid)
                fps.append(now if now is not None else str(old))
                if len(ids) >= stream.ROWS:
                    writer.write_table(pa.table([ids, fps], schema=schema))
                    ids, fps = [], []
            writer.write_table(pa.table([ids, fps], schema=schema))
        rundir.forget(STAGE, changed)

    _inputs_path(rundir).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(_inputs_path(rundir), write)


class _Captions:
    """The run's captions table, fresh and checked, read a window of whole videos at a time:
    every pass reads it again, the driver never holds it."""

    def __init__(self, rundir: RunDir) -> None:
        if not rundir.has_table("captions"):
            raise InputError(rundir.root, "no captions.parquet (run `howtocap caption` first)")
        if not rundir.has_table("videos"):
            raise InputError(rundir.root, "no videos.parquet (run `howtocap caption` first: it "
                                          "records which file each video came from)")
        self.path, = rundir.table_files("captions")  # one file today (see table_files)
        self.columns = columns_of(self.path)
        need = {"video_id", "start", "text"}
        if not need <= set(self.columns):
            raise InputError(rundir.table_path("captions"),
                             f"lacks columns {sorted(need - set(self.columns))}")
        self.ordered = sorted_by_video(self.path)

    def windows(self, columns: Sequence[str] | None = None, rows: int | None = None
                ) -> Iterator[pd.DataFrame]:
        return video_windows(self.path, columns, rows, ordered=self.ordered)

    def kept(self, columns: Sequence[str] | None = None, rows: int | None = None
             ) -> Iterator[pd.DataFrame]:
        """The kept captions (``kept_captions``), a window at a time."""
        cols = None if columns is None else \
            [c for c in (*columns, "rejected") if c in self.columns]
        for df in self.windows(cols, rows):
            yield kept_captions(df)


def _video_items(rundir: RunDir) -> RunVideos:
    """The run's videos (``videos.parquet``) as compact columns (``RunVideos``), read a
    batch at a time: items are made a window at a time from them."""
    return RunVideos.read(rundir.table_files("videos")[0]) if rundir.has_table("videos") \
        else RunVideos()


def _video_paths(rundir: RunDir, video_ids: Sequence[str]) -> dict[str, Any]:
    """``video_path`` of these videos (``videos.parquet``, only their rows kept)."""

    want = set(video_ids)
    out: dict[str, Any] = {}
    if not rundir.has_table("videos"):
        return out
    path, = rundir.table_files("videos")
    for rb in stream.open_parquet(path).iter_batches(batch_size=stream.ROWS,
                                                columns=["video_id", "video_path"]):
        for vid, vp in zip(rb.column(0).to_pylist(), rb.column(1).to_pylist(), strict=True):
            if vid in want:
                out[vid] = vp
    return out


def _captioned(rundir: RunDir, videos: RunVideos, chunk: int | None = None) -> None:
    """Keep the videos with something to align: a caption record ``ok``, or (captions
    brought in without status records, a copied table) no subtitles record either; looked
    up a chunk of ids at a time (``newest_of``), not a record per video."""
    keep = np.zeros(len(videos), dtype=bool)
    for pos in videos.positions(chunk or stream.ROWS, kept=False):
        ids = videos.id_list(pos)
        cap = rundir.newest_of("caption", ids, ("status",))
        sub = rundir.newest_of("subtitles", ids, ())
        keep[pos] = np.where(cap["found"], cap["status"] == "ok", ~sub["found"])
    videos.select(keep)


def _unknown_ids(windows: Iterable[pd.DataFrame], videos: RunVideos) -> list[str]:
    """Video ids of the (kept) captions that ``videos`` do not list, sorted: each window's
    ids against the run's ids of its span (the windows and the run are both in id order, so
    no set of every id is made)."""
    import pyarrow as pa
    import pyarrow.compute as pc

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
    """``DIR/aligned.parquet`` as written by ``align_run`` (filtered; ``kept`` is meaningful)."""
    if not rundir.has_table("aligned"):
        raise InputError(rundir.root, "no aligned table (run `howtocap align` first)")
    return rundir.table("aligned")


def finish_align(rundir: RunDir, cfg: AlignConfig, encoder_names: Sequence[str],
                 *, report: bool = True, table: bool = True
                 ) -> tuple[pd.DataFrame | None, float]:
    """The reduce step: merge the per-video scores, apply the global filter, write
    aligned.parquet + report + config; returns aligned.parquet read back (None unless
    ``table``: ``align_run`` does not look at it) and the threshold.

    Streamed, so its memory is a window and not the run: the scores are merged by
    ``merge_streaming``, an explicit mode's threshold chosen in a first pass over the score
    column (``_threshold``), and each window of whole videos filtered, written as a row
    group of aligned.parquet and added to the report's sums. The rows are the whole-table
    ``apply_filter``'s, row for row."""
    from howtocap.align.report import ReportStats, write_report_from

    give_back_memory()  # what the scoring freed, before the merge's own peak adds to it
    path, = rundir.table_files(SCORES)  # merged without holding it when not fresh
    give_back_memory()
    ordered = sorted_by_video(path)
    thr = _threshold(path, cfg, ordered)
    stats = ReportStats()
    counts = {"no_null_z": 0, "chatter_dropped": 0, "chatter_dropped_only_by_text": 0}
    n = {"kept": 0, "outside": 0}

    def filtered() -> Iterator[pd.DataFrame]:
        for window in video_windows(path, ordered=ordered):
            merged = conform(window, "aligned")
            # The guard's drops: captions with no window inside the video within ±T (not
            # moved, not scored). Like the reference they leave the table; they are counted
            # and listed.
            out_mask = merged.pop("outside").fillna(False).to_numpy(dtype=bool) \
                if "outside" in merged else np.zeros(len(merged), dtype=bool)
            outside = merged[out_mask].reset_index(drop=True)
            merged = merged[~out_mask].reset_index(drop=True)
            n["outside"] += len(outside)
            # The text chatter test runs here, on the merged captions, not in the per-video
            # stage: it is part of the filter, so switching it (``--keep-chatter``)
            # re-filters old scores.
            aligned = filter_window(merged, cfg, thr)
            n["kept"] += int(aligned["kept"].sum())
            for k, v in filter_counts(aligned, cfg).items():
                counts[k] += v
            if report:
                stats.add_outside(outside)
                stats.add(aligned)
            yield aligned

    pairs = write_windows(rundir.table_path("aligned"), filtered())
    config = {**cfg.model_dump(), "encoders": list(encoder_names),
              "scoring_key": cfg.scoring_key(encoder_names), "threshold_used": thr,
              "filter": describe_filter(cfg, thr),
              "kept": n["kept"], "pairs": pairs, "outside_video": n["outside"], **counts}
    rundir.write_config(STAGE, config)
    if report:
        write_report_from(stats, thr, config, rundir.root / "align_report.html")
    return (read_aligned(rundir) if table else None), thr


def _threshold(path: Path, cfg: AlignConfig, ordered: bool) -> float:
    """``apply_filter``'s threshold over the merged scores, without holding them: the
    per-video groups (in id order, as its ``groupby`` ranks them) counted in a first pass
    over the score column, ``choose_threshold``'s draw among them (the same rng call on the
    same count), and a second pass for the drawn videos' scores. Only ``sample_videos`` 0
    (every score, exactly) or a run of at most ``sample_videos`` videos pools them all."""
    if filter_mode(cfg) in ("keep_all", "null_z"):
        return -np.inf
    if cfg.threshold is not None:
        return float(cfg.threshold)
    cols = [c for c in ("video_id", "score", "outside") if c in columns_of(path)]

    def groups() -> Iterator[list[np.ndarray]]:
        for w in video_windows(path, cols, ordered=ordered):
            if "outside" in w:
                w = w[~w["outside"].fillna(False).to_numpy(dtype=bool)]
            yield [g.to_numpy(dtype=np.float64)
                   for _, g in w.groupby("video_id", sort=True)["score"]]

    n_groups = total = 0
    pool: list[np.ndarray] | None = []
    for gs in groups():
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
        pick = np.sort(rng.choice(n_groups, size=cfg.sample_videos, replace=False))
        pool, rank = [], 0
        for gs in groups():
            lo, hi = np.searchsorted(pick, [rank, rank + len(gs)])
            pool += [gs[int(i) - rank] for i in pick[lo:hi]]
            rank += len(gs)
    assert pool is not None
    return threshold_of(np.concatenate(pool) if pool else np.zeros(0), total, sampled, cfg)


REFERENCE = "align_reference"


Reference = tuple[pd.DataFrame, list[str]]  # (video_id, text) of captions; clip video ids


def recorded_reference(rundir: RunDir, cfg: AlignConfig) -> Reference:
    """The default filter's references drawn for this run directory with these settings."""
    old = rundir.read_config(REFERENCE) or {}
    if (old.get("size"), old.get("videos"), old.get("seed")) != (
            cfg.reference_captions, cfg.reference_videos, cfg.seed):
        return pd.DataFrame(columns=["video_id", "text"]), []
    return (pd.DataFrame(old.get("captions", []), columns=["video_id", "text"]),
            [str(v) for v in old.get("clip_videos", [])])


def _caption_pool(df: pd.DataFrame) -> pd.DataFrame:
    """The distinct ``(video_id, text)`` of a window of whole videos, sorted: the window's
    stretch of the whole run's sorted pool."""
    pool = df[["video_id", "text"]].astype(str).drop_duplicates()
    return pool.sort_values(["video_id", "text"]).reset_index(drop=True)


def draw_reference(rundir: RunDir, windows: Windows, clip_files: Callable[[], Sequence[str]],
                   cfg: AlignConfig, *, redo: bool = False) -> Reference:
    """The default filter's references: ``reference_captions`` random captions of the run and
    the clips of ``reference_videos`` random videos, drawn once and recorded, so that later
    runs (more videos, a resumed run) score against the same ones and keep their results;
    ``redo`` or new settings draw again.

    ``windows()`` is a pass over every caption (rejected ones too), windows of whole videos
    in id order; ``clip_files()`` the videos with a file, sorted. Two passes draw what one
    sorted pool of the whole table drew: the first counts the distinct ``(video_id, text)``,
    the rng picks among that count (the same calls), the second takes the picked rows."""
    old = recorded_reference(rundir, cfg)
    if (len(old[0]) or old[1]) and rundir.has_results(STAGE) and not redo:
        return old
    rng = np.random.default_rng(cfg.seed)
    size = sum(len(_caption_pool(df)) for df in windows())
    pick = np.sort(rng.choice(size, size=min(cfg.reference_captions, size), replace=False))
    rows: list[pd.DataFrame] = []
    at = taken = 0
    for df in windows():
        if taken >= len(pick):
            break
        pool = _caption_pool(df)
        lo, hi = np.searchsorted(pick, [at, at + len(pool)])
        if hi > lo:
            rows.append(pool.iloc[pick[lo:hi] - at])
            taken += int(hi - lo)
        at += len(pool)
    ref = pd.concat(rows, ignore_index=True) if rows else \
        pd.DataFrame(columns=["video_id", "text"])
    files = clip_files()
    chosen = [files[i] for i in np.sort(rng.choice(
        len(files), size=min(cfg.reference_videos, len(files)), replace=False))]
    rundir.write_config(REFERENCE, {"size": cfg.reference_captions,
                                    "videos": cfg.reference_videos, "seed": cfg.seed,
                                    "captions": ref.to_numpy().tolist(), "clip_videos": chosen})
    return ref, chosen


class _IdsAt(Sequence[str]):
    """The ids of some of the run's videos (their positions, 8 bytes each): a sequence of
    ``str`` made one id at a time."""

    def __init__(self, videos: RunVideos, positions: np.ndarray) -> None:
        self.videos, self.at = videos, positions

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self.videos.id_list(self.at[i])
        return self.videos.id_list([self.at[i]])[0]


def _clip_files(videos: RunVideos) -> Sequence[str]:
    """The videos whose file is there, sorted (``draw_reference``'s clip candidates): their
    positions among the run's (id-ordered) videos, not a list of their ids."""
    found = [pos[np.array([it.video_path is not None and it.video_path.is_file()
                           for it in videos.items(pos)], dtype=bool)]
             for pos in videos.positions(kept=False)]
    return _IdsAt(videos, np.concatenate(found) if found else np.zeros(0, np.int64))


def clip_bank(rundir: RunDir, clip_videos: Sequence[str], models: Sequence[Any],
              cfg: AlignConfig, paths: Mapping[str, Any] | None = None
              ) -> tuple[list[np.ndarray], list[str]] | None:
    """Every clip (``clip_seconds`` long, 1-s steps) of the reference videos, per encoder,
    pooled as alignment pools them; from the frame cache the stage fills and reuses. A video
    that does not decode is left out (the stage reports it). ``paths``: the reference
    videos' files (else looked up in ``videos.parquet``, those rows only)."""
    from howtocap.encoders.cache import frame_embeddings_multi
    from howtocap.encoders.windows import rows_covering

    if not clip_videos or not models:
        return None
    if paths is None:
        paths = _video_paths(rundir, clip_videos)
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
    """The align stage of these settings (its fingerprint is what a re-run is checked by);
    no ``reference``: the one recorded in the run directory. With ``within_shot`` the shots
    settings recorded in the run (the defaults before any) are part of it."""
    from howtocap.shots.run import recorded_config

    ref_caps, ref_videos = reference if reference is not None \
        else recorded_reference(rundir, cfg)
    shots = recorded_config(rundir).model_dump() if cfg.within_shot else None
    return AlignStage(list(encoder_names) or ["default"], cfg, rundir.cache_dir, device=device,
                      models=encoders, models_from_names=from_names, reference=ref_caps,
                      clip_videos=ref_videos, clips=clips, shots_settings=shots)


def ensure_shots(rundir: RunDir, items: Sequence[VideoItem] | RunVideos, *,
                 runner: Runner | None = None, progress: bool = True,
                 shard: Shard | None = None, batching: Batching | None = None) -> StageSummary:
    """``--within-shot`` needs every video's shots: the shots stage with the run's recorded
    settings (a no-op for videos already done, so ``run`` may have run it just before),
    over the videos with a file a ``WINDOW`` at a time."""
    from howtocap.shots.run import shots_run

    def windows() -> Iterator[list[VideoItem]]:
        parts = items.windows(WINDOW) if isinstance(items, RunVideos) else \
            (list(items[lo:lo + WINDOW]) for lo in range(0, len(items), WINDOW))
        for part in parts:
            yield [it for it in part if it.video_path]

    return shots_run(rundir, windows=windows, runner=runner, progress=progress, shard=shard,
                     batching=batching)


WINDOW = 10_000  # videos taken through the scoring stage at a time (``align_run``): the
# engine holds a window's items and selection (a window of 50,000 peaked higher)


def _score_windows(rundir: RunDir, videos: RunVideos, stage: AlignStage,
                   opts: dict[str, Any]) -> StageSummary:
    """The scoring stage over the kept videos a ``WINDOW`` at a time, as ``caption_run``
    takes its stages: what the engine keeps per video to do (the selection, claims,
    attempts) and the items themselves are a window's, not the run's."""
    summary = StageSummary(stage.name)
    ran = False
    for items in videos.windows(WINDOW):
        summary.add(run_stage(rundir, items, stage, **opts))
        ran = True
    if not ran:  # no video: the stage still runs (its summary, its stats) as before
        summary.add(run_stage(rundir, [], stage, **opts))
    return summary


def align_run(rundir: RunDir, encoder_names: Sequence[str], cfg: AlignConfig, *,
              runner: Runner | None = None, device: str | None = None, progress: bool = True,
              encoders: Sequence[Any] | None = None, shard: Shard | None = None,
              redo: bool = False, retry_failed: bool = False,
              max_attempts: int = MAX_ATTEMPTS, shots_ready: bool = False,
              batching: Batching | None = None) -> StageSummary:
    """Score every captioned video (resumable), then filter globally.

    Re-running with only a different filter re-uses the per-video scores; different encoders
    or window settings are refused unless ``redo`` (then every video is rescored);
    re-captioned videos are rescored alone. No names: ``default``.
    ``encoders`` (already built, e.g. in tests) overrides the names. ``shots_ready``: the
    caller has just run the shots stage over the run's videos (``run --within-shot``), so
    ``--within-shot`` does not run it, merge ``shots.parquet`` and rewrite the status table
    a second time. With a ``shard`` only that
    shard's videos are scored and the global filter is left to a final run without a shard.
    """
    in_process = runner is None or runner.in_process  # None: run_stage's LocalRunner
    names_in = list(encoder_names) or ["default"]
    from_names = encoders is None
    # The captions are read a window of whole videos at a time, in passes (the stage reads
    # each video's rows itself): the whole table grows with the run.
    captions = _Captions(rundir)
    videos = _video_items(rundir)
    # The default filter's reference is drawn from every caption the LLM wrote, rejected ones
    # too: they are "other captions" all the same, and so the rejection never changes which
    # of the other captions the filter keeps. Rejected captions themselves are not aligned:
    # not scored, not in aligned.parquet (they stay in captions.parquet with their reason).
    reference = draw_reference(rundir, lambda: captions.windows(["video_id", "text"]),
                               lambda: _clip_files(videos), cfg, redo=redo)
    clip_paths = videos.paths_of(reference[1])
    stage = align_stage(rundir, names_in, cfg, device=device, encoders=encoders,
                        from_names=from_names, reference=reference)
    cid = prepare_stages(rundir, [stage], redo=redo)[STAGE]  # before any model is loaded
    if encoders is None and in_process:
        from howtocap.encoders import create  # loaded here once, shared with the stage

        encoders = [create(n, device=device) for n in names_in]
    names = [e.name for e in encoders] if encoders is not None else names_in
    if len(set(names)) != len(names):
        raise HowtocapError(f"the same encoder was given twice: {', '.join(names)}")
    key = cfg.scoring_key(names)
    rundir.write_config(STAGE, {**cfg.model_dump(), "encoders": names, "scoring_key": key})
    videos.add_unknown(_unknown_ids(captions.kept(["video_id"]), videos))
    # A video whose subtitles or captioning failed has nothing to align: leave it out (its
    # error is already in the status table) instead of recording an empty "ok". Captions
    # brought in without status records (a copied table) are aligned.
    _captioned(rundir, videos)
    _forget_changed_videos(rundir, captions.kept(), videos)
    give_back_memory()  # the passes over the captions: freed, not to be kept under the scoring
    if cfg.within_shot and not shots_ready:  # a run without shots computes them first
        ensure_shots(rundir, videos, runner=runner, progress=progress, shard=shard,
                     batching=batching)
    clips = None
    if reference[1]:  # the default filter's reference clips, from the driver's encoders
        from howtocap.encoders import create

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
        if rundir.corrupted:  # a corrupt part was dropped at the merge: redo those videos
            rundir.corrupted.clear()
            summary.absorb(_score_windows(rundir, videos, stage, opts))
            finish_align(rundir, cfg, names, table=False)
    rundir.write_status_table()
    return summary
