"""Memory given back to the system between the phases of a long run."""

from __future__ import annotations


def give_back_memory(collect: bool = True) -> None:
    """Return freed memory that glibc's heap and Arrow's allocator would otherwise keep (the
    next phase's peak adds to it: ~50 MB at 100k videos). ``collect=False``: no full cycle
    collection (it walks every live object) for transients that die by reference count."""
    import contextlib
    import ctypes
    import gc

    import pyarrow as pa

    if collect:
        gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
