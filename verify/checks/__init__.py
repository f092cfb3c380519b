"""Conformance checks, one module per concern (group)."""

from __future__ import annotations

from collections.abc import Callable

from dgr.contracts import Check, Group
from dgr.verify.checks import boundary, kv, ownership
from dgr.verify.env import Env

RUNNERS: dict[Group, Callable[[Env], list[Check]]] = {
    "ownership": ownership.run,
    "boundary": boundary.run,
    "kv": kv.run,
}
"""The conformance groups (every group but the native tests, which CTest runs: dgr.verify.native)."""


def run(group: Group, env: Env) -> list[Check]:
    """Every check of one conformance group against `env`."""
    runner = RUNNERS.get(group)
    if runner is None:
        raise ValueError(f"{group!r} is not a conformance group ({', '.join(RUNNERS)})")
    return runner(env)
