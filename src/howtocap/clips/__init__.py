"""Clips: a run's kept captions as video clips in WebDataset shards (``howtocap export --format
clips``, video2dataset's layout). Importing this package loads no video library."""
