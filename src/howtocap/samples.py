"""Small narrated "instructional" videos whose ground truth we know exactly, for tests,
benchmarks and ``make demo`` (no real one can be downloaded here): each step shows a real
photograph with a slow zoom and pan while espeak-ng speaks a how-to sentence about it. We place
every sentence, so the true narration and step times are known: alignment and ASR are measured."""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from howtocap.bundled import package_dir
from howtocap.errors import HowtocapError

if TYPE_CHECKING:
    import pandas as pd

# (scikit-image photograph, what the narrator says, a short reference caption of the action)
DEFAULT_STEPS: list[tuple[str, str, str]] = [
    ("coffee", "Now I'm going to pour the hot coffee into the cup, nice and slowly.",
     "pour coffee into a cup"),
    ("chelsea", "Next, take the brush and gently comb the cat from head to tail.",
     "brush the cat's fur"),
    ("rocket", "Then we wait for the countdown and launch the rocket from the pad.",
     "launch the rocket"),
    ("astronaut", "Okay, so put on the space suit and check the helmet seal.",
     "put on the space suit"),
    ("camera", "Now set the camera on the tripod and take the photo.",
     "take a photo with the camera"),
    ("motorcycle_left", "After that, park the motorcycle and check both of the tires.",
     "check the motorcycle tires"),
    ("coins", "Alright, now count the coins and sort them into small piles.",
     "count and sort the coins"),
    ("moon", "Now point your telescope at the moon and adjust the focus.",
     "look at the moon through a telescope"),
    ("brick", "Next, lay the bricks in a straight row with a little mortar.",
     "lay bricks in a row"),
    ("page", "Finally, read the instructions on the page one more time.",
     "read the instructions on the page"),
    ("horse", "So now lead the horse out of the stable and into the field.",
     "lead the horse into the field"),
    ("retina", "Look closely at the picture of the eye and find the blood vessels.",
     "examine the eye image"),
]

# Channel chatter, labelled: the narrator talks to the camera (matplotlib's sample portrait)
# about the channel, not the task. ``make_fixture_set(chatter=K)`` adds K such segments per
# video (intro first, outro next, the rest between steps); they are ``kind="chatter"`` in
# ``ground_truth``. Captions a small LLM might let through, some with no regex-able keyword.
CHATTER_IMAGE = "presenter"
CHATTER_LINES: list[tuple[str, str]] = [
    ("Hey everyone, welcome back to my channel, it's so good to see you.",
     "Welcome back to the channel."),
    ("Don't forget to like and subscribe so you never miss a new upload.",
     "Don't forget to like and subscribe."),
    ("Today's video is sponsored by my good friends over at the hardware store.",
     "Thank the sponsor of the video."),
    ("If you have any questions, just leave them in the comments down below.",
     "Leave your questions in the comments."),
    ("Thank you so much for watching, and I will see you all next time.",
     "Thanks for watching, see you next time."),
    ("Honestly, my whole family has loved this one for years and years.",
     "My family has loved this for years."),
    ("Before we start, let me tell you a little bit about my week.",
     "Talk about my week before starting."),
    ("I really hope you enjoyed this one as much as I did making it.",
     "I hope you enjoyed this one."),
]

# Spoken filler and meta-talk, labelled: the narrator pauses over the work (the step's photo
# stays on screen) and says something no frame shows. ``make_fixture_set(fillers=K)`` inserts
# K such segments per video after random steps; they are ``kind="filler"`` in ``ground_truth``.
# Captions a small LLM turns them into pass the chatter patterns and the visual filter alike
# (the frames still show the task), which is what ``caption.filler`` is for.
FILLER_LINES: list[tuple[str, str]] = [
    ("So yeah, let's see, okay.", "So yeah, let's see."),
    ("Okay, hang on a second, hang on.", "Hang on a second."),
    ("Let me know what you think of this one, honestly.", "Let me know what you think."),
    ("Take your time with this, there is no rush at all.", "Take your time."),
    ("Alright, I think that's pretty much it for this part.", "That's it for this part."),
    ("Oh boy, okay, here we go again.", "Here we go."),
    ("Just give it a minute or two, be patient.", "Give it a minute."),
    ("Hmm, okay, where was I, oh right.", "Where was I?"),
    ("This part is always my favourite, I have to say.", "This is my favourite part."),
    ("Okay cool, let's keep going then.", "Let's keep going."),
]

SAMPLE_RATE = 22050  # espeak-ng's native rate; the muxer keeps it
_MIN_GAP = 0.15  # seconds of silence kept between consecutive narrations


@dataclass
class Step:
    """One visual step; ``narration_start/end`` are the true spoken times (seconds)."""

    image: str
    start: float
    end: float
    narration: str
    caption: str
    narration_start: float = 0.0
    narration_end: float = 0.0
    kind: str = "step"  # "chatter": talk about the channel over the presenter's portrait;
    # "filler": talk that shows nothing, over the step's photo (``FILLER_LINES``)


@dataclass
class SampleVideo:
    video_id: str
    video_path: Path
    subtitle_path: Path | None
    steps: list[Step] = field(default_factory=list)
    duration: float = 0.0


def _image_dir() -> Path:
    if (pkg := package_dir("skimage")) is None:
        raise HowtocapError("sample videos need the photographs in scikit-image: "
                            "pip install scikit-image")
    return pkg / "data"


def _load_image(name: str, size: int, photos: Mapping[str, str | Path] | None = None
                ) -> np.ndarray:
    """The photograph as RGB, resized to cover a square a bit larger than the frame (for pan).
    ``photos`` (name -> image file, e.g. ``howtocap.photos.packaged_photos()``) is looked up
    before scikit-image's own photographs."""
    from PIL import Image

    d = _image_dir()
    if photos and name in photos:
        d, name = Path(photos[name]).parent, Path(photos[name]).stem
    elif name == CHATTER_IMAGE:  # a portrait: the only person photo that ships in a package
        import matplotlib

        d, name = Path(matplotlib.get_data_path()) / "sample_data", "grace_hopper"
    for ext in (".png", ".jpg", ".jpeg"):
        if (d / f"{name}{ext}").exists():
            img = Image.open(d / f"{name}{ext}").convert("RGB")
            break
    else:
        names = sorted(p.stem for p in _image_dir().iterdir() if p.suffix in (".png", ".jpg"))
        raise HowtocapError(f"no photograph named {name!r}; choose from {', '.join(names)}")
    big = int(round(size * 1.25))
    w, h = img.size
    scale = big / min(w, h)
    img = img.resize((max(big, round(w * scale)), max(big, round(h * scale))),
                     Image.Resampling.BILINEAR)
    w, h = img.size
    left, top = (w - big) // 2, (h - big) // 2
    return np.asarray(img.crop((left, top, left + big, top + big)))


def _step_frames(photo: np.ndarray, n: int, size: int, rng: random.Random) -> list[bytes]:
    """``n`` frames of a slow zoom-in with a pan, so consecutive frames really differ."""
    from PIL import Image

    img = Image.fromarray(photo)
    big = photo.shape[0]
    dx, dy = rng.choice([-1, 1]), rng.choice([-1, 1])
    frames = []
    for i in range(n):
        t = i / max(n - 1, 1)
        crop = big - (big - size) * (0.2 + 0.8 * t)  # from ~1.2x frame size to frame size
        slack = big - crop
        cx = slack / 2 + dx * (t - 0.5) * slack * 0.8
        cy = slack / 2 + dy * (t - 0.5) * slack * 0.8
        box = (cx, cy, cx + crop, cy + crop)
        frames.append(img.resize((size, size), Image.Resampling.BILINEAR, box=box).tobytes())
    return frames


def _speak(text: str, wpm: int, tmp: Path) -> np.ndarray:
    """espeak-ng speech as int16 samples at ``SAMPLE_RATE``, leading/trailing silence trimmed."""
    if shutil.which("espeak-ng") is None:
        raise HowtocapError("narration needs espeak-ng: apt-get install espeak-ng "
                            "(or pass audio=False)")
    out = tmp / "say.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", str(wpm), "-w", str(out), text],
                   check=True, capture_output=True)
    with wave.open(str(out)) as w:
        if w.getframerate() != SAMPLE_RATE or w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise HowtocapError(f"espeak-ng produced an unexpected WAV format ({out})")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 300)
    return pcm[loud[0]:loud[-1] + 1] if len(loud) else pcm[:0]


def _fit_speech(text: str, max_seconds: float, tmp: Path) -> np.ndarray:
    """Speak at a natural rate, faster only if the sentence would overrun its step."""
    wpm = 165
    pcm = _speak(text, wpm, tmp)
    for _ in range(3):
        dur = len(pcm) / SAMPLE_RATE
        if dur <= max_seconds or wpm >= 400:
            break
        wpm = min(400, int(wpm * dur / max_seconds * 1.05) + 1)
        pcm = _speak(text, wpm, tmp)
    return pcm[: int(max_seconds * SAMPLE_RATE)]


def _fmt_time(t: float, sep: str) -> str:
    ms = int(round(t * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def write_subtitles(path: Path, cues: list[tuple[float, float, str]], fmt: str) -> None:
    """Write ``(start, end, text)`` cues as WebVTT (``fmt="vtt"``) or SRT."""
    if fmt not in ("vtt", "srt"):
        raise HowtocapError(f"subtitles must be 'vtt', 'srt' or None, not {fmt!r}")
    sep, lines = (".", ["WEBVTT", ""]) if fmt == "vtt" else (",", [])
    for i, (s, e, text) in enumerate(cues, start=1):
        lines += ([] if fmt == "vtt" else [str(i)]) + [
            f"{_fmt_time(s, sep)} --> {_fmt_time(e, sep)}", text, ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _place_narrations(steps: list[Step], speech: list[np.ndarray] | None, lead: float,
                      duration: float) -> np.ndarray:
    """Mix each sentence into one track at step start + lead, never overlapping its neighbours.
    Without ``speech`` (no audio) there is none to measure: ~2.6 words/s inside each step."""
    track = np.zeros(int(round(duration * SAMPLE_RATE)), dtype=np.int16)
    free_from = 0.0
    for k, step in enumerate(steps):
        dur = (len(speech[k]) / SAMPLE_RATE if speech is not None
               else min(len(step.narration.split()) / 2.6, step.end - step.start - 0.3))
        start = min(max(step.start + lead, free_from, 0.0), max(duration - dur, 0.0))
        if speech is None:
            step.narration_start, step.narration_end = round(start, 3), round(start + dur, 3)
        else:
            i = int(round(start * SAMPLE_RATE))
            chunk = speech[k][: len(track) - i]
            track[i:i + len(chunk)] = chunk
            step.narration_start = round(i / SAMPLE_RATE, 3)
            step.narration_end = round((i + len(chunk)) / SAMPLE_RATE, 3)
        free_from = step.narration_end + _MIN_GAP
    return track


def make_narrated_video(out_dir: Path, video_id: str,
                        steps: list[tuple[str, str, str]] | None = None,
                        *, seconds_per_step: float = 6.0, fps: int = 10, size: int = 224,
                        audio: bool = True, subtitles: str | None = "vtt",
                        narration_lead: float = 0.0, seed: int = 0,
                        photos: Mapping[str, str | Path] | None = None) -> SampleVideo:
    """Write ``<out_dir>/<video_id>.mp4`` (H.264 + AAC) and, if asked, a sidecar subtitle file.
    ``narration_lead`` shifts every sentence relative to its step (negative: the narrator talks
    about a step before it is shown, as real instructors often do). Sentences longer than a step
    are spoken faster so that the ground truth stays one sentence per step."""
    if shutil.which("ffmpeg") is None:
        raise HowtocapError("sample videos need ffmpeg: apt-get install ffmpeg")
    if seconds_per_step <= 0.5 or fps < 1 or size < 16:
        raise HowtocapError("seconds_per_step must be > 0.5 s, fps >= 1 and size >= 16")
    if subtitles not in (None, "vtt", "srt"):
        raise HowtocapError(f"subtitles must be 'vtt', 'srt' or None, not {subtitles!r}")
    step_specs = list(steps if steps is not None else DEFAULT_STEPS[:5])
    if not step_specs:
        raise HowtocapError("a sample video needs at least one step")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    size -= size % 2  # yuv420p needs even sizes
    frames_per_step = max(1, int(round(seconds_per_step * fps)))
    step_len = frames_per_step / fps
    duration = step_len * len(step_specs)
    plan = [Step(spec[0], round(i * step_len, 3), round((i + 1) * step_len, 3), spec[1],
                 spec[2], kind=str(spec[3]) if len(spec) > 3 else
                 "chatter" if spec[0] == CHATTER_IMAGE else "step")  # type: ignore[misc]
            for i, spec in enumerate(step_specs)]
    rng = random.Random(f"{seed}:{video_id}")
    video_path = out_dir / f"{video_id}.mp4"

    with tempfile.TemporaryDirectory(prefix="howtocap-sample-", dir=out_dir) as tmp_name:
        tmp = Path(tmp_name)
        cmd = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{size}x{size}", "-r", str(fps), "-i", "-"]
        speech = [_fit_speech(s.narration, step_len - 0.4, tmp) for s in plan] if audio else None
        track = _place_narrations(plan, speech, narration_lead, duration)
        if audio:
            wav_path = tmp / "narration.wav"
            with wave.open(str(wav_path), "wb") as w:
                w.setparams((1, 2, SAMPLE_RATE, 0, "NONE", "not compressed"))
                w.writeframes(track.tobytes())
            cmd += ["-i", str(wav_path), "-c:a", "aac", "-b:a", "64k"]
        cmd += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-g", str(fps), "-movflags", "+faststart", "-t", f"{duration:.3f}",
                str(tmp / "out.mp4")]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # ffmpeg died: its stderr says why
            for step in plan:
                photo = _load_image(step.image, size, photos)
                for frame in _step_frames(photo, frames_per_step, size, rng):
                    proc.stdin.write(frame)
            proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.wait() != 0:
            raise HowtocapError(f"ffmpeg failed writing {video_path}: {err.strip()[:300]}")
        (tmp / "out.mp4").replace(video_path)

    sub_path = None
    if subtitles is not None:
        sub_path = out_dir / f"{video_id}.{subtitles}"
        write_subtitles(sub_path, [(s.narration_start, s.narration_end, s.narration)
                                   for s in plan], subtitles)
    return SampleVideo(video_id, video_path, sub_path, plan, round(duration, 3))


def make_fixture_set(out_dir: Path, n_videos: int = 6, seed: int = 0, chatter: int = 0,
                     steps: list[tuple[str, str, str]] | None = None, fillers: int = 0,
                     **kw: object) -> list[SampleVideo]:
    """``n_videos`` videos (``sample_000`` …), each a distinct choice and order of 4-5 of
    ``steps`` [``DEFAULT_STEPS``], plus ``chatter`` and ``fillers`` labelled segments each
    (``photos=``: for photographs outside scikit-image, see ``howtocap.photos``)."""
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    videos = []
    for v in range(n_videos):
        for _ in range(100):
            chosen = rng.sample(steps or DEFAULT_STEPS, rng.choice([4, 5]))
            key = tuple(s[0] for s in chosen)
            if key not in seen:
                break
        seen.add(key)
        if fillers:  # their own generator: the steps and chatter stay as without fillers
            chosen = _with_fillers(chosen, fillers, random.Random(f"{seed}:fillers:{v}"))
        chosen = _with_chatter(chosen, chatter, rng)
        videos.append(make_narrated_video(Path(out_dir), f"sample_{v:03d}", chosen,
                                          seed=seed, **kw))  # type: ignore[arg-type]
    return videos


def _with_chatter(steps: list[tuple[str, str, str]], k: int, rng: random.Random
                  ) -> list[tuple[str, str, str]]:
    """Insert ``k`` chatter segments: an intro, an outro, then at random places in between."""
    out = list(steps)
    lines = rng.sample(CHATTER_LINES, min(k, len(CHATTER_LINES)))
    for i, (narr, cap) in enumerate(lines):
        pos = 0 if i == 0 else len(out) if i == 1 else rng.randint(1, len(out) - 1)
        out.insert(pos, (CHATTER_IMAGE, narr, cap))
    return out


def _with_fillers(steps: list[tuple[str, str, str]], k: int, rng: random.Random
                  ) -> list[tuple[str, ...]]:
    """Insert ``k`` filler segments, each after a random step and over that step's photo."""
    out: list[tuple[str, ...]] = list(steps)
    for narr, cap in rng.sample(FILLER_LINES, min(k, len(FILLER_LINES))):
        pos = rng.randint(1, len(out))
        out.insert(pos, (out[pos - 1][0], narr, cap, "filler"))
    return out


def make_demo_video(out_dir: Path, *, subtitles: str | None = "vtt") -> SampleVideo:
    """The video ``make demo`` runs on: five steps, 30 s, narrated, with a WebVTT sidecar."""
    return make_narrated_video(Path(out_dir), "demo_howto", DEFAULT_STEPS[:5],
                               subtitles=subtitles)


def ground_truth(videos: list[SampleVideo]) -> pd.DataFrame:
    """One row per step: the true visual and spoken times, the narration and its caption."""
    import pandas as pd

    rows = [{"video_id": v.video_id, "step": i, "image": s.image, "start": s.start,
             "end": s.end, "narration_start": s.narration_start,
             "narration_end": s.narration_end, "narration": s.narration, "caption": s.caption,
             "kind": s.kind}
            for v in videos for i, s in enumerate(v.steps)]
    return pd.DataFrame(rows)
