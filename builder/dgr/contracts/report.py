"""The verify report: one `Check` per check of `dgr verify`, the `Report` of a run, the registry of groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from dgr.contracts.fields import (
    literal,
    mapping,
    typed,
)
from dgr.errors import ConfigError

# the registry of verify groups: one line per group, in the order they run; the group `<name>` is the
# module dgr.verify.checks.<name> (its `GROUP`)
Group = Literal[
    "native",
    "series",
    "archs",
    "graph",
    "ownership",
    "boundary",
    "kv",
]
GROUPS: tuple[Group, ...] = get_args(Group)
"""The groups of `dgr verify`, in the order they run; a report usable for export covers all of them."""

Evidence = Literal["native test", "synthetic fixture", "real model"]
NATIVE: Evidence = "native test"
SYNTHETIC: Evidence = "synthetic fixture"
REAL_MODEL: Evidence = "real model"

REPORT_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check of `dgr verify`: what it proves (group, evidence class), its figures, pass or fail."""

    group: Group
    name: str
    evidence: Evidence
    passed: bool
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "name": self.name,
            "evidence": self.evidence,
            "passed": self.passed,
            "figures": dict(self.figures),
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "check") -> Check:
        d = mapping(data, where)
        return cls(
            group=literal(Group, d.get("group"), f"{where}.group"),
            name=typed(d, "name", str, where),
            evidence=literal(Evidence, d.get("evidence"), f"{where}.evidence"),
            passed=typed(d, "passed", bool, where),
            figures=mapping(d.get("figures", {}), f"{where}.figures"),
            detail=typed(d, "detail", str, where) if "detail" in d else "",
        )


@dataclass(frozen=True, kw_only=True)
class Report:
    """The report of one `dgr verify` run over the inputs `inputs_digest` (and the unpatched baseline)."""

    inputs_digest: str
    baseline_digest: str | None
    groups: tuple[Group, ...]
    durations_s: Mapping[str, float]
    checks: tuple[Check, ...]
    format: int = REPORT_FORMAT

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def group(self, group: Group) -> list[Check]:
        return [c for c in self.checks if c.group == group]

    def problems(self, digest: str) -> list[str]:
        """Why this is not a complete pass for the inputs `digest` (empty: it is one)."""
        found: list[str] = []
        if self.inputs_digest != digest:
            found.append(f"it is for the inputs {self.inputs_digest}, not {digest}")
        missing = [g for g in GROUPS if g not in self.groups or not self.group(g)]
        if missing:
            found.append(
                f"it does not cover the group(s) {', '.join(missing)} "
                f"(it ran {', '.join(self.groups) or 'none'})"
            )
        failed = [c.id for c in self.checks if not c.passed]
        if failed:
            found.append(f"{len(failed)} check(s) failed: {', '.join(failed)}")
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "inputs_digest": self.inputs_digest,
            "baseline_digest": self.baseline_digest,
            "groups": list(self.groups),
            "passed": self.passed,
            "durations_s": dict(self.durations_s),
            "checks": [c.to_json() for c in self.checks],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "report") -> Report:
        d = mapping(data, where)
        fmt = typed(d, "format", int, where)
        if fmt != REPORT_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {REPORT_FORMAT}; run `dgr verify` again")
        checks = typed(d, "checks", list, where)
        groups = typed(d, "groups", list, where)
        baseline = d.get("baseline_digest")
        if baseline is not None and not isinstance(baseline, str):
            raise ConfigError(f"{where}: `baseline_digest` is {type(baseline).__name__}, expected str")
        report = cls(
            format=fmt,
            inputs_digest=typed(d, "inputs_digest", str, where),
            baseline_digest=baseline,
            groups=tuple(literal(Group, g, f"{where}.groups[{i}]") for i, g in enumerate(groups)),
            durations_s=mapping(d.get("durations_s", {}), f"{where}.durations_s"),
            checks=tuple(Check.from_json(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
        )
        if "passed" in d and d["passed"] is not report.passed:
            raise ConfigError(f"{where}: `passed` is {d['passed']!r}, but its checks say {report.passed!r}")
        return report
