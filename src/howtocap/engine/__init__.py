"""The engine: runs any stage over many videos and keeps the run directory; names no step.

Steps import the engine, never the other way round (its modules: docs/architecture.md).
"""
