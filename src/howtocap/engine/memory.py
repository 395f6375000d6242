"""Memory given back to the system between the phases of a long run."""

from __future__ import annotations


def give_back_memory(collect: bool = True) -> None:
    """Return freed memory to the system between phases: the stages' indexes and the merges
    free hundreds of MB that glibc's heap and Arrow's allocator would otherwise keep, so the
    next phase's peak adds to them (~50 MB at 100k videos). ``collect=False``: no cycle
    collection first, for a phase whose transients are plain lists that die by reference
    count; a full collection walks every live object, the imported modules' too, each call."""
    import contextlib
    import ctypes
    import gc

    import pyarrow as pa

    if collect:
        gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
