"""``howtocap export DIR --format clips``: the kept captions' windows as video clips in
WebDataset shards, video2dataset's layout (docs/clips.md); a shard's ``_stats.json`` is
written last, ``index.parquet`` and ``clips.json`` once every shard is.

Why this shape: the plan (which clip goes in which shard under which key) depends on the rows
and settings alone, never on timing, so a killed export resumes shard by shard and ends with
the shards a clean run writes. A thread pool cuts (ffmpeg) a few videos ahead of the writer;
each MP4 waits in ``OUT/.work/`` until it is copied into the tar, so memory stays flat."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from howtocap.atomic import atomic_write, atomic_write_parquet, atomic_write_text
from howtocap.clips.config import ClipsConfig
from howtocap.clips.cut import ClipFiles, ClipJob, cut_video
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.io import WHAT, ExportWhat
from howtocap.io.export import pairs_for_export
from howtocap.io.webdataset import shard_folder
from howtocap.progress import console, progress_bar
from howtocap.shots.bounds import clamp_to_shot, shots_by_video

FORMAT = "howtocap-clips"
VERSION = 1
_F, _I, _S = pa.float64(), pa.int64(), pa.string()
# every shard's table and the index have these columns and types, empty or not
INDEX_SCHEMA = pa.schema([("shard", _S), ("key", _S), ("video_id", _S), ("start", _F),
                          ("end", _F), ("caption", _S), ("n_captions", _I), ("score", _F),
                          ("config_id", _S), ("window_start", _F), ("window_end", _F),
                          ("keyframe", _F), ("duration", _F), ("middle", _F),
                          ("mp4_bytes", _I)])
INDEX_COLUMNS = INDEX_SCHEMA.names
_OURS_RE = re.compile(r"^(\d{5}\.tar|\d{5}\.parquet|\d{5}_stats\.json|index\.parquet|"
                      r"clips\.json|\.work|\..*\.tmp)$")
TAR_MTIME = 0  # fixed member times: the same export gives the same bytes


@dataclass
class ClipsExport:
    out: Path
    n_clips: int
    n_captions: int
    shards: list[str]
    kind: str  # which table the rows came from (aligned | captions | framecaps | rows)
    skipped: dict[str, str] = field(default_factory=dict)  # video_id -> why
    reused: int = 0  # shards a previous run had finished


@dataclass
class _Task:
    """One video's clips within one shard: the unit a worker cuts."""

    shard: int
    video_id: str
    video_path: str
    jobs: list[ClipJob]


# -- the plan --------------------------------------------------------------------------------
def plan_jobs(rows: pd.DataFrame, shots: dict[str, list[tuple[float, float]]],
              cross_shots: bool) -> list[tuple[str, ClipJob]]:
    """One job per clip (a ``(video, start, end)`` window; its captions best score first), in
    (video, start, end) order; keys are given when the jobs are dealt into shards."""
    need = {"video_id", "start", "end", "text"}
    if not need <= set(rows.columns):
        raise HowtocapError(f"rows to export need columns {sorted(need)}; got "
                            f"{list(rows.columns)}")
    df = rows[(rows["text"].astype(str).str.strip() != "")
              & (rows["end"].astype(float) > rows["start"].astype(float))]
    df = df.assign(_score=df["score"].astype(float) if "score" in df.columns else float("nan"),
                   _cfg=df["config_id"].astype(str) if "config_id" in df.columns else "")
    df = df.sort_values(["video_id", "start", "end", "_score", "text"],
                        ascending=[True, True, True, False, True], kind="stable",
                        na_position="last")
    signals = [c for c in rows.attrs.get("signals", []) if c in df.columns]
    jobs = []
    for (vid, start, end), g in df.groupby(["video_id", "start", "end"], sort=False):
        vid, start, end = str(vid), float(start), float(end)
        c_start, c_end = (start, end) if cross_shots else \
            clamp_to_shot(shots.get(vid, []), start, end)
        scores = [None if pd.isna(s) else round(float(s), 6) for s in g["_score"]]
        captions = [str(t) for t in g["text"]]
        meta = {"video_id": vid, "caption": captions[0], "captions": captions,
                "scores": scores, "config_id": sorted(set(g["_cfg"]))[0] if len(g) else "",
                "window_start": start, "window_end": end}
        if signals:  # the window's visual signals (``howtocap signals``), as export's CSV
            first = g.iloc[0]
            meta["signals"] = {c: None if pd.isna(first[c]) else
                               (bool(first[c]) if isinstance(first[c], (bool, np.bool_))
                                else round(float(first[c]), 6)) for c in signals}
        jobs.append((vid, ClipJob("", round(c_start, 6), round(c_end, 6), meta)))
    return jobs


def shard_name(i: int) -> str:
    return f"{i:05d}"


def deal(jobs: list[tuple[str, ClipJob]], shard_size: int) -> list[list[tuple[str, ClipJob]]]:
    """Consecutive runs of ``shard_size`` jobs, keyed ``<shard><position>`` (video2dataset's
    keys: the position is zero-padded to the shard size's digits)."""
    width = len(str(shard_size - 1))
    shards = []
    for s in range(0, len(jobs), shard_size):
        part = jobs[s:s + shard_size]
        for i, (_, job) in enumerate(part):
            job.key = f"{shard_name(s // shard_size)}{i:0{width}d}"
        shards.append(part)
    return shards


def shard_fingerprint(part: list[tuple[str, ClipJob]], paths: dict[str, str],
                      cfg: ClipsConfig) -> str:
    """What a shard's bytes depend on: its jobs, their videos' paths and the settings (not how
    many workers made it)."""
    return format(hash_text(json.dumps({
        "format": FORMAT, "version": VERSION, "settings": cfg.model_dump(exclude={"workers"}),
        "jobs": [[j.key, j.start, j.end, j.meta, paths.get(v, "")] for v, j in part]},
        sort_keys=True)), "016x")


# -- the output folder -----------------------------------------------------------------------
def _prepare_out(out: Path) -> None:
    """A folder that is empty, new, or holds only (part of) an earlier clip export: leftovers
    of a killed run (temp files, ``.work/``) go, finished shards stay for the resume."""
    names = shard_folder(out, _OURS_RE, ", or an earlier --format clips export to resume")
    # the summary first: a reader never pairs an old clips.json with new shards
    for name in ["clips.json", "index.parquet",
                 *(n for n in names if n.startswith(".") and n.endswith(".tmp"))]:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / ".work", ignore_errors=True)


def _finished(out: Path, name: str, fingerprint: str) -> dict[str, Any] | None:
    """The shard's stats when a previous run finished it with the same plan and settings."""
    try:
        stats = json.loads((out / f"{name}_stats.json").read_text())
        ok = (stats.get("fingerprint") == fingerprint
              and (out / f"{name}.tar").stat().st_size == stats.get("tar_bytes")
              and (out / f"{name}.parquet").exists())
    except (OSError, ValueError):
        return None
    return stats if ok else None


# -- writing ---------------------------------------------------------------------------------
def _member(tar: tarfile.TarFile, name: str, size: int, data: IO[bytes]) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, TAR_MTIME, 0o644
    info.uname = info.gname = "howtocap"
    tar.addfile(info, data)


def _add_clip(tar: tarfile.TarFile, c: ClipFiles, shard: str) -> dict[str, Any]:
    """The clip's members (WebDataset groups them by key) and its index row."""
    import io

    job = c.job
    record = {"key": job.key, "shard": shard, **job.meta, "start": job.start, "end": c.end,
              "keyframe": c.keyframe, "duration": c.duration, "middle": c.middle}
    mp4_bytes = c.mp4.stat().st_size
    for ext, data in (("jpg", c.jpg),
                      ("json", json.dumps(record, ensure_ascii=False).encode()),
                      ("txt", str(job.meta["caption"]).encode())):
        _member(tar, f"{job.key}.{ext}", len(data), io.BytesIO(data))
    with c.mp4.open("rb") as fh:
        _member(tar, f"{job.key}.mp4", mp4_bytes, fh)
    c.mp4.unlink()
    scores = [s for s in job.meta["scores"] if s is not None]
    return {**{k: v for k, v in record.items() if k in INDEX_COLUMNS},
            "n_captions": len(job.meta["captions"]), "mp4_bytes": mp4_bytes,
            "score": scores[0] if scores else float("nan"),
            "keyframe": float("nan") if c.keyframe is None else c.keyframe}


def _results(pool: ThreadPoolExecutor, tasks: list[_Task], cfg: ClipsConfig, work: Path,
             ahead: int) -> Iterator[tuple[_Task, Future[Any]]]:
    """The tasks' futures in plan order, at most ``ahead`` submitted beyond the one the
    writer waits for (what bounds the clips waiting on disk)."""
    queue: deque[tuple[_Task, Future[Any]]] = deque()
    for task in tasks:
        queue.append((task, pool.submit(_cut, task, cfg, work)))
        if len(queue) > ahead:
            yield queue.popleft()
    yield from queue


@dataclass
class _ShardRecord:
    rows: list[dict[str, Any]] = field(default_factory=list)  # the shard's index rows
    skips: dict[str, str] = field(default_factory=dict)  # video_id -> why
    left_out: dict[str, str] = field(default_factory=dict)  # key -> why


def _write_tar(tmp: str, items: Iterator[tuple[_Task, Future[Any]]], name: str,
               rec: _ShardRecord, skipped: dict[str, str],
               advance: Callable[[int], None]) -> None:
    """One shard's tar: its videos' clips as they come back from the workers, in plan order;
    a video that cannot be cut is one line (the first time) and left out."""
    with open(tmp, "wb") as fh, \
            tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for task, fut in items:
            try:
                clips, left_out = fut.result()
            except HowtocapError as exc:  # this video only (no ffmpeg at all is raised)
                if not isinstance(exc, InputError) and task.video_path:
                    raise
                if task.video_id not in skipped:
                    console.print(f"[yellow]skip[/] {task.video_id}: {exc}", highlight=False)
                rec.skips[task.video_id] = skipped[task.video_id] = str(exc)
                clips, left_out = [], {}
            rec.left_out.update(left_out)
            for c in clips:
                rec.rows.append(_add_clip(tar, c, name))
            advance(len(task.jobs))


def export_clips(run_dir: str | Path, out: str | Path | None = None, *,
                 rows: pd.DataFrame | None = None, what: ExportWhat = WHAT,
                 config: ClipsConfig | None = None, progress: bool = True,
                 drop_duplicates: bool = False, where: str | None = None) -> ClipsExport:
    """Write the clips of ``rows`` (default: what every export format takes, filtered by
    ``drop_duplicates`` and ``where``) into ``OUT`` [``DIR/clips``]; a missing or undecodable
    video is one line and skipped."""
    cfg = config or ClipsConfig()
    cfg.check()
    rundir = RunDir(run_dir, create=False)
    if not rundir.root.is_dir():
        raise HowtocapError(f"{rundir.root}: not a run directory")
    kind = "rows"
    if rows is None:
        rows, kind = pairs_for_export(rundir, what, drop_duplicates=drop_duplicates, where=where,
                                      carry_signals=True)
    out = Path(out) if out is not None else rundir.root / "clips"
    videos = rundir.table("videos")
    paths = {str(v): str(p or "") for v, p in zip(videos["video_id"], videos["video_path"],
                                                 strict=True)}
    shots = {} if cfg.cross_shots else shots_by_video(rundir.table("shots"))
    shards = deal(plan_jobs(rows, shots, cfg.cross_shots), cfg.shard_size)
    if not shards:
        raise HowtocapError(f"{rundir.root}: no clips to export ({len(rows)} {kind} rows)")
    _prepare_out(out)
    names = [shard_name(i) for i in range(len(shards))]
    # shards of a larger earlier plan (their markers first)
    for extra in [*out.glob("[0-9]*_stats.json"), *out.glob("[0-9]*.parquet"),
                  *out.glob("[0-9]*.tar")]:
        if extra.name[:5] not in names:
            extra.unlink(missing_ok=True)

    fingerprints = [shard_fingerprint(part, paths, cfg) for part in shards]
    done: dict[int, dict[str, Any]] = {}
    for i, (name, fp) in enumerate(zip(names, fingerprints, strict=True)):
        if (stats := _finished(out, name, fp)) is not None:
            done[i] = stats
            continue
        for suffix in ("_stats.json", ".parquet", ".tar"):  # the marker first
            (out / f"{name}{suffix}").unlink(missing_ok=True)
    # a shard's jobs are in video order: one task per run of a video
    tasks = [_Task(i, vid, paths.get(vid, ""), [job for _, job in jobs])
             for i, part in enumerate(shards) if i not in done
             for vid, jobs in groupby(part, key=itemgetter(0))]

    reused = len(done)
    work = out / ".work"
    work.mkdir()
    skipped: dict[str, str] = {}
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(cfg.workers, thread_name_prefix="clips") as pool, \
                progress_bar("cutting clips", transient=True, disable=not progress) as prog:
            bar = prog.add_task("clips", total=sum(len(p) for p in shards))
            prog.advance(bar, sum(len(shards[i]) for i in done))
            results = _results(pool, tasks, cfg, work, ahead=2 * cfg.workers)
            # every shard not done has tasks (a shard holds at least one job)
            for i, items in groupby(results, key=lambda r: r[0].shard):
                name, rec, t_shard = names[i], _ShardRecord(), time.perf_counter()
                atomic_write(out / f"{name}.tar", partial(
                    _write_tar, items=items, name=name, rec=rec, skipped=skipped,
                    advance=partial(prog.advance, bar)))
                atomic_write_parquet(pa.Table.from_pylist(rec.rows, schema=INDEX_SCHEMA),
                             out / f"{name}.parquet")
                stats = {"shard": name, "count": len(rec.rows), "planned": len(shards[i]),
                         "skipped_videos": rec.skips, "left_out": rec.left_out,
                         "tar_bytes": (out / f"{name}.tar").stat().st_size,
                         "seconds": round(time.perf_counter() - t_shard, 3),
                         "fingerprint": fingerprints[i]}
                atomic_write_text(out / f"{name}_stats.json", json.dumps(stats, indent=2))
                done[i] = stats
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for i in range(len(shards)):  # videos a previous run skipped are still skipped
        for vid, why in done[i].get("skipped_videos", {}).items():
            skipped.setdefault(vid, why)
    index = pa.concat_tables([pq.read_table(out / f"{n}.parquet", schema=INDEX_SCHEMA)
                              for n in names]).to_pandas()
    if not len(index):
        raise HowtocapError(f"{rundir.root}: no clip could be exported ({len(skipped)} "
                            "video(s) skipped)")
    atomic_write_parquet(pa.Table.from_pandas(index, schema=INDEX_SCHEMA, preserve_index=False),
                 out / "index.parquet")
    n_captions = int(index["n_captions"].sum())
    meta = {"format": FORMAT, "version": VERSION, "source": str(rundir.root.resolve()),
            "table": kind, "settings": cfg.model_dump(), "clips": len(index),
            "captions": n_captions, "videos": int(index["video_id"].nunique()),
            "skipped_videos": skipped,
            # the shards to read; a planned shard whose every video was skipped stays on disk
            # (it marks that part of the plan done) but holds no sample
            "shards": [f"{n}.tar" for i, n in enumerate(names) if done[i]["count"]],
            "empty_shards": [f"{n}.tar" for i, n in enumerate(names) if not done[i]["count"]],
            "shard_bytes": {f"{n}.tar": int(done[i]["tar_bytes"]) for i, n in enumerate(names)},
            "reused_shards": reused,
            "seconds": round(time.perf_counter() - t0, 3)}
    atomic_write_text(out / "clips.json", json.dumps(meta, indent=2))
    return ClipsExport(out, len(index), n_captions, meta["shards"], kind, skipped,
                       meta["reused_shards"])


def _cut(task: _Task, cfg: ClipsConfig, work: Path
         ) -> tuple[list[ClipFiles], dict[str, str]]:
    if not task.video_path:  # e.g. captioned from subtitles alone, no video attached yet
        raise HowtocapError("no video file known for this video id")
    return cut_video(Path(task.video_path), task.jobs, cfg, work)
