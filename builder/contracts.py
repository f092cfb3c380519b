"""The typed contracts that cross layer boundaries, in one place.

Each record is a frozen dataclass with `to_json` / `from_json`; closed sets of values are `Literal`s.
The series manager writes the build manifest, verify writes the report, bench writes its result; commands
and the export read them back through `from_json`, which refuses a malformed document with a ConfigError
naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from dgr.errors import ConfigError


def _literal(kind: Any, value: Any, where: str) -> Any:
    choices = get_args(kind)
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def _typed(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: `{key}` is missing")
    value = data[key]
    # bool is an int: a flag where a number is expected (or the reverse) is malformed
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise ConfigError(f"{where}: `{key}` is {type(value).__name__}, expected {kind}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, found {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- the verify report

Group = Literal["native", "ownership", "boundary", "kv"]
GROUPS: tuple[Group, ...] = get_args(Group)
"""The groups of `dgr verify`, in the order they run; a report usable for export covers all of them."""

Evidence = Literal["native test", "synthetic fixture", "real model"]
NATIVE: Evidence = "native test"
SYNTHETIC: Evidence = "synthetic fixture"
REAL_MODEL: Evidence = "real model"

REPORT_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class CheckResult:
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
    def from_json(cls, data: Any, where: str = "check") -> CheckResult:
        d = _mapping(data, where)
        return cls(
            group=_literal(Group, d.get("group"), f"{where}.group"),
            name=_typed(d, "name", str, where),
            evidence=_literal(Evidence, d.get("evidence"), f"{where}.evidence"),
            passed=_typed(d, "passed", bool, where),
            figures=_mapping(d.get("figures", {}), f"{where}.figures"),
            detail=_typed(d, "detail", str, where) if "detail" in d else "",
        )


@dataclass(frozen=True, kw_only=True)
class Report:
    """The report of one `dgr verify` run over the inputs `inputs_digest` (and the unpatched baseline)."""

    inputs_digest: str
    baseline_digest: str | None
    groups: tuple[Group, ...]
    durations_s: Mapping[str, float]
    checks: tuple[CheckResult, ...]
    format: int = REPORT_FORMAT

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def group(self, group: Group) -> list[CheckResult]:
        return [c for c in self.checks if c.group == group]

    @property
    def complete(self) -> bool:
        """Every group ran and has at least one check."""
        return all(g in self.groups and self.group(g) for g in GROUPS)

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
        d = _mapping(data, where)
        fmt = _typed(d, "format", int, where)
        if fmt != REPORT_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {REPORT_FORMAT}; run `dgr verify` again")
        checks = _typed(d, "checks", list, where)
        groups = _typed(d, "groups", list, where)
        baseline = d.get("baseline_digest")
        if baseline is not None and not isinstance(baseline, str):
            raise ConfigError(f"{where}: `baseline_digest` is {type(baseline).__name__}, expected str")
        report = cls(
            format=fmt,
            inputs_digest=_typed(d, "inputs_digest", str, where),
            baseline_digest=baseline,
            groups=tuple(_literal(Group, g, f"{where}.groups[{i}]") for i, g in enumerate(groups)),
            durations_s=_mapping(d.get("durations_s", {}), f"{where}.durations_s"),
            checks=tuple(CheckResult.from_json(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
        )
        if "passed" in d and d["passed"] is not report.passed:
            raise ConfigError(f"{where}: `passed` is {d['passed']!r}, but its checks say {report.passed!r}")
        return report


# --------------------------------------------------------------------------- the build manifest

# --------------------------------------------------------------------------- the bench result
