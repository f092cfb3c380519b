"""Conformance checks, one module per concern."""
