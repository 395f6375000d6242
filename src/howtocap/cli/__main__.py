"""``python -m howtocap.cli`` (and ``torchrun --nproc_per_node N -m howtocap.cli train ...``)."""

from howtocap.cli import app

app()
