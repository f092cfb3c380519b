"""The `upstream` group: upstream llama.cpp's own test suite as its ci/run.sh runs it, on the unpatched
baseline build and on the patched build, compared test by test.

The suites, each run with CTest in the work build dir of both builds (the tokenizer tests and test-chat read
models/ and templates from the source tree beside it; dgr.builds.build.work_build brings that tree back to
the build's commit first):

- `main`: `ctest -L main -E test-opt`;
- `model@<model>`: `ctest -L model` with LLAMACPP_TEST_MODELFILE set to each locked model.

The model upstream's tests download (the fixture `test-download-model`, from the network) is replaced by the
locked model: it is linked at the fixture's destination and CTest runs with `-FS test-download-model`, so
test-thread-safety and test-state-restore-fragmented run on a real model and the download is no test.

A test passes when it passes on the patched build. One that passes on the baseline and fails on the patched
build is a failure of the series; one that fails on both is a failure on upstream too (not a pass, and no
failure of the series), with its output; one that the patched build lacks and the baseline passes is a
failure (the series lost it); one that only the patched build has is judged by its own result."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dgr.contracts.report import NATIVE, REAL_MODEL, Check, Evidence
from dgr.core import proc
from dgr.errors import VerifyError
from dgr.verify.checks import native
from dgr.verify.checks.native import CaseResult
from dgr.verify.checks.session import GroupSpec, Session

MAIN = ("-L", "main", "-E", "test-opt")
"""ci/run.sh's gg_run_ctest_release (no Python: `-L main`, not `-L 'main|python'`)."""
MODEL = ("-L", "model")
"""ci/run.sh's gg_run_ctest_with_model_release, with LLAMACPP_TEST_MODELFILE set."""
DOWNLOAD_FIXTURE = "test-download-model"
MODEL_FILE_ENV = "LLAMACPP_TEST_MODELFILE"
_SIDES = ("baseline", "patched")


@dataclass(frozen=True)
class Suite:
    name: str
    args: tuple[str, ...]
    evidence: Evidence
    model: Path
    """The locked model at the download fixture's destination, and in LLAMACPP_TEST_MODELFILE when
    `model_file` (ci/run.sh sets it for `-L model` only)."""
    model_file: bool = False


def _word(case: CaseResult | None) -> str:
    if case is None:
        return "absent"
    return "pass" if case.passed else ("fail" if case.status == "run" else case.status)


def _tail(case: CaseResult | None) -> str:
    return case.output[-1500:] if case is not None and case.output else ""


def compare(
    suite: str, evidence: Evidence, baseline: Mapping[str, CaseResult], patched: Mapping[str, CaseResult]
) -> list[Check]:
    """One check per test of either side, `<suite>/<test>`, with the result on each side as its figures."""
    checks = []
    for name in sorted(baseline.keys() | patched.keys()):
        b, p = baseline.get(name), patched.get(name)
        figures = {"baseline": _word(b), "patched": _word(p)}
        passed, upstream_failure, detail = False, False, ""
        if p is not None and p.passed:
            passed = True
            if b is None:
                detail = "only the patched build has this test"
        elif p is not None and b is not None and b.passed:
            detail = "passes on the baseline, fails on the patched build:\n" + _tail(p)
        elif b is not None and not b.passed:
            upstream_failure = True
            where = "the patched build lacks it" if p is None else "it fails on the patched build too"
            detail = f"fails on the unpatched baseline ({_word(b)}); {where}:\n" + _tail(b)
        elif p is None:
            detail = "passes on the baseline; the patched build lacks this test (the series lost it)"
        else:
            detail = "only the patched build has this test, and it fails there:\n" + _tail(p)
        checks.append(
            Check(
                group="upstream",
                name=f"{suite}/{name}",
                evidence=evidence,
                passed=passed,
                upstream_failure=upstream_failure,
                figures=figures,
                detail=detail.rstrip(),
            )
        )
    return checks


def download_destination(registered: list[dict[str, object]]) -> Path | None:
    """Where the fixture test-download-model puts its model (its `-DDEST=` argument), from
    `ctest --show-only=json-v1`'s tests; None when no such test is registered."""
    for test in registered:
        if test.get("name") != DOWNLOAD_FIXTURE:
            continue
        command = test.get("command")
        for arg in command if isinstance(command, list) else []:
            if isinstance(arg, str) and arg.startswith("-DDEST="):
                return Path(arg.removeprefix("-DDEST="))
    return None


def _registered(ctest: Path, build_dir: Path) -> list[dict[str, object]]:
    result = proc.run([ctest, "--show-only=json-v1"], cwd=build_dir, error=VerifyError, what="ctest -N")
    tests: list[dict[str, object]] = json.loads(result.stdout).get("tests", [])
    return tests


def _place(model: Path, dest: Path) -> None:
    """The locked model at the download fixture's destination (a link, replaced each run)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    dest.symlink_to(model)


def run_side(ctest: Path, build_dir: Path, suites: list[Suite]) -> dict[str, dict[str, CaseResult]]:
    """Every suite in one build dir: its cases by test name, per suite; VerifyError when CTest wrote no
    report (it did not run)."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        raise VerifyError(f"{build_dir} has no CTestTestfile.cmake: the build registered no test")
    dest = download_destination(_registered(ctest, build_dir))
    out: dict[str, dict[str, CaseResult]] = {}
    for suite in suites:
        args = list(suite.args)
        if dest is not None:
            _place(suite.model, dest)
            args += ["-FS", DOWNLOAD_FIXTURE]
        env = {MODEL_FILE_ENV: str(suite.model)} if suite.model_file else {}
        cases, output = native.ctest(ctest, build_dir, args, env)
        if cases is None:
            raise VerifyError(f"ctest {' '.join(args)} in {build_dir} did not run", actual=output)
        out[suite.name] = {c.name: c for c in cases}
    return out


def _verify(session: Session) -> list[Check]:
    if session.work_build is None:
        raise VerifyError("this dgr verify has no work build dirs to run upstream's tests in")
    default = session.env.default
    suites = [Suite("main", MAIN, NATIVE, default.path)] + [
        Suite(f"model@{m.name}", MODEL, REAL_MODEL, m.path, model_file=True) for m in session.env.models
    ]
    ran = {side: run_side(session.ctest, session.work_build(side == "baseline"), suites) for side in _SIDES}
    checks = []
    for suite in suites:
        b, p = ran["baseline"].get(suite.name, {}), ran["patched"].get(suite.name, {})
        if not b or not p:
            empty = " and ".join(side for side, got in (("baseline", b), ("patched", p)) if not got)
            checks.append(
                Check(
                    group="upstream",
                    name=f"{suite.name}/ran",
                    evidence=suite.evidence,
                    passed=False,
                    detail=f"CTest ran no test of {' '.join(suite.args)} on the {empty} build",
                )
            )
            continue
        checks += compare(suite.name, suite.evidence, b, p)
    return checks


GROUP = GroupSpec(_verify, needs_baseline=True)
