"""Cutting one video's windows into clip files with ffmpeg (a process per clip: the work
happens outside Python, so a thread pool runs several videos at once). Both cuts
(docs/clips.md, "Cutting") write ``-bitexact`` MP4s without the source's metadata, so the
same export run twice gives the same bytes."""

from __future__ import annotations

import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from howtocap.clips.config import ClipsConfig
from howtocap.clips.window import window_middle
from howtocap.errors import HowtocapError, InputError

MIN_SECONDS = 0.05  # a window shorter than this (after cutting to the video) is not a clip
FFMPEG_TIMEOUT = 600.0


def cut_command(src: Path, dst: Path, start: float, end: float, cfg: ClipsConfig,
                has_audio: bool) -> list[str]:
    """The ffmpeg command line that writes the clip ``[start, end]`` of ``src`` to ``dst``."""
    if (exe := shutil.which("ffmpeg")) is None:
        raise HowtocapError("--format clips needs ffmpeg: apt-get install ffmpeg")
    cmd = [exe, "-nostdin", "-y", "-loglevel", "error", "-ss", f"{start:.6f}",
           "-i", str(src), "-t", f"{end - start:.6f}", "-map", "0:v:0"]
    if has_audio:
        cmd += ["-map", "0:a:0"]
    if cfg.cut == "fast":
        # no -avoid_negative_ts: the packets before the window keep negative times, which the
        # MP4 muxer turns into an edit list (playback starts at the window, not the keyframe)
        cmd += ["-c", "copy"]
    else:
        if (side := cfg.max_side) is not None:  # longer side at most this, never up; even sizes
            cmd += ["-vf", f"scale=w='if(gte(iw,ih),min({side},iw),-2)':"
                           f"h='if(gte(iw,ih),-2,min({side},ih))'"]
        cmd += ["-c:v", "libx264", "-preset", cfg.preset, "-crf", str(cfg.crf),
                "-pix_fmt", "yuv420p", "-flags:v", "+bitexact"]
        if has_audio:
            cmd += ["-c:a", "aac", "-b:a", "128k", "-flags:a", "+bitexact"]
    return [*cmd, "-map_metadata", "-1", "-map_chapters", "-1", "-fflags", "+bitexact",
            "-movflags", "+faststart", "-f", "mp4", str(dst)]


def run_ffmpeg(cmd: list[str], src: Path, what: str) -> None:
    try:
        res = subprocess.run(cmd, capture_output=True, timeout=FFMPEG_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise InputError(src, f"ffmpeg took over {FFMPEG_TIMEOUT:.0f} s cutting {what}") \
            from None
    if res.returncode != 0:
        lines = res.stderr.decode(errors="replace").strip().splitlines()
        raise InputError(src, f"ffmpeg could not cut {what} "
                              f"({lines[-1][:200] if lines else f'exit {res.returncode}'})")


def keyframe_before(container: Any, t: float) -> float:
    """Where ``-ss t`` with stream copy starts: the keyframe at or before ``t`` (its time)."""
    stream = container.streams.video[0]
    tb = float(stream.time_base)
    first = stream.start_time * tb if stream.start_time is not None else 0.0
    container.seek(int((t + first) / tb), stream=stream, backward=True, any_frame=False)
    for packet in container.demux(stream):
        if packet.pts is not None:
            return max(float(packet.pts * tb - first), 0.0)
    return 0.0


@dataclass
class ClipJob:
    """One clip of a video to cut: where it goes in its shard and what its JSON records."""

    key: str
    start: float  # the window to cut (cut back to one shot unless --cross-shots)
    end: float
    meta: dict[str, Any]  # video_id, caption(s), scores, config_id, window_start/_end


@dataclass
class ClipFiles:
    job: ClipJob
    mp4: Path
    jpg: bytes
    end: float  # cut to the video's duration
    keyframe: float | None  # fast: where the clip's copied packets start in the video
    duration: float  # the clip file's own duration (its container's)
    middle: float  # the time of the .jpg


def cut_video(video_path: Path, jobs: list[ClipJob], cfg: ClipsConfig, work: Path
              ) -> tuple[list[ClipFiles], dict[str, str]]:
    """Cut every job of one video into ``work/``; the clips and, per key, why a window was left
    out. ``InputError`` (the whole video skipped) when the video or ffmpeg fails."""
    import av

    from howtocap.io.video import frame_at, probe

    info = probe(video_path)
    out: list[ClipFiles] = []
    left_out: dict[str, str] = {}
    try:
        with av.open(str(video_path), metadata_errors="ignore") as container:
            for job in jobs:
                end = min(job.end, info.duration) if info.duration > 0 else job.end
                if end - job.start < MIN_SECONDS:
                    left_out[job.key] = (f"window {job.start:.2f}-{job.end:.2f} s lies outside "
                                         f"the video ({info.duration:.2f} s)")
                    continue
                key_t = None if cfg.cut == "exact" else \
                    round(keyframe_before(container, job.start), 6)
                mp4 = work / f"{job.key}.mp4"
                run_ffmpeg(cut_command(video_path, mp4, job.start, end, cfg, info.has_audio),
                           video_path, f"{job.start:.2f}-{end:.2f} s")
                middle = window_middle(job.start, end, info.duration)
                img = frame_at(video_path, middle)
                if cfg.max_side is not None and max(img.size) > cfg.max_side:
                    img.thumbnail((cfg.max_side, cfg.max_side))
                buf = io.BytesIO()
                img.save(buf, format="JPEG", quality=cfg.jpeg_quality)
                out.append(ClipFiles(job, mp4, buf.getvalue(), end, key_t,
                                     round(probe(mp4).duration, 6), round(middle, 6)))
    except BaseException as exc:
        for c in out:
            c.mp4.unlink(missing_ok=True)
        if isinstance(exc, av.FFmpegError):
            raise InputError(video_path, f"not a readable video file ({exc})") from None
        raise
    return out, left_out
