"""Text-video retrieval evaluation: metrics (``metrics``), benchmark readers (``benchmarks``),
clip embeddings (``embed``), ``evaluate`` (``run``) and CrossTask (``crosstask``).

Import from the submodule that defines a name: the metrics need torch, ``evaluate`` the video
decoder, and training imports the metrics alone.
"""
