"""``howtocap train``: fine-tune a dual encoder, or train the HowTo100M baseline, on pairs.

The code is in ``train.api`` (``train``, ``TrainResult``), ``train.loop`` and friends; names
load on first use, so the CLI importing ``train.cli`` does not pull in torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainConfig", "TrainResult", "train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from howtocap.train import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
