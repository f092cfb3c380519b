"""The native tests the patches add, run with CTest from the published build; results parsed from JUnit."""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from dgr import proc
from dgr.contracts import NATIVE, Check
from dgr.errors import DgrError


def run(ctest: Path, build_dir: Path) -> list[Check]:
    """Run every test of build_dir/CTestTestfile.cmake; one Check per test, from CTest's JUnit report."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        return [
            Check(
                group="native",
                name="ctest",
                evidence=NATIVE,
                passed=False,
                figures={},
                detail=f"{build_dir} has no CTestTestfile.cmake: the build registered no native tests",
            )
        ]
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
                "--timeout",
                "600",
            ],
            check=False,
            error=DgrError,
            what="ctest",
        )
        if not junit.is_file():
            return [
                Check(
                    group="native",
                    name="ctest",
                    evidence=NATIVE,
                    passed=False,
                    figures={"exit_code": result.returncode},
                    detail=(result.stdout + result.stderr)[-2000:],
                )
            ]
        root = ET.parse(junit).getroot()
    checks = []
    for case in root.iter("testcase"):
        status = case.get("status", "")
        failed = (
            status not in ("run", "") or case.find("failure") is not None or case.find("error") is not None
        )
        output = case.findtext("system-out") or ""
        checks.append(
            Check(
                group="native",
                name=case.get("name", "?"),
                evidence=NATIVE,
                passed=not failed,
                figures={"time_s": float(case.get("time", 0.0)), "status": status or "run"},
                detail=output[-2000:] if failed else "",
            )
        )
    if not checks:
        checks.append(
            Check(
                group="native",
                name="ctest",
                evidence=NATIVE,
                passed=False,
                figures={},
                detail="CTest ran no test",
            )
        )
    return checks
