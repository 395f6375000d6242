"""howtocap: narrated instructional videos -> video-aligned captions and retrieval models."""

import os
import sys

# Arrow's allocator, read when pyarrow loads (a value the user set is kept). jemalloc where
# the Linux x86-64 wheels have it: mimalloc gave freed pages back at once (below) and took
# them again at once, page faults a sizeable share of the driver's CPU on a text-only run;
# jemalloc faulted less and peaked lower (the driver, the merges of a million videos and
# align's large runs, each measured with both when it was chosen).
if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
# mimalloc 3 (Arrow's pool elsewhere) keeps freed pages for a second before it gives them
# back, so a long streamed merge holds what it freed (a large align merge peaked clearly
# lower with the delay below).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10")

__version__ = "0.2.0"
