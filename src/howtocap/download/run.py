"""``howtocap download`` (and ``run``'s first stage when an input is remote): every remote
input into ``DIR/cache/media``, then the same videos with local paths for later stages."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from howtocap.download.config import DownloadConfig
from howtocap.download.stage import DownloadStage
from howtocap.engine.core import (
    MAX_ATTEMPTS,
    Shard,
    StageSummary,
    prepare_stages,
    run_stage,
)
from howtocap.engine.options import BatchConfig
from howtocap.engine.rundir import RunDir
from howtocap.engine.runners import Runner
from howtocap.errors import HowtocapError
from howtocap.io.inputs import VideoItem, resolve_videos

TABLE = "downloads"


def media_dir(rundir: RunDir) -> Path:
    """Absolute: later stages and the ``downloads`` table name files from anywhere."""
    return (rundir.cache_dir / "media").resolve()


def download_run(inputs: Sequence[str | Path | VideoItem], out: str | Path,
                 config: DownloadConfig | None = None, *, runner: Runner | None = None,
                 progress: bool = True, shard: Shard | None = None, redo: bool = False,
                 retry_failed: bool = False, max_attempts: int = MAX_ATTEMPTS,
                 refetch_missing: bool = True, batching: BatchConfig | None = None
                 ) -> tuple[list[VideoItem], StageSummary]:
    """Download every remote input (of this ``shard``); returns the inputs as later stages see
    them (``local_items``) and the summary. ``refetch_missing``: a done download whose file is
    gone is fetched again (``run`` turns it off when it deletes media)."""
    config = config or DownloadConfig()
    items = resolve_videos(inputs)
    rundir = RunDir(out, shard_size=batching.shard_size if batching is not None else None)
    stage = DownloadStage(config, media_dir(rundir))
    cid = prepare_stages(rundir, [stage], redo=redo)[stage.name]
    remote = [it for it in items if it.remote]
    need_backends(remote)
    from howtocap.download.fetch import sweep_media

    sweep_media(media_dir(rundir))
    # storage options can hold credentials: never written to the run directory
    rundir.configs.write(stage.name, config.model_dump(exclude={"storage_options"}))
    if refetch_missing and rundir.has_table(TABLE):
        gone = [vid for vid, row in _rows(rundir).items()
                if row["video_path"] and not Path(row["video_path"]).exists()]
        if gone:
            rundir.forget(stage.name, gone)
    summary = run_stage(rundir, remote, stage, runner=runner, progress=progress, shard=shard,
                        retry_failed=retry_failed, max_attempts=max_attempts, cid=cid,
                        batching=batching)
    return local_items(rundir, items), summary


BACKENDS = {"s3": ("s3fs", "s3://"), "gs": ("gcsfs", "gs://"), "gcs": ("gcsfs", "gs://")}


def need_backends(items: Iterable[VideoItem]) -> None:
    """One line before any work when a URL's file system is not installed (not one failed
    video per URL)."""
    schemes = {urlsplit(u).scheme.lower() for it in items
               for u in (it.video_url, it.subtitle_url) if "://" in u}
    for scheme in sorted(schemes & set(BACKENDS)):
        module, prefix = BACKENDS[scheme]
        if importlib.util.find_spec(module) is None:
            raise HowtocapError(f"{prefix} inputs need {module}: pip install "
                                f"'howtocap[download]'")


def _rows(rundir: RunDir) -> dict[str, dict[str, str]]:
    df = rundir.table(TABLE, ["video_id", "video_path", "subtitle_path"])
    return {str(r.video_id): {"video_path": str(r.video_path),
                              "subtitle_path": str(r.subtitle_path)}
            for r in df.itertuples()}


def local_items(rundir: RunDir, items: Iterable[VideoItem]) -> list[VideoItem]:
    """``items`` with each remote one's local files (from the ``downloads`` table); a remote
    one whose download is not done is left out (its failure is the download stage's)."""
    rows = _rows(rundir)
    items = list(items)
    done = rundir.done(DownloadStage.name, [it.video_id for it in items], TABLE)
    out: list[VideoItem] = []
    for it, ok in zip(items, done, strict=True):
        row = rows.get(it.video_id)
        if not it.remote:
            out.append(it)
        elif row is not None and ok:
            out.append(VideoItem(it.video_id,
                                 Path(row["video_path"]) if row["video_path"] else it.video_path,
                                 Path(row["subtitle_path"]) if row["subtitle_path"]
                                 else it.subtitle_path))
    return out


def drop_media(rundir: RunDir, video_ids: Iterable[str]) -> int:
    """``--keep-media false``: delete these videos' downloaded files (only files inside the
    media cache; subtitles stay, they are small). Returns how many went."""
    rows = _rows(rundir)
    media = media_dir(rundir)
    n = 0
    for vid in video_ids:
        path = Path(rows.get(vid, {}).get("video_path") or "")
        if path.name and path.resolve().parent == media and path.exists():
            path.unlink()
            n += 1
    return n
