"""Stages (pure per-video functions) and the runner that orchestrates them."""
