"""Verified sources: downloads from PyPI, the upstream repository, the model."""
