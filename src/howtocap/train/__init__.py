"""``howtocap train``: fine-tune a dual encoder, or train the HowTo100M baseline, on pairs.

The code is in ``train.api`` (``train``, ``TrainResult``), ``train.loop`` and friends; import
from them (this package's ``__init__`` loads nothing, so importing a submodule stays cheap).
"""
