"""The native tests' run, as the native group leaves it for the next groups (kept apart from both the native
group and the session, so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dgr.contracts.report import Check


@dataclass(frozen=True)
class TestRun:
    checks: list[Check]
    outputs: dict[str, str] = field(default_factory=dict)
    """The output of every test, by name."""
