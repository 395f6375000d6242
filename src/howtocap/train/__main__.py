"""``python -m howtocap.train`` (and ``torchrun ... -m howtocap.train``)."""

from howtocap.train.cli import main

main()
