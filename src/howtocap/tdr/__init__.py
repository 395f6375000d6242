"""Temporal description retrieval (Jung et al. 2023): for every sampled frame of an instructional
video, retrieve the script sentence that describes its step, to repair key-object degeneracy
("now put it in") in dense video captioning. See docs/tdr.md."""
