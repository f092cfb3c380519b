"""The native tests the patches add, run with CTest from the published build; results parsed from JUnit."""

from __future__ import annotations

import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from dgr.contracts.report import NATIVE, Check
from dgr.core import proc
from dgr.errors import DgrError
from dgr.verify.checks.session import GroupSpec, Session
from dgr.verify.checks.testrun import TestRun

# CTest keeps only the first 1 KiB of a passing test's output unless told otherwise; the tables of the tests
# are read from it (the archs group)
_OUTPUT_LIMIT = "10000000"
# JUnit cannot hold the escape of a terminal colour: CTest writes it as this text
_NON_XML_ESC = re.compile(r"\[NON-XML-CHAR-0x1B\]")


def _failed(name: str, figures: dict[str, object], detail: str) -> TestRun:
    return TestRun(
        [Check(group="native", name=name, evidence=NATIVE, passed=False, figures=figures, detail=detail)]
    )


def run(ctest: Path, build_dir: Path) -> TestRun:
    """Run every test of build_dir/CTestTestfile.cmake; one Check per test, from CTest's JUnit report."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        return _failed(
            "ctest", {}, f"{build_dir} has no CTestTestfile.cmake: the build registered no native tests"
        )
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
            ],
            check=False,
            error=DgrError,
            what="ctest",
        )
        if not junit.is_file():
            return _failed("ctest", {"exit_code": result.returncode}, (result.stdout + result.stderr)[-2000:])
        root = ET.parse(junit).getroot()
    checks = []
    outputs = {}
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        status = case.get("status", "")
        failed = (
            status not in ("run", "") or case.find("failure") is not None or case.find("error") is not None
        )
        output = _NON_XML_ESC.sub("\x1b", case.findtext("system-out") or "")
        outputs[name] = output
        checks.append(
            Check(
                group="native",
                name=name,
                evidence=NATIVE,
                passed=not failed,
                figures={"time_s": float(case.get("time", 0.0)), "status": status or "run"},
                detail=output[-2000:] if failed else "",
            )
        )
    if not checks:
        return _failed("ctest", {}, "CTest ran no test")
    return TestRun(checks, outputs)


def _verify(session: Session) -> list[Check]:
    session.native_ran = run(session.ctest, session.patched.path)
    return session.native_ran.checks


GROUP = GroupSpec(_verify)
