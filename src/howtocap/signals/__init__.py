"""Step ``signals``: what each shot of a video looks like (``DIR/signals/``), so junk (slides,
a talking head, a black screen, a blur) can be told apart before anything trains on it."""
