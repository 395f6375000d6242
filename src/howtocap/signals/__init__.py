"""Step ``signals``: what each shot (or fixed window) of a video looks like — motion, static,
text and face area, brightness, sharpness — in ``DIR/signals/``, so junk (slides, a talking
head, a black screen, a blurred frame) can be told apart before anything trains on it."""
