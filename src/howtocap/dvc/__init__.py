"""Dense video captioning evaluation (``howtocap dvc-eval``): the ActivityNet Captions protocol
with the COCO caption metrics, on YouCook2 or ActivityNet Captions ground truth."""

from howtocap.dvc.data import load_ground_truth, load_predictions
from howtocap.dvc.evaluate import DEFAULT_TIOUS, caption_pairs, detection, evaluate, tiou

__all__ = ["DEFAULT_TIOUS", "caption_pairs", "detection", "evaluate", "load_ground_truth",
           "load_predictions", "tiou"]
