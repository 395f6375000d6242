"""Step ``shots``: where a video cuts from one shot to the next (``shots.parquet``), so a
caption's window and an exported clip can stay inside one shot."""
