"""Video labels from image captioners (Ventura et al., "Learning text-to-video retrieval from
image captioning"): caption M frames of each video with every captioner, score each caption
against its frame with CLIPScore, and keep the K best per captioner. Training then draws one
kept caption per video per epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from howtocap.encoders.base import Encoder, pick_device
from howtocap.errors import HowtocapError, InputError
from howtocap.framecaps.config import FrameCapsConfig
from howtocap.io.inputs import VideoItem
from howtocap.schemas import conform


class Captioner(Protocol):
    """Anything that writes one caption per frame."""

    name: str

    def caption(self, frames: np.ndarray) -> list[str]: ...


class ClassifierCaptioner:
    """The embedded default: "a photo of a <top ImageNet class>" (EfficientNet-Lite0). It names
    objects, never actions: it keeps the pipeline runnable offline; ``hf:<id>`` for BLIP/GIT."""

    name = "default"

    def __init__(self, device: str | torch.device | None = None) -> None:
        from howtocap.encoders.embedded import EmbeddedEncoder

        self.encoder = EmbeddedEncoder(device=device)

    def caption(self, frames: np.ndarray) -> list[str]:
        out = []
        for top in self.encoder.top_classes(frames, k=2):
            (first, p1), (second, p2) = top[0], top[1]
            text = f"a photo of a {first}"
            out.append(text + f" and a {second}" if p2 >= 0.5 * p1 else text)
        return out


class HFCaptioner:
    """A Hugging Face image-to-text model (BLIP, GIT, …) by hub id or local folder."""

    def __init__(self, source: str, *, device: str | torch.device | None = None) -> None:
        import transformers as tf

        self.name = f"hf:{source}"
        self.device = pick_device(device)
        try:
            self.processor = tf.AutoProcessor.from_pretrained(source)
            auto = getattr(tf, "AutoModelForImageTextToText", None) or tf.AutoModelForVision2Seq
            try:
                model = auto.from_pretrained(source)
            except ValueError:  # BLIP captioning is not registered with the auto class
                cfg = tf.AutoConfig.from_pretrained(source)
                arch = getattr(tf, (cfg.architectures or ["BlipForConditionalGeneration"])[0])
                model = arch.from_pretrained(source)
        except OSError as exc:
            raise HowtocapError(f"image captioner '{source}' could not be loaded: "
                                f"{str(exc).splitlines()[0]}") from None
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def caption(self, frames: np.ndarray) -> list[str]:
        inputs = self.processor(images=list(frames), return_tensors="pt")
        ids = self.model.generate(**{k: v.to(self.device) for k, v in inputs.items()},
                                  max_new_tokens=30, num_beams=1, do_sample=False)
        return [" ".join(t.split())
                for t in self.processor.batch_decode(ids, skip_special_tokens=True)]


def create_captioner(name: str = "default", *, device: str | None = None) -> Captioner:
    """``default`` (embedded classifier captions) or ``hf:<id|folder>``."""
    if name in ("default", "embedded"):
        return ClassifierCaptioner(device=device)
    if name.startswith("hf:") and len(name) > 3:
        return HFCaptioner(name[3:], device=device)
    raise HowtocapError(f"unknown image captioner '{name}'; choose one of: default, "
                        "hf:<id|folder> (e.g. hf:Salesforce/blip-image-captioning-base)")


def clipscore(image_emb: np.ndarray, text_emb: np.ndarray, weight: float = 2.5) -> np.ndarray:
    """Row-wise CLIPScore of L2-normalised pairs."""
    return weight * np.clip(np.sum(image_emb * text_emb, axis=1), 0.0, None)


def select_captions(video_id: str, duration: float, times: np.ndarray,
                    captions: dict[str, list[str]], frame_emb: np.ndarray,
                    text_emb: dict[str, np.ndarray], cfg: FrameCapsConfig) -> pd.DataFrame:
    """Score every (frame, caption) pair and mark the top K distinct captions per captioner."""
    rows = []
    for name, texts in captions.items():
        scores = clipscore(frame_emb, text_emb[name], cfg.clipscore_weight)
        kept_texts: set[str] = set()
        keep = np.zeros(len(texts), bool)
        for i in np.argsort(-scores, kind="stable"):
            if len(kept_texts) == cfg.top_k:
                break
            if texts[i] and texts[i].lower() not in kept_texts:
                kept_texts.add(texts[i].lower())
                keep[i] = True
        rows += [{"video_id": video_id, "start": 0.0, "end": float(duration), "text": t,
                  "captioner": name, "frame_time": float(tt), "clipscore": float(s),
                  "kept": bool(k)} for t, tt, s, k in zip(texts, times, scores, keep, strict=True)]
    return conform(pd.DataFrame(rows), "framecaps")


def framecaps_video(item: VideoItem, captioners: Sequence[Captioner], scorer: Encoder,
                    cfg: FrameCapsConfig) -> pd.DataFrame:
    """One video: sample M frames, caption them with each captioner, keep the best K each."""
    from howtocap.io.video import probe, sample_frames, segment_times

    path = item.video_file()
    info = probe(path)
    times = segment_times(0.0, info.duration, cfg.frames)  # segment centres
    frames = sample_frames(path, times, size=max(scorer.image_size, 224))
    if len(frames) == 0:
        raise InputError(path, "no frame could be decoded")
    frame_emb = scorer.encode_images(frames)
    captions = {c.name: c.caption(frames) for c in captioners}
    text_emb = {n: scorer.encode_texts(t) for n, t in captions.items()}
    return select_captions(item.video_id, info.duration, times, captions, frame_emb, text_emb,
                           cfg)
