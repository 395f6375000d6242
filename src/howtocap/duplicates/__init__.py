"""The ``duplicates`` step: near-duplicate videos and repeated clips of a run, from the frame
cache (``match``: the maths; ``run``: ``howtocap duplicates DIR``)."""
