"""Progress of `dgr verify`: one line per finished part as it finishes (a conformance group's
`<group>/<part>`, or a whole group), e.g. `[37/201] PASS kv/smollm2 (14 checks, 3.2 s), about 2 min left`.

The count is of checks; the total and the time left come from the last stored report that covers the same
groups (the checks it had, the `durations_s` of the parts not run yet). Without one, neither is shown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dgr.contracts.report import Check, Counts, Group, Report
from dgr.core import jsonio
from dgr.core.paths import Cache
from dgr.errors import ConfigError


def last_report(cache: Cache, groups: Sequence[Group]) -> Report | None:
    """The newest report in the cache's reports/ that ran every group of `groups`; None if there is none."""
    found = sorted(
        (p for p in (cache.root / "reports").glob("*.json") if p.is_file()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in found:
        try:
            report = Report.from_json(jsonio.loads(path.read_bytes(), str(path)), str(path))
        except (OSError, ValueError, ConfigError):
            continue  # an unreadable or older report says nothing about this run
        if set(groups) <= set(report.groups):
            return report
    return None


def duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `1 h 2 min`."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass
class Progress:
    """What has finished, against what the last report says is to come."""

    groups: Sequence[Group]
    previous: Report | None = None
    done: set[str] = field(default_factory=set)
    checks: int = 0

    @property
    def expected(self) -> int | None:
        """The check count of the last report over these groups."""
        if self.previous is None:
            return None
        return sum(1 for c in self.previous.checks if c.group in self.groups)

    def remaining_s(self) -> float | None:
        """The stored durations of the parts (else the groups) not finished yet; None when one is unknown."""
        if self.previous is None:
            return None
        return remaining(self.previous.durations_s, self.groups, self.done)

    def line(self, part: str, checks: Sequence[Check], seconds: float) -> str:
        """Record that `part` finished with `checks` after `seconds`; the line that says so."""
        self.done.add(part)
        self.checks += len(checks)
        failed = [c for c in checks if c.failed]
        counts = Counts.of(checks)
        expected = self.expected
        count = f"[{self.checks}/{expected}]" if expected else f"[{self.checks}]"
        names = ", ".join(c.name for c in failed[:3]) + (
            f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        )
        if not checks or counts.device_failures or counts.upstream_failures or counts.not_compared:
            what = counts.text() + (f": {names}" if failed else "")
        elif failed:
            what = f"{len(failed)} of {len(checks)} checks failed: {names}"
        else:
            what = f"{len(checks)} check{'s' if len(checks) != 1 else ''}"
        # a part with no passed check is no pass, whatever else it holds (Counts.ok)
        word = "FAIL" if not counts.ok else "DEVICE FAILURE" if counts.device_failures else "PASS"
        text = f"{count} {word} {part} ({what}, {seconds:.1f} s)"
        left = self.remaining_s()
        if left is not None and left > 0:
            text += f", about {duration(left)} left"
        return text


def remaining(durations: Mapping[str, float], groups: Sequence[Group], done: set[str]) -> float | None:
    """The seconds the groups' parts not in `done` took last time: a group's parts (`<group>/<part>`) where
    it has them, else the group's own duration; None when a group not finished has no duration."""
    total = 0.0
    for group in groups:
        parts = {k: v for k, v in durations.items() if k.startswith(f"{group}/")}
        if group in done or (parts and set(parts) <= done):
            continue
        if parts:
            total += sum(v for k, v in parts.items() if k not in done)
        elif group in durations:
            total += durations[group]
        else:
            return None
    return total
