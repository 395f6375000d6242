"""Reading what users give us (videos, subtitles, manifests) and writing what we export."""

from typing import Literal

# `howtocap export`'s defaults, here so the CLI reads them without loading pandas.
ExportWhat = Literal["auto", "captions", "aligned", "framecaps"]
WHAT: ExportWhat = "auto"  # the first table a run has (``export.AUTO_ORDER``)
CONTENT = "frames"  # webdataset: JPEG frames, or the cached frame "embeddings"
FRAMES_PER_CLIP = 4  # webdataset: frames stored per clip
IMAGE_SIZE = 224  # webdataset: the frames' shorter side
SHARD_SIZE = 1000  # clips per shard: webdataset and clips
JPEG_QUALITY = 90
