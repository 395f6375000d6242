"""WebDataset tar shards of a run's clips: written by ``howtocap export --format webdataset``,
streamed by ``howtocap train SHARDS_DIR`` (why, and the layout: docs/webdataset.md). A shard is
written under a hidden temp name and renamed when complete, ``meta.json`` (which training
requires) last: a killed export leaves nothing that looks complete. No model is imported: for
``content: embeddings`` the caller passes a ``ClipEmbedder`` (``encoders.clip_rows.ClipRows``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from howtocap.atomic import atomic_write_parquet, atomic_write_text
from howtocap.engine.rundir import RunDir
from howtocap.errors import HowtocapError, InputError
from howtocap.hashing import hash_text
from howtocap.io import (
    CONTENT,
    FRAMES_PER_CLIP,
    IMAGE_SIZE,
    JPEG_QUALITY,
    SHARD_SIZE,
    WHAT,
    ExportWhat,
)
from howtocap.io.export import TRAIN_ORDER, pairs_for_export
from howtocap.io.inputs import read_json
from howtocap.io.pairs import Clip, build_clips, frame_times
from howtocap.io.video import encode_jpeg
from howtocap.progress import console, progress_bar

FORMAT = "howtocap-webdataset"
VERSION = 1
CONTENTS = ("frames", "embeddings")
INDEX_COLUMNS = ["shard", "key", "video_id", "start", "end", "n_captions"]
_OURS_RE = re.compile(r"^(\d{6}\.tar|\.\d{6}\.tar\.tmp|index\.parquet|meta\.json|"
                      r"\.(index\.parquet|meta\.json)\..*\.tmp)$")


def clip_key(video_id: str, start: float, end: float) -> str:
    """``<video_id>_<start ms>_<end ms>`` with only ``[A-Za-z0-9_-]``: WebDataset splits a member
    name at its first dot, so a key may hold none (a hash suffix keeps changed ids unique)."""
    vid = re.sub(r"[^A-Za-z0-9_-]", "_", video_id)[:100]
    if vid != video_id:
        vid += "-" + format(hash_text(video_id) % 16**8, "08x")
    return f"{vid}_{round(start * 1000)}_{round(end * 1000)}"


def frame_names(n: int) -> list[str]:
    """Member fields of a sample's frames, zero-padded so they sort in time order."""
    width = max(2, len(str(n - 1)))
    return [f"frames.{i:0{width}d}.jpg" for i in range(n)]


def encode_npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def decode_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


# -- writing ---------------------------------------------------------------------------------
class ClipEmbedder(Protocol):
    """Frame-embedding rows of clips (``content: embeddings``), supplied by the caller."""

    def meta(self) -> dict[str, Any]:
        """``encoder``, ``encoder_name``, ``dim``, ``fps``: recorded in ``meta.json``."""

    def __call__(self, clips: list[Clip], cache_dir: Path
                 ) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Each clip's rows (of one video) and the fields its JSON records; ``InputError``
        when the video does not decode."""


@dataclass
class WebDatasetExport:
    out: Path
    n_samples: int
    n_captions: int
    shards: list[str]
    kind: str  # which table: aligned | captions | framecaps
    skipped: dict[str, str] = field(default_factory=dict)  # video_id -> why


class _ShardFiles:
    """``wds.ShardWriter`` writing ``.NNNNNN.tar.tmp``, renamed to ``NNNNNN.tar`` once closed."""

    def __init__(self, out: Path, shard_size: int) -> None:
        import webdataset as wds

        self.out, self.files, self.done = out, {}, []
        pattern = os.path.join(str(out).replace("%", "%%"), ".%06d.tar.tmp")
        self.writer = wds.ShardWriter(pattern, maxcount=shard_size, maxsize=float("inf"),
                                      post=self._finish, opener=self._open, verbose=0,
                                      encoder=False, user="howtocap", group="howtocap",
                                      mtime=int(time.time()))

    def _open(self, fname: str) -> Any:
        fh = self.files[fname] = open(fname, "wb")  # noqa: SIM115 - closed in _finish
        return fh

    def _finish(self, fname: str) -> None:
        fh = self.files.pop(fname)
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        final = Path(fname).name[1:-len(".tmp")]
        os.replace(fname, self.out / final)
        self.done.append(final)

    def write(self, sample: dict[str, Any]) -> str:
        """Write one sample; returns the (final) name of the shard that holds it."""
        self.writer.write(sample)
        return Path(self.writer.fname).name[1:-len(".tmp")]

    def close(self) -> list[str]:
        self.writer.close()
        if not self.writer.total:  # ShardWriter opens a shard before any write: drop it if empty
            for name in self.done:
                (self.out / name).unlink(missing_ok=True)
            self.done = []
        return self.done

    def abort(self) -> None:
        """Drop the shard being written (its tar stream first, so nothing writes to it later)."""
        tar = getattr(self.writer, "tarstream", None)
        if tar is not None:
            with contextlib.suppress(Exception):
                tar.close()
            self.writer.tarstream = None
        for fname, fh in list(self.files.items()):
            fh.close()
            Path(fname).unlink(missing_ok=True)
        self.files.clear()


def shard_folder(out: Path, ours: re.Pattern[str], resume: str) -> list[str]:
    """``out`` made, or checked to hold nothing but what an export of this kind writes (names
    ``ours`` matches); returns its names. Shared by the frame and the clip export, so a typo in
    ``--out`` never empties someone's folder. ``resume``: what else the user may choose."""
    if out.exists() and not out.is_dir():
        raise InputError(out, "is a file; --out needs a folder for the shards")
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in out.iterdir())
    foreign = [n for n in names if not ours.match(n)]
    if foreign:
        raise InputError(out, f"holds other files ({', '.join(foreign[:3])}"
                              f"{' …' if len(foreign) > 3 else ''}); choose an empty or new "
                              f"folder{resume}")
    return names


def _prepare_out(out: Path) -> None:
    """An empty folder, or one holding only an earlier export (removed: meta.json first, so a
    reader never pairs an old meta.json with new shards)."""
    names = shard_folder(out, _OURS_RE, " for the shards")
    for name in ["meta.json", "index.parquet", *names]:
        (out / name).unlink(missing_ok=True)


def export_webdataset(run_dir: str | Path, out: str | Path | None = None, *,
                      what: ExportWhat = WHAT, content: str = CONTENT,
                      frames_per_clip: int = FRAMES_PER_CLIP, image_size: int = IMAGE_SIZE,
                      shard_size: int = SHARD_SIZE, embed: ClipEmbedder | None = None,
                      jpeg_quality: int = JPEG_QUALITY,
                      progress: bool = True, drop_duplicates: bool = False,
                      where: str | None = None) -> WebDatasetExport:
    """Write one sample per clip (pairs grouped by ``(video, start, end)``, as training groups
    them) into tar shards of ``shard_size`` samples; videos that are missing or do not decode
    are reported in one line each and skipped. ``content="embeddings"`` stores the rows
    ``embed`` gives (e.g. ``ClipRows("default")``: the run's cached frame embeddings)."""
    rundir = RunDir(run_dir, create=False)
    if not rundir.root.is_dir():
        raise HowtocapError(f"{rundir.root}: not a run directory")
    if content not in CONTENTS:
        raise HowtocapError(f"--content must be frames or embeddings, not {content!r}")
    if content == "embeddings" and embed is None:
        raise HowtocapError("--content embeddings needs the frame embeddings' encoder: pass "
                            "embed=ClipRows(<encoder>) (howtocap.encoders.clip_rows)")
    for name, val in (("frames-per-clip", frames_per_clip), ("shard-size", shard_size),
                      ("image-size", image_size)):
        if val < 1:
            raise HowtocapError(f"--{name} must be at least 1 (got {val})")
    if not 1 <= jpeg_quality <= 100:
        raise HowtocapError(f"JPEG quality must be in 1..100 (got {jpeg_quality})")
    out = Path(out) if out is not None else rundir.root / "webdataset"
    df, kind = pairs_for_export(rundir, what, order=TRAIN_ORDER, drop_duplicates=drop_duplicates,
                                where=where)
    videos = rundir.table("videos")
    paths = dict(zip(videos["video_id"], videos["video_path"], strict=True))
    df = df.assign(video_path=[paths.get(v, "") for v in df["video_id"]])
    ps = build_clips(df[["video_id", "video_path", "start", "end", "text"]], log=console)
    skipped = dict(ps.skipped)
    if not ps.clips:
        raise HowtocapError(f"{rundir.root}: no clips to export ({len(df)} {kind} rows, "
                            f"{len(skipped)} video(s) skipped)")
    meta_extra = embed.meta() if content == "embeddings" and embed is not None else {
        "frames_per_clip": frames_per_clip, "image_size": image_size,
        "frame_keys": frame_names(frames_per_clip), "jpeg_quality": jpeg_quality}
    by_video = {v: list(g) for v, g in groupby(ps.clips, key=lambda c: c.video_id)}  # sorted

    _prepare_out(out)
    files = _ShardFiles(out, shard_size)
    rows: list[dict[str, Any]] = []
    keys: set[str] = set()
    try:
        with progress_bar("exporting shards", transient=True, disable=not progress) as prog:
            bar = prog.add_task("export", total=len(by_video))
            for vid, clips in by_video.items():
                try:
                    samples = list(_video_samples(clips, content, frames_per_clip, image_size,
                                                  embed, rundir.cache_dir, jpeg_quality))
                except InputError as exc:
                    skipped[vid] = str(exc)
                    console.print(f"[yellow]skip[/] {vid}: {exc}", highlight=False)
                    prog.advance(bar)
                    continue
                for clip, sample in samples:
                    key = clip_key(clip.video_id, clip.start, clip.end)
                    base, i = key, 1
                    while key in keys:  # two clips within the same millisecond
                        i += 1
                        key = f"{base}-{i}"
                    keys.add(key)
                    sample["__key__"] = key
                    rows.append({"shard": files.write(sample), "key": key,
                                 "video_id": clip.video_id, "start": clip.start,
                                 "end": clip.end, "n_captions": len(clip.captions)})
                prog.advance(bar)
        shards = files.close()
    except BaseException:
        files.abort()
        raise
    if not rows:
        raise HowtocapError(f"{rundir.root}: no clip could be exported ({len(skipped)} "
                            "video(s) skipped)")
    index = pd.DataFrame(rows, columns=INDEX_COLUMNS)
    n_captions = int(index["n_captions"].sum())
    atomic_write_parquet(index, out / "index.parquet")
    meta = {"format": FORMAT, "version": VERSION, "content": content, **meta_extra,
            "source": str(rundir.root.resolve()), "table": kind, "shard_size": shard_size,
            "samples": len(rows), "captions": n_captions,
            "videos": int(index["video_id"].nunique()), "skipped_videos": skipped,
            "shards": shards, "shard_bytes": {s: (out / s).stat().st_size for s in shards},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))
    return WebDatasetExport(out, len(rows), n_captions, shards, kind, skipped)


def _video_samples(clips: list[Clip], content: str, k: int, size: int,
                   embed: ClipEmbedder | None, cache: Path, quality: int
                   ) -> Iterator[tuple[Clip, dict[str, Any]]]:
    """Every clip of one video as a sample (decoding the video once); raises ``InputError``."""
    if content == "frames":
        from howtocap.io.video import sample_frames

        times = [frame_times(c, k, None) for c in clips]
        flat = sample_frames(clips[0].video_path, [t for ts in times for t in ts], size=size)
        for j, (c, ts) in enumerate(zip(clips, times, strict=True)):
            sample: dict[str, Any] = {name: encode_jpeg(img, quality) for name, img in
                                      zip(frame_names(k), flat[j * k:(j + 1) * k], strict=True)}
            sample["json"] = _json(c, frame_times=[round(t, 3) for t in ts])
            yield c, sample
        return
    assert embed is not None  # checked by export_webdataset
    for c, (rows, extra) in zip(clips, embed(clips, cache), strict=True):
        yield c, {"emb.npy": encode_npy(np.ascontiguousarray(rows, dtype=np.float16)),
                  "json": _json(c, **extra)}


def _json(clip: Any, **extra: Any) -> bytes:
    return json.dumps({"video_id": clip.video_id, "start": clip.start, "end": clip.end,
                       "captions": list(clip.captions), "video_path": str(clip.video_path),
                       "duration": clip.duration, **extra}).encode("utf-8")


# -- reading ---------------------------------------------------------------------------------
@dataclass
class ShardSet:
    """A finished export: ``meta.json``, ``index.parquet`` and the shard files it names."""

    root: Path
    meta: dict[str, Any]
    index: pd.DataFrame

    @property
    def content(self) -> str:
        return str(self.meta["content"])

    @property
    def shards(self) -> list[str]:
        return list(self.meta["shards"])

    def url(self, shard: str) -> str:
        return str(self.root / shard)


def is_shard_dir(path: str | Path) -> bool:
    """A folder with shards (finished or not): what ``howtocap train`` treats as WebDataset."""
    p = Path(path)
    return p.is_dir() and ((p / "meta.json").exists() or any(p.glob("[0-9]*.tar"))
                           or any(p.glob(".[0-9]*.tar.tmp")))


def open_shards(path: str | Path) -> ShardSet:
    """Check an export is complete (meta.json, index, every shard at its recorded size)."""
    root = Path(path)
    meta_path = root / "meta.json"
    if not meta_path.exists() and (root / "clips.json").exists():
        raise InputError(root, "is a clip export (MP4 clips, `--format clips`, docs/clips.md); "
                               "training reads frame shards: `howtocap export DIR --format "
                               "webdataset`, or the run directory itself")
    if not meta_path.exists():
        raise InputError(root, "has shards but no meta.json: the export did not finish; run "
                               "`howtocap export … --format webdataset` again")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(meta_path, f"not a howtocap WebDataset export (format {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise InputError(meta_path, f"export format version {meta.get('version')} != {VERSION}; "
                                    "export again")
    try:
        index = pd.read_parquet(root / "index.parquet")
    except Exception as exc:  # pyarrow raises several types for a bad or missing file
        raise InputError(root / "index.parquet", f"not a readable Parquet table ({exc})") from None
    for shard in meta["shards"]:
        p = root / shard
        if not p.exists():
            raise InputError(p, "missing (the export lists it)")
        want = meta.get("shard_bytes", {}).get(shard)
        if want is not None and p.stat().st_size != want:
            raise InputError(p, f"{p.stat().st_size} bytes, the export wrote {want}: the shard "
                                "was truncated or replaced; export again")
    return ShardSet(root, meta, index)


def iter_samples(urls: list[str]) -> Iterator[dict[str, Any]]:
    """Raw samples (``__key__`` and member bytes, ``json`` parsed) of shards, in order."""
    import tarfile

    import webdataset as wds

    for url in urls:
        try:
            for s in wds.tarfile_samples([{"url": url}]):
                s["json"] = json.loads(s["json"])
                yield s
        except (tarfile.TarError, OSError, KeyError, ValueError) as exc:
            raise HowtocapError(f"{url}: unreadable shard ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
