"""Step ``shots``: where a video cuts from one shot to the next (``DIR/shots/``), so a
caption's window and an exported clip can stay inside one shot."""
