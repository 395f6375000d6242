"""The download stage: one video's remote inputs into the media cache, a row of ``downloads``.
Downloads wait on the network, so a worker runs many at a time (threads, ``--workers``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from howtocap.atomic import atomic_write_text
from howtocap.download.config import DownloadConfig
from howtocap.engine.stage import BaseStage, Resources, StageOutput, VideoInput
from howtocap.errors import HowtocapError
from howtocap.hashing import safe_name


class DownloadStage(BaseStage):
    name = "download"
    reads = ()
    writes = ("downloads",)
    resources = Resources(kind="io", threads=8)

    def __init__(self, config: DownloadConfig, media_dir: Path) -> None:
        self.config = config
        self.media_dir = Path(media_dir)
        self.resources = Resources(kind="io", threads=config.workers)

    def fingerprint(self) -> dict[str, Any]:
        """What changes the files: format, height, audio, size limit, subtitle languages
        (not workers, timeouts or retries)."""
        return {**super().fingerprint(), **self.config.fingerprint()}

    def process(self, video: VideoInput) -> StageOutput:
        import pandas as pd

        from howtocap.download.fetch import failure, fetch_file, fetch_ytdlp, uses_ytdlp

        item, cfg = video.item, self.config
        stem = self.media_dir / safe_name(item.video_id)
        marker = stem.with_name(stem.name + MARKER)
        if (row := _finished(marker, item, cfg)) is not None:  # whole, not yet committed
            return StageOutput({"downloads": pd.DataFrame([row])},
                               metrics={"bytes": 0.0, "reused": 1.0})
        warnings: list[str] = []
        row: dict[str, Any] = {"video_id": item.video_id, "url": item.video_url,
                               "video_path": str(item.video_path or ""), "bytes": 0,
                               "subtitle_url": item.subtitle_url,
                               "subtitle_path": str(item.subtitle_path or ""), "method": ""}
        if item.video_url:
            if uses_ytdlp(item.video_url):
                got = fetch_ytdlp(item.video_url, stem, cfg)
                row.update(video_path=str(got.path), bytes=got.bytes, method="yt-dlp")
                if got.subtitle is not None and not item.subtitle_url:
                    row["subtitle_path"] = str(got.subtitle)
            else:
                ext = Path(item.video_url.split("?")[0]).suffix.lower() or ".mp4"
                dest = stem.with_name(stem.name + ext)
                row.update(video_path=str(dest), method="fsspec",
                           bytes=fetch_file(item.video_url, dest, cfg, video=True))
        if item.subtitle_url:
            ext = Path(item.subtitle_url.split("?")[0]).suffix.lower()
            dest = stem.with_name(stem.name + (ext if ext in (".vtt", ".srt") else ".vtt"))
            try:
                fetch_file(item.subtitle_url, dest, cfg, video=False)
                row["subtitle_path"] = str(dest)
            except HowtocapError as exc:  # the video is fine: say so, go on
                warnings.append(f"subtitle not fetched ({exc}); the subtitles stage goes by "
                                f"--asr")
        if not row["video_path"]:
            raise failure("not found", f"{item.video_id}: no video file or URL")
        atomic_write_text(marker, json.dumps({**row, "settings": cfg.fingerprint()}))
        return StageOutput({"downloads": pd.DataFrame([row])}, warnings,
                           metrics={"bytes": float(row["bytes"])})


# Beside each finished download: its row and settings. A run killed after a file was whole
# but before its batch was committed finds it here and does not fetch it again.
MARKER = ".download.json"


def _finished(marker: Path, item: Any, cfg: DownloadConfig) -> dict[str, Any] | None:
    """The row of a finished download of the same URLs with the same settings whose files
    are all still there, else None."""
    try:
        done = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if (done.get("url"), done.get("subtitle_url"), done.get("settings")) != (
            item.video_url, item.subtitle_url, cfg.fingerprint()):
        return None
    files = [done.get("video_path"), done.get("subtitle_path") if item.subtitle_url else ""]
    if not all(Path(f).is_file() for f in files if f) or (
            item.video_url and Path(done["video_path"]).stat().st_size != done.get("bytes")):
        return None
    done.pop("settings")
    return done
