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
from dgr.verify.models.env import RealModel

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


EXAMPLE = "llama-layer-range"
"""The example of the series (examples/layer-range): a model split in two ranges, compared with the whole."""
EXAMPLE_STEPS = 8
"""The tokens the example generates after the prompt: the prompt's graph, then the single-token graph."""
_EXAMPLE_STEP = re.compile(
    r"^main: step (\d+): .* max \|logit difference\| (\S+), next token (-?\d+) .*\(split: (-?\d+)\)$", re.M
)


def example_check(name: str, result_code: int, output: str, n_layer: int) -> Check:
    """The example on a real model: it exits 0, and each step it printed (the prompt, then one per generated
    token) has the same next token and no logit difference between the split and the whole model."""
    steps = [(int(s), float(d), int(a), int(b)) for s, d, a, b in _EXAMPLE_STEP.findall(output)]
    wrong = [s for s, d, a, b in steps if d != 0.0 or a != b]
    problems = []
    if result_code != 0:
        problems.append(f"exited {result_code}")
    if [s for s, *_ in steps] != list(range(EXAMPLE_STEPS + 1)):
        problems.append(f"printed steps {[s for s, *_ in steps]}, not 0 to {EXAMPLE_STEPS}")
    if wrong:
        problems.append(f"the split differs from the whole model at step(s) {wrong}")
    return Check(
        group="native",
        name=f"{EXAMPLE}/{name}",
        evidence=NATIVE,
        passed=not problems,
        figures={"split": [[0, n_layer // 2], [n_layer // 2, n_layer]], "steps": len(steps)},
        detail="; ".join(problems) + ("\n" + output[-2000:] if problems else ""),
    )


def run_example(session: Session, built: Built) -> list[Check]:
    """The example of the series run on every locked model, its default split (half of the layers each) and
    EXAMPLE_STEPS generated tokens; nothing when the build has no example (a prefix without it)."""
    example = built.path / "bin" / EXAMPLE
    if f"bin/{EXAMPLE}" not in built.manifest.artifacts:
        return []
    checks = []
    for model in session.env.models:

        def ran(model: RealModel = model) -> tuple[list[Check], dict[str, str]]:
            cmd: list[str | Path] = [example, "-m", model.path, "-n", str(EXAMPLE_STEPS), "-ngl", "0"]
            result = proc.run(cmd, check=False, error=DgrError, what=EXAMPLE, timeout=600)
            return [
                example_check(model.name, result.returncode, result.stdout + result.stderr, model.n_layer)
            ], {}

        # the model's file in the cache: models/<its sha256>/<name>
        inputs = {
            "part": EXAMPLE,
            "build": session.built(built),
            "model": model.path.parent.name + "/" + model.path.name,
        }
        checks += session.kept(f"native/{EXAMPLE}/{model.name}", inputs, ran)[0]
    return checks


def _verify(session: Session) -> list[Check]:
    session.native_ran = kept_run(session, session.patched)
    return session.native_ran.checks + run_example(session, session.patched)


GROUP = GroupSpec(_verify)
