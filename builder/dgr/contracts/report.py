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

REPORT_FORMAT = 3
"""2: a check the device could not run (`device_failure`) is not a passed check (format 1 passed it).
3: a check that compared nothing (`not_compared`: a graph variant built in neither tree, an architecture
without a model) is listed apart, not passed (format 2 passed it); a group passes only with a passed check;
an upstream test failing on both builds is counted apart only where the series declares it (format 2
counted every such test apart)."""


@dataclass(frozen=True, kw_only=True)
class Check(convert.Record):
    """One check of `dgr verify`: what it proves (group, evidence class), its figures, pass or fail, or one of
    three outcomes counted apart, none of them a pass (a check holds at most one, and is then not passed):

    - a device failure (`device_failure`: the GPU driver crashed or hung where the unpatched build's own test
      fails too on the same device; the check did not run);
    - a failure on upstream too (`upstream_failure`, below);
    - listed, not compared (`not_compared`: there was nothing to compare, e.g. a variant that upstream's
      generator builds in neither tree; `detail` says why)."""

    group: Group
    name: str
    evidence: Evidence
    passed: bool
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""
    device_failure: bool = field(default=False, metadata=convert.OMIT_EMPTY)
    upstream_failure: bool = field(default=False, metadata=convert.OMIT_EMPTY)
    """Upstream's own test that fails on the unpatched baseline build as on the patched one (the `upstream`
    group), where the series declares that it may (series/verify.toml, with why): not a pass, and no failure
    of the series; counted apart, like a device failure."""
    not_compared: bool = field(default=False, metadata=convert.OMIT_EMPTY)
    """Listed, not compared: the check had nothing to compare (`detail` says why); not a pass."""

    def __post_init__(self) -> None:
        if self.passed and self.device_failure:
            raise ConfigError(f"{self.id}: a device failure is not a passed check")
        if self.upstream_failure and (self.passed or self.device_failure):
            raise ConfigError(f"{self.id}: a failure on upstream too is neither a pass nor a device failure")
        if self.not_compared and (self.passed or self.device_failure or self.upstream_failure):
            raise ConfigError(
                f"{self.id}: a check that compared nothing is neither a pass nor a failure of another kind"
            )

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def failed(self) -> bool:
        """Neither passed nor one of the outcomes counted apart (device failure, failure on upstream too,
        not compared)."""
        return not (self.passed or self.device_failure or self.upstream_failure or self.not_compared)

    @property
    def outcome(self) -> str:
        if self.upstream_failure:
            return "FAILS UPSTREAM TOO"
        if self.not_compared:
            return "LISTED"
        return "PASS" if self.passed else "DEVICE FAILURE" if self.device_failure else "FAIL"


@dataclass(frozen=True)
class Counts:
    """How many checks passed, were device failures, failed on upstream too, were listed without a
    comparison, failed: only a passed check is a pass."""

    passed: int
    device_failures: int
    failed: int
    upstream_failures: int = 0
    not_compared: int = 0

    @classmethod
    def of(cls, checks: Iterable[Check]) -> Counts:
        found = list(checks)
        return cls(
            passed=sum(c.passed for c in found),
            device_failures=sum(c.device_failure for c in found),
            failed=sum(c.failed for c in found),
            upstream_failures=sum(c.upstream_failure for c in found),
            not_compared=sum(c.not_compared for c in found),
        )

    @property
    def total(self) -> int:
        return self.passed + self.device_failures + self.upstream_failures + self.not_compared + self.failed

    @property
    def ok(self) -> bool:
        """A pass: at least one check passed, and none failed. Device failures, failures on upstream too and
        checks that compared nothing are no failure, and, alone, no pass either (they verified nothing)."""
        return self.passed > 0 and self.failed == 0

    def text(self) -> str:
        """`160 passed, 1 device failure (driver), 5 failing on upstream too, 27 not compared (listed), 0
        failed`; `no checks: nothing was verified`."""
        if not self.total:
            return "no checks: nothing was verified"
        n = self.device_failures
        device = f"{n} device failure{'s' if n != 1 else ''} (driver), " if n else ""
        u = self.upstream_failures
        upstream = f"{u} failing on upstream too, " if u else ""
        listed = f"{self.not_compared} not compared (listed), " if self.not_compared else ""
        return f"{self.passed} passed, {device}{upstream}{listed}{self.failed} failed"


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
    reused: Mapping[str, str] = field(default_factory=dict, metadata=convert.OMIT_EMPTY)
    """The parts whose checks were taken from a result kept for the same binaries, models and harness (part ->
    the key of the result in `<cache>/results/`, dgr.verify.checks.results)."""

    @property
    def counts(self) -> Counts:
        return Counts.of(self.checks)

    @property
    def passed(self) -> bool:
        """Every group it ran passes (`Counts.ok`: a check of the group passed, and none failed), and it ran
        one: a group of device failures, failures on upstream too or checks that compared nothing is no
        pass."""
        return bool(self.groups) and not self.groups_not_passed() and self.counts.failed == 0

    def group(self, group: Group) -> list[Check]:
        return [c for c in self.checks if c.group == group]

    def groups_not_passed(self) -> list[Group]:
        """The groups it ran that do not pass: no check of theirs passed, or one failed."""
        return [g for g in self.groups if not Counts.of(self.group(g)).ok]

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
        unpassed = [g for g in groups if g not in missing and not Counts.of(self.group(g)).passed]
        if unpassed:
            found.append(
                "no check passed in the group(s) "
                + ", ".join(f"{g} ({Counts.of(self.group(g)).text()})" for g in unpassed)
            )
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
