"""Which instant stands for a time window. One rule for every picture of a window: the clip
export's ``.jpg`` and the search page's thumbnails (``serve``) both show the frame at
``window_middle``. A window's start is the wrong picture: after alignment it is where the step
before it ends, so a thumbnail taken there shows the previous step."""

from __future__ import annotations


def window_middle(start: float, end: float, duration: float = 0.0) -> float:
    """The middle of ``[start, end]``, with ``end`` cut to the video's ``duration`` when known
    (> 0): a window running past the end is shown by the middle of what exists of it."""
    if duration > 0:
        end = min(end, duration)
        start = min(start, end)
    return start + (max(end, start) - start) / 2
