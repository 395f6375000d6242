"""The frame cache's defaults (``cache.frame_embeddings``, the frames and duplicates steps and
their commands), in a leaf module: ``--help`` reads them without loading the cache, and the
cache without the encoders' factory."""

ENCODER = "default"  # the bundled encoder: every command's and function's default
FPS = 1.0  # frames embedded per second of video
FRAME_BATCH = 32  # frames per encoder batch
