"""The composition above the steps: ``run`` (every step in order) and ``status``."""
