"""howtocap: narrated instructional videos -> video-aligned captions and retrieval models."""

import os

# Arrow's allocator (mimalloc 3) keeps freed pages for a second before it gives them back, so a
# long streamed merge holds what it freed: 100k videos' scores merged peaked at 350 MB, 250 MB
# with 10 ms. Read when pyarrow loads; a value the user set is kept.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10")

__version__ = "0.1.0"
