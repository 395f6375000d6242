"""The engine: runs any stage over many videos and keeps the run directory; names no step.

``stage`` (the contract every step's stage follows), ``fingerprint`` (what produced a row),
``rundir`` (the run directory's layout; beneath it ``records``: status records and the
per-stage index, ``merge``: the merged tables, ``claims``: who holds which videos), ``graph``
(the stage graph derived from what stages read and write), ``core`` (resume, claims, commit),
``runners`` (where a stage runs), ``status`` (``howtocap status``). Steps import the engine,
never the other way round.
"""
