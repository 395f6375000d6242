"""Clips: a run's kept captions as video clips in WebDataset shards (``howtocap export
--format clips``): ``<key>.mp4`` (the window cut from the video), ``.json``, ``.txt`` and
``.jpg`` (the window's middle frame), a Parquet table per shard and an index of all of them,
the layout video2dataset writes. Importing this package loads no video library."""
