"""The verify report: one `Check` per check of `dgr verify`, the `Report` of a run, the registry of groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self, get_args

from dgr.contracts import convert
from dgr.contracts.harness import Harness
from dgr.errors import ConfigError

# the registry of verify groups: one line per group, in the order they run; the group `<name>` is the
# module dgr.verify.checks.<name> (its `GROUP`)
Group = Literal[
    "native",
    "upstream",
    "series",
    "archs",
    "graph",
    "ownership",
    "boundary",
    "kv",
    "offload",
]
ALL_GROUPS: tuple[Group, ...] = get_args(Group)
GPU_GROUPS: tuple[Group, ...] = ("archs", "offload")
"""The groups of `dgr verify --backend NAME` (a GPU backend), in the order they run: the architectures on the
device, and the real models with layers offloaded."""
GROUPS: tuple[Group, ...] = tuple(g for g in ALL_GROUPS if g != "offload")
"""The groups of `dgr verify` (the CPU), in the order they run; a report usable for export covers them all."""

Evidence = Literal["native test", "synthetic fixture", "real model"]
NATIVE: Evidence = "native test"
SYNTHETIC: Evidence = "synthetic fixture"
REAL_MODEL: Evidence = "real model"

REPORT_FORMAT = 2
"""2: a check the device could not run (`device_failure`) is not a passed check (format 1 passed it)."""


@dataclass(frozen=True, kw_only=True)
class Check(convert.Record):
    """One check of `dgr verify`: what it proves (group, evidence class), its figures, pass or fail, or a
    device failure (`device_failure`: the GPU driver crashed or hung where upstream's own test fails too; the
    check did not run, so it is not passed, and it is counted apart from the failed ones)."""

    group: Group
    name: str
    evidence: Evidence
    passed: bool
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""
    device_failure: bool = field(default=False, metadata=convert.OMIT_EMPTY)
    upstream_failure: bool = field(default=False, metadata=convert.OMIT_EMPTY)
    """Upstream's own test that fails on the unpatched baseline build as on the patched one (the `upstream`
    group): not a pass, and no failure of the series; counted apart, like a device failure."""

    def __post_init__(self) -> None:
        if self.passed and self.device_failure:
            raise ConfigError(f"{self.id}: a device failure is not a passed check")
        if self.upstream_failure and (self.passed or self.device_failure):
            raise ConfigError(f"{self.id}: a failure on upstream too is neither a pass nor a device failure")

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def failed(self) -> bool:
        """Neither passed nor a device failure nor a failure on upstream too."""
        return not self.passed and not self.device_failure and not self.upstream_failure

    @property
    def outcome(self) -> str:
        if self.upstream_failure:
            return "FAILS UPSTREAM TOO"
        return "PASS" if self.passed else "DEVICE FAILURE" if self.device_failure else "FAIL"


@dataclass(frozen=True)
class Counts:
    """How many checks passed, were device failures, failed on upstream too, failed: a device failure or a
    failure on upstream too is never a pass."""

    passed: int
    device_failures: int
    failed: int
    upstream_failures: int = 0

    @classmethod
    def of(cls, checks: Iterable[Check]) -> Counts:
        found = list(checks)
        return cls(
            passed=sum(c.passed for c in found),
            device_failures=sum(c.device_failure for c in found),
            failed=sum(c.failed for c in found),
            upstream_failures=sum(c.upstream_failure for c in found),
        )

    @property
    def total(self) -> int:
        return self.passed + self.device_failures + self.upstream_failures + self.failed

    @property
    def ok(self) -> bool:
        """A run that is not a failure: at least one check, and none failed (zero checks verify nothing)."""
        return self.total > 0 and self.failed == 0

    def text(self) -> str:
        """`160 passed, 1 device failure (driver), 5 failing on upstream too, 0 failed`; `no checks: nothing
        was verified`."""
        if not self.total:
            return "no checks: nothing was verified"
        n = self.device_failures
        device = f"{n} device failure{'s' if n != 1 else ''} (driver), " if n else ""
        u = self.upstream_failures
        upstream = f"{u} failing on upstream too, " if u else ""
        return f"{self.passed} passed, {device}{upstream}{self.failed} failed"


@dataclass(frozen=True, kw_only=True)
class Report(convert.Record):
    """The report of one `dgr verify` run over the inputs `inputs_digest` (and the unpatched baseline), with
    the harness that ran the checks (None: a report of a dgr that did not record it)."""

    format: int = REPORT_FORMAT
    inputs_digest: str
    baseline_digest: str | None
    groups: tuple[Group, ...]
    durations_s: Mapping[str, float] = field(default_factory=dict)
    checks: tuple[Check, ...]
    harness: Harness | None = field(default=None, metadata=convert.OMIT_NONE)

    @property
    def counts(self) -> Counts:
        return Counts.of(self.checks)

    @property
    def passed(self) -> bool:
        """At least one check, and none failed (a device failure is counted apart, see Check)."""
        return self.counts.ok

    def group(self, group: Group) -> list[Check]:
        return [c for c in self.checks if c.group == group]

    def problems(self, digest: str, groups: tuple[Group, ...] = GROUPS) -> list[str]:
        """Why this is not a complete pass of `groups` for the inputs `digest` (empty: it is one)."""
        found: list[str] = []
        if self.inputs_digest != digest:
            found.append(f"it is for the inputs {self.inputs_digest}, not {digest}")
        missing = [g for g in groups if g not in self.groups or not self.group(g)]
        if missing:
            found.append(
                f"it does not cover the group(s) {', '.join(missing)} "
                f"(it ran {', '.join(self.groups) or 'none'})"
            )
        if not self.checks:
            found.append("it holds no check")
        failed = [c.id for c in self.checks if c.failed]
        if failed:
            found.append(f"{len(failed)} check(s) failed: {', '.join(failed)}")
        return found

    def stale(self, current: Harness) -> list[str]:
        """What changed in the harness (or the model lock) since the checks ran (empty: nothing)."""
        if self.harness is None:
            return ["it does not record the harness that ran its checks (a report of an older dgr)"]
        return self.harness.changes(current)

    def to_json(self) -> dict[str, Any]:
        data = convert.to_json(self)
        # `passed` is what the checks say, written after the groups (read back only to be compared)
        at = list(data).index("groups") + 1
        items = list(data.items())
        return dict([*items[:at], ("passed", self.passed), *items[at:]])

    @classmethod
    def from_json(cls, data: Any, where: str = "report") -> Self:
        d = convert.mapping(data, where)
        fmt = d.get("format")
        if fmt != REPORT_FORMAT:
            raise ConfigError(f"{where}: format {fmt} is not {REPORT_FORMAT}; run `dgr verify` again")
        report = convert.from_json(cls, {k: v for k, v in d.items() if k != "passed"}, where)
        if "passed" in d and d["passed"] is not report.passed:
            raise ConfigError(f"{where}: `passed` is {d['passed']!r}, but its checks say {report.passed!r}")
        return report
