"""Running checks, and the table and JUnit XML of their results (the report itself: dgr.contracts.report)."""

from __future__ import annotations

import json
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from typing import Any

from dgr.contracts.report import Check, Counts, Evidence, Group


def guarded(
    group: Group, name: str, evidence: Evidence, fn: Callable[[], Check | list[Check]]
) -> list[Check]:
    """Run a check; an exception (a worker that died, refused or answered wrongly) becomes a failed check
    that names it, so one broken check does not hide the others."""
    try:
        result = fn()
    except Exception as exc:  # every failure of a check is reported, none is fatal
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return [
            failed(
                group, name, evidence, f"{type(exc).__name__}: {exc}\n  at {where.filename}:{where.lineno}"
            )
        ]
    return result if isinstance(result, list) else [result]


def failed(
    group: Group, name: str, evidence: Evidence, detail: str, figures: dict[str, object] | None = None
) -> Check:
    """A failed check of `group/name` that says why in `detail`."""
    return Check(
        group=group, name=name, evidence=evidence, passed=False, figures=figures or {}, detail=detail
    )


def nonempty(group: Group, name: str, evidence: Evidence, checks: list[Check]) -> list[Check]:
    """The checks of the part or group `group/name`, or, when it ran none, one failed check that says so: a
    part that checks nothing is not a pass."""
    if checks:
        return checks
    detail = f"{group}/{name} ran no check: nothing was verified, which is not a pass"
    return [failed(group, name, evidence, detail, {"checks": 0})]


def verdict(
    group: Group,
    name: str,
    evidence: Evidence,
    problems: list[str],
    figures: Mapping[str, Any],
    *,
    sep: str = "\n",
    limit: int | None = None,
) -> Check:
    """The check `group/name`: passed when no problem was found; the problems (the first `limit`) are its
    detail."""
    return Check(
        group=group,
        name=name,
        evidence=evidence,
        passed=not problems,
        figures=figures,
        detail=sep.join(problems[:limit]),
    )


def matching_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens two generations share from the start."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _figures_text(figures: Mapping[str, Any], limit: int = 110) -> str:
    parts = []
    for key, value in figures.items():
        if isinstance(value, float):
            text = f"{value:.4g}"
        elif isinstance(value, (list, dict)):
            continue
        else:
            text = str(value)
        parts.append(f"{key}={text}")
    line = " ".join(parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def table(checks: list[Check]) -> str:
    """One line per check (its outcome, name, evidence, figures), the detail of every check not passed, then
    the counts; a group of checks none of which passed is named (it is no pass)."""
    rows = [("", "check", "evidence", "figures")]
    for c in checks:
        rows.append((c.outcome, f"{c.group}/{c.name}", c.evidence, _figures_text(c.figures)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for r in rows:
        lines.append(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip())
    for c in checks:
        if not c.passed and c.detail:
            lines.append(f"\n{c.outcome} {c.group}/{c.name}:\n  " + c.detail.replace("\n", "\n  "))
    groups = list(dict.fromkeys(c.group for c in checks))
    unpassed = [g for g in groups if not Counts.of(c for c in checks if c.group == g).passed]
    if unpassed:
        lines.append(f"\nno check passed in the group(s) {', '.join(unpassed)}: not a pass")
    lines.append(f"\n{Counts.of(checks).text()}")
    return "\n".join(lines)


def junit_xml(checks: list[Check]) -> bytes:
    """The checks as a JUnit XML test suite (one test case per check, its figures as properties): a failed
    check is a `failure`, a device failure an `error`, a failure on upstream too and a check that compared
    nothing are `skipped` (no pass, no failure)."""
    counts = Counts.of(checks)
    suite = ET.Element(
        "testsuite",
        name="dgr-verify",
        tests=str(len(checks)),
        failures=str(counts.failed),
        errors=str(counts.device_failures),
        skipped=str(counts.upstream_failures + counts.not_compared),
    )
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"{c.group}", name=c.name)
        ET.SubElement(case, "properties").extend(
            [
                ET.Element("property", name="evidence", value=c.evidence),
                ET.Element("property", name="figures", value=json.dumps(c.figures, default=str)),
            ]
        )
        if c.device_failure:
            # not a pass and not a failure of the check: the device's driver failed (a JUnit error)
            message = (c.detail or "device failure").splitlines()[0]
            ET.SubElement(case, "error", type="device-failure", message=message).text = c.detail
        elif c.upstream_failure:
            # not a pass and no failure of the series: upstream's own test fails on the baseline too
            message = (c.detail or "fails on upstream too").splitlines()[0]
            ET.SubElement(case, "skipped", message=message).text = c.detail
        elif c.not_compared:
            # not a pass and no failure: there was nothing to compare (listed, with why)
            message = (c.detail or "listed, not compared").splitlines()[0]
            ET.SubElement(case, "skipped", type="not-compared", message=message).text = c.detail
        elif not c.passed:
            ET.SubElement(case, "failure", message=(c.detail or "failed").splitlines()[0]).text = c.detail
    data: bytes = ET.tostring(suite, encoding="utf-8", xml_declaration=True)  # typeshed: Any for an encoding
    return data
