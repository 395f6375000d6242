"""Reports over a run directory: dataset statistics (stats); the align report is the align
step's (``align.report``)."""

# Defaults of `howtocap stats`, here so the CLI reads them without loading pandas/spaCy.
DEFAULT_VIDEOS = 5_000  # the paper's sample: 5,000 random videos
DEFAULT_SEED = 0
DEFAULT_WORKERS = 1  # spaCy processes
