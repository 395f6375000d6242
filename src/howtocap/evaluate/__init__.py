"""Text-video retrieval evaluation: benchmark readers (``benchmarks``), clip embeddings
(``embed``), ``evaluate`` (``run``) and CrossTask (``crosstask``). Import from the submodule
that defines a name: most need torch or the video decoder."""

# `howtocap eval`'s defaults, here so the CLI reads them without loading torch or a decoder.
N_FRAMES = 12  # frames sampled per clip; the clip embedding is their mean
TIES = "pessimistic"  # as ``howtocap.metrics``: constant scores never get a lucky rank
YOUCOOK2_SUBSET = "validation"  # the standard text-to-video test
CROSSTASK_SPLIT = "val"  # videos_val.csv, the test set
CROSSTASK_INFERENCE = "dp"  # the paper's
