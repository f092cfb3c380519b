"""The native tests the patches add, run with CTest from the published build; results parsed from JUnit."""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from dgr import proc
from dgr.errors import DgrError
from dgr.verify.report import NATIVE, Check


def run(ctest: Path, build_dir: Path) -> list[Check]:
    """Run every test of build_dir/CTestTestfile.cmake; one Check per test, from CTest's JUnit report."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        return [
            Check(
                "native",
                "ctest",
                NATIVE,
                False,
                {},
                f"{build_dir} has no CTestTestfile.cmake: the build registered no native tests",
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
                    "native",
                    "ctest",
                    NATIVE,
                    False,
                    {"exit_code": result.returncode},
                    (result.stdout + result.stderr)[-2000:],
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
                "native",
                case.get("name", "?"),
                NATIVE,
                not failed,
                {"time_s": float(case.get("time", 0.0)), "status": status or "run"},
                output[-2000:] if failed else "",
            )
        )
    if not checks:
        checks.append(Check("native", "ctest", NATIVE, False, {}, "CTest ran no test"))
    return checks
