"""The engine: runs any stage over many videos and keeps the run directory; names no step.

``stage`` (the contract every step's stage follows), ``fingerprint`` (what produced a row),
``rundir`` (the run directory's layout: videos numbered once, each table a file per shard;
beneath it ``records``: status records, ``claims``: who works on which shard), ``graph``
(the stage graph derived from what stages read and write), ``core`` (a shard at a time:
resume, claims, chunked commits),
``runners`` (where a stage runs), ``status`` (``howtocap status``). Steps import the engine,
never the other way round.
"""
