"""The native tests the patches add, run with CTest from the published build; results parsed from JUnit."""

from __future__ import annotations

import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.report import NATIVE, Check
from dgr.core import proc
from dgr.errors import DgrError
from dgr.verify.checks.session import Built, GroupSpec, Session
from dgr.verify.checks.testrun import TestRun

# CTest keeps only the first 1 KiB of a passing test's output unless told otherwise; the tables of the tests
# are read from it (the archs group)
_OUTPUT_LIMIT = "10000000"
# JUnit cannot hold the escape of a terminal colour: CTest writes it as this text
_NON_XML_ESC = re.compile(r"\[NON-XML-CHAR-0x1B\]")
# a check of a native test that could not run here says so on a line of its own, `<where>: SKIPPED: <why>`
_SKIPPED = re.compile(r"^(?:\S+: )?SKIPPED: (.+)$", re.MULTILINE)


def _failed(name: str, figures: dict[str, object], detail: str) -> TestRun:
    return TestRun(
        [Check(group="native", name=name, evidence=NATIVE, passed=False, figures=figures, detail=detail)]
    )


@dataclass(frozen=True)
class CaseResult:
    """One test case of CTest's JUnit report."""

    name: str
    passed: bool
    status: str
    time_s: float
    output: str


def parse_junit(root: ET.Element) -> list[CaseResult]:
    """The test cases of CTest's JUnit report: a case passes when CTest ran it ("run") and recorded no
    failure or error; "notrun", "disabled" and a failed fixture are no pass."""
    cases = []
    for case in root.iter("testcase"):
        status = case.get("status", "")
        failed = (
            status not in ("run", "") or case.find("failure") is not None or case.find("error") is not None
        )
        cases.append(
            CaseResult(
                name=case.get("name", "?"),
                passed=not failed,
                status=status or "run",
                time_s=float(case.get("time", 0.0)),
                output=_NON_XML_ESC.sub("\x1b", case.findtext("system-out") or ""),
            )
        )
    return cases


def parallel_jobs() -> int:
    """The tests CTest runs at once: one per CPU this process may use. Most of a test's time is one thread
    (the random models of test-llama-archs, upstream's small tests), so two tests on two cores take about
    the time of the longer one; CTest still orders the fixtures' setups before the tests that need them."""
    return max(1, len(os.sched_getaffinity(0)))


def ctest(
    ctest: Path, build_dir: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> tuple[list[CaseResult] | None, str]:
    """Run CTest in build_dir with `args` (test selection), `parallel_jobs()` tests at once; its cases from
    the JUnit report, or None and the tail of its output when it wrote none."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "ctest.xml"
        result = proc.run(
            [
                ctest,
                "--test-dir",
                build_dir,
                "--output-on-failure",
                "--output-junit",
                junit,
                "--test-output-size-passed",
                _OUTPUT_LIMIT,
                "--test-output-size-failed",
                _OUTPUT_LIMIT,
                "--timeout",
                "900",
                "--parallel",
                str(parallel_jobs()),
                *args,
            ],
            env=env,
            check=False,
            error=DgrError,
            what="ctest",
        )
        output = (result.stdout + result.stderr)[-2000:]
        if not junit.is_file():
            return None, f"ctest exited {result.returncode} with no JUnit report:\n{output}"
        return parse_junit(ET.parse(junit).getroot()), output


def skipped(case: CaseResult) -> list[Check]:
    """A check of its own, listed and not passed, for each check the test says it skipped (`SKIPPED: why`):
    the test passes without it, but it proves nothing here."""
    return [
        Check(
            group="native",
            name=f"{case.name}/skipped-{i}",
            evidence=NATIVE,
            passed=False,
            not_compared=True,
            detail=f"skipped: {why.strip()}",
        )
        for i, why in enumerate(_SKIPPED.findall(case.output), start=1)
    ]


def run(ctest_bin: Path, build_dir: Path) -> TestRun:
    """Run every test of build_dir/CTestTestfile.cmake; one Check per test, from CTest's JUnit report."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        return _failed(
            "ctest", {}, f"{build_dir} has no CTestTestfile.cmake: the build registered no native tests"
        )
    cases, output = ctest(ctest_bin, build_dir)
    if cases is None:
        return _failed("ctest", {}, output)
    checks = []
    for c in cases:
        checks.append(
            Check(
                group="native",
                name=c.name,
                evidence=NATIVE,
                passed=c.passed,
                figures={"time_s": c.time_s, "status": c.status},
                detail="" if c.passed else c.output[-2000:],
            )
        )
        checks += skipped(c)
    if not checks:
        return _failed("ctest", {}, "CTest ran no test")
    return TestRun(checks, {c.name: c.output for c in cases})


def kept_run(session: Session, built: Built) -> TestRun:
    """`run` on a published build, kept by what the build runs (its artifacts: the series' prefixes share
    the key with the native group when their binaries are the same)."""

    def ran() -> tuple[list[Check], dict[str, str]]:
        result = run(session.ctest, built.path)
        return result.checks, result.outputs

    checks, outputs = session.kept("native", {"part": "native", "build": session.built(built)}, ran)
    return TestRun(checks, outputs)


def _verify(session: Session) -> list[Check]:
    session.native_ran = kept_run(session, session.patched)
    return session.native_ran.checks


GROUP = GroupSpec(_verify)
