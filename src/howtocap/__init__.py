"""howtocap: narrated instructional videos -> video-aligned captions and retrieval models."""

import os
import sys

# Arrow's allocator, read when pyarrow loads (a value the user set is kept). jemalloc where
# the Linux x86-64 wheels have it: mimalloc gave freed pages back within 10 ms (below) and
# took them again at once, ~20 page faults a video on a text-only run (10% of the driver's
# CPU); jemalloc faulted half as often and peaked lower (the driver, the merges of 1.2M
# videos and align's 100k-video run, each measured with both when it was chosen).
if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
# mimalloc 3 (Arrow's pool elsewhere) keeps freed pages for a second before it gives them
# back, so a long streamed merge holds what it freed: 100k videos' scores merged peaked at
# 350 MB, 250 MB with 10 ms.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10")

__version__ = "0.2.0"
