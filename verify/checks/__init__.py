"""Conformance checks, one module per concern (group)."""

from __future__ import annotations

from dgr.verify.checks import boundary, kv, ownership
from dgr.verify.env import Env
from dgr.verify.report import Check

RUNNERS = {"ownership": ownership.run, "boundary": boundary.run, "kv": kv.run}
"""The conformance groups, in the order they run."""


def run(group: str, env: Env) -> list[Check]:
    """Every check of one conformance group against `env`."""
    return RUNNERS[group](env)
