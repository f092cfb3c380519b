"""Conformance checks, one module per concern (group).

Each module has `run_fixtures(env)`, the checks on synthetic fixtures, and `run_model(env, model)`, the
checks on one locked real model; a group runs the fixtures first, then every locked model (the default
one first). The checks of a model carry its name (`split-3/gemma3`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from dgr.contracts import Check, Group
from dgr.verify.checks import boundary, kv, ownership
from dgr.verify.models.env import Env, RealModel

Runner = tuple[Callable[[Env], list[Check]], Callable[[Env, RealModel], list[Check]]]
RUNNERS: dict[Group, Runner] = {
    "ownership": (ownership.run_fixtures, ownership.run_model),
    "boundary": (boundary.run_fixtures, boundary.run_model),
    "kv": (kv.run_fixtures, kv.run_model),
}
"""The conformance groups (every group but the native tests, which CTest runs: dgr.verify.checks.native)."""

FIXTURES = "fixtures"
"""The name of the part of a group that runs on the synthetic fixtures."""


def parts(group: Group, env: Env) -> list[tuple[str, Callable[[], list[Check]]]]:
    """The checks of one conformance group in the order they run, as (part, run) pairs: `fixtures`, then
    the name of every locked model; each run returns its part's checks (so that a caller can time them)."""
    runner = RUNNERS.get(group)
    if runner is None:
        raise ValueError(f"{group!r} is not a conformance group ({', '.join(RUNNERS)})")
    fixtures, per_model = runner
    out: list[tuple[str, Callable[[], list[Check]]]] = [(FIXTURES, partial(fixtures, env))]
    return out + [(m.name, partial(per_model, env, m)) for m in env.models]


def run(group: Group, env: Env) -> list[Check]:
    """Every check of one conformance group against `env`."""
    return [check for _, part in parts(group, env) for check in part()]
