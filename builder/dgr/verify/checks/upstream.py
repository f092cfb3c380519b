"""The `upstream` group: upstream llama.cpp's own test suite as its ci/run.sh runs it, on the unpatched
baseline build and on the patched build, compared test by test.

The suites, each run with CTest in the work build dir of both builds (the tokenizer tests and test-chat read
models/ and templates from the source tree beside it; dgr.builds.build.work_build brings that tree back to
the build's commit first):

- `main`: `ctest -L main -E test-opt`, less the tests that only the series registers (the `native` group
  runs them; a test of upstream's that a patch registers again, as test-generate-models, stays);
- `model@<model>`: `ctest -L model` with LLAMACPP_TEST_MODELFILE set to each locked model.

The model upstream's tests download (the fixture `test-download-model`, from the network) is replaced by the
locked model: it is linked at the fixture's destination and CTest runs with `-FS test-download-model`, so
test-thread-safety and test-state-restore-fragmented run on a real model and the download is no test.

The baseline runs what judging needs: a test that passes on the patched build passes whatever the baseline
does, so the baseline builds and runs only the tests of each suite that do not pass on the patched build (and
those the patched build lacks), with the tests that set up the fixtures they require; the others show "not
run" on the baseline. A test passes when it passes on the patched build. One that passes on the baseline and
fails on the patched build is a failure of the series. One that fails on both (or fails on the baseline and
the patched build lacks it) is a failure on upstream too (not a pass, and no failure of the series, counted
apart with its output) where the series declares that it may fail here, with why (series/verify.toml,
`[upstream_failures.<test>]`); undeclared, it is a failure, so that a new one is seen and explained. One that
the patched build lacks and the baseline passes is a failure (the series lost it); one that only the patched
build has is judged by its own result."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dgr.contracts import expectations
from dgr.contracts.report import NATIVE, REAL_MODEL, Check, Evidence
from dgr.core import jsonio, proc
from dgr.errors import VerifyError
from dgr.verify.checks import native
from dgr.verify.checks.native import CaseResult
from dgr.verify.checks.results import files_digest
from dgr.verify.checks.session import GroupSpec, Session, WorkBuild

MAIN = ("-L", "main", "-E", "test-opt")
"""ci/run.sh's gg_run_ctest_release (no Python: `-L main`, not `-L 'main|python'`)."""


def without(args: tuple[str, ...], own: Collection[str]) -> tuple[str, ...]:
    """A suite's CTest arguments less the tests `own` (added to its `-E` regex, or as one): the tests only the
    series registers, which are no test of upstream's and which the `native` group runs already."""
    if not own:
        return args
    names = "^(" + "|".join(re.escape(n) for n in sorted(own)) + ")$"
    if "-E" in args[:-1]:
        at = args.index("-E") + 1
        return (*args[:at], f"{args[at]}|{names}", *args[at + 1 :])
    return (*args, "-E", names)


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


NOT_RUN = "not run (passes on the patched build)"
"""The baseline's word for a test it has and did not run."""


def _word(case: CaseResult | None, listed: bool = False) -> str:
    if case is None:
        return NOT_RUN if listed else "absent"
    return "pass" if case.passed else ("fail" if case.status == "run" else case.status)


def _tail(case: CaseResult | None) -> str:
    return case.output[-1500:] if case is not None and case.output else ""


def compare(
    suite: str,
    evidence: Evidence,
    baseline: Mapping[str, CaseResult],
    patched: Mapping[str, CaseResult],
    declared: Callable[[str], str | None],
    listed: Collection[str] = (),
) -> list[Check]:
    """One check per test of either side, `<suite>/<test>`, with the result on each side as its figures;
    `declared(test)`: why the series says that upstream's test may fail here (None: it does not); `listed`:
    the tests the baseline has (those of them it did not run pass on the patched build)."""
    checks = []
    for name in sorted(baseline.keys() | patched.keys()):
        b, p = baseline.get(name), patched.get(name)
        figures = {"baseline": _word(b, name in listed), "patched": _word(p)}
        passed, upstream_failure, detail = False, False, ""
        if p is not None and p.passed:
            passed = True
            if b is None and name not in listed:
                detail = "only the patched build has this test"
        elif p is not None and b is not None and b.passed:
            detail = "passes on the baseline, fails on the patched build:\n" + _tail(p)
        elif b is not None and not b.passed:
            where = "the patched build lacks it" if p is None else "it fails on the patched build too"
            why = declared(name)
            upstream_failure = why is not None
            said = (
                f"declared in {expectations.PATH}: {why}"
                if why is not None
                else f"{expectations.PATH} does not declare that it may fail here: add "
                f"[upstream_failures.{name}] with its `why` if upstream's test cannot pass on this machine"
            )
            detail = f"fails on the unpatched baseline ({_word(b)}); {where}; {said}:\n" + _tail(b)
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


def _registered(ctest: Path, build_dir: Path, args: tuple[str, ...] = ()) -> list[dict[str, object]]:
    """The tests CTest selects in build_dir with `args` (every test without), as `--show-only=json-v1`
    gives them."""
    result = proc.run(
        [ctest, "--show-only=json-v1", *args], cwd=build_dir, error=VerifyError, what="ctest -N"
    )
    tests: list[dict[str, object]] = jsonio.loads(result.stdout, "ctest -N", VerifyError).get("tests", [])
    return tests


def _place(model: Path, dest: Path) -> None:
    """The locked model at the download fixture's destination (a link, replaced each run)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    dest.symlink_to(model)


def _fixtures(test: Mapping[str, object], key: str) -> set[str]:
    """The fixtures a test of `--show-only=json-v1` names in its property `key` (FIXTURES_REQUIRED, ...)."""
    props = test.get("properties")
    for prop in props if isinstance(props, list) else []:
        if isinstance(prop, dict) and prop.get("name") == key:
            value = prop.get("value")
            return {str(v) for v in value} if isinstance(value, list) else {str(value)}
    return set()


def with_setups(registered: list[dict[str, object]], names: Collection[str]) -> set[str]:
    """`names` and the tests that set up the fixtures they require (CTest runs those first), but the
    download fixture's (the locked model takes its place)."""
    required = set().union(*(_fixtures(t, "FIXTURES_REQUIRED") for t in registered if t.get("name") in names))
    setups = {
        str(t.get("name"))
        for t in registered
        if _fixtures(t, "FIXTURES_SETUP") & required and t.get("name") != DOWNLOAD_FIXTURE
    }
    return set(names) | setups


def run_side(
    ctest: Path, build_dir: Path, suites: list[Suite], only: Mapping[str, Collection[str]] | None = None
) -> dict[str, dict[str, CaseResult]]:
    """Every suite in one build dir (`only`: just these tests of each suite): its cases by test name, per
    suite; VerifyError when CTest wrote no report (it did not run)."""
    if not (build_dir / "CTestTestfile.cmake").is_file():
        raise VerifyError(f"{build_dir} has no CTestTestfile.cmake: the build registered no test")
    dest = download_destination(_registered(ctest, build_dir))
    out: dict[str, dict[str, CaseResult]] = {}
    for suite in suites:
        args = list(suite.args)
        if only is not None:
            if not only.get(suite.name):
                out[suite.name] = {}
                continue
            args += ["-R", "^(" + "|".join(re.escape(n) for n in sorted(only[suite.name])) + ")$"]
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
    work_build = session.work_build
    default = session.env.default
    suites = [Suite("main", MAIN, NATIVE, default.path)] + [
        Suite(f"model@{m.name}", MODEL, REAL_MODEL, m.path, model_file=True) for m in session.env.models
    ]
    declared = session.expectations().why_upstream_fails
    patched_dir = work_build(False)
    # what the suites run: every executable and library of the patched work build (the tests' own
    # executables), the baseline's inputs (its tests build from the pin alone) and the models
    inputs = {
        "part": "upstream",
        "patched": files_digest(patched_dir / "bin"),
        "baseline": session.baseline.manifest.inputs_digest if session.baseline else None,
        "suites": [[s.name, list(s.args), s.model.name, s.model_file] for s in suites],
    }

    own = session.patched.manifest.build.native_tests

    def compare() -> tuple[list[Check], dict[str, str]]:
        return _compare(session.ctest, work_build, patched_dir, suites, declared, own), {}

    return session.kept("upstream", inputs, compare)[0]


def _compare(
    ctest: Path,
    work_build: WorkBuild,
    patched_dir: Path,
    suites: list[Suite],
    declared: Callable[[str], str | None],
    own: Collection[str] = (),
) -> list[Check]:
    # the baseline, configured (no test built yet), lists its tests; the patched build runs every suite less
    # the tests of `own` (the series' native tests) that the baseline lacks
    configured = work_build(True, ())
    listed = {s.name: {str(t.get("name")) for t in _registered(ctest, configured, s.args)} for s in suites}
    only_ours = set(own) - set().union(*listed.values())
    patched = run_side(ctest, patched_dir, [replace(s, args=without(s.args, only_ours)) for s in suites])
    # the baseline builds and runs the tests of each suite that do not pass on the patched build, with the
    # setups of their fixtures
    wanted = {
        s.name: {n for n in listed[s.name] if not (n in patched[s.name] and patched[s.name][n].passed)}
        for s in suites
    }
    needed = with_setups(_registered(ctest, configured), set().union(*wanted.values()))
    baseline_dir = work_build(True, tuple(sorted(needed))) if needed else configured
    baseline = run_side(ctest, baseline_dir, suites, only=wanted)
    checks = []
    for suite in suites:
        b, p = baseline[suite.name], patched[suite.name]
        if not p or not listed[suite.name]:
            empty = " and ".join(
                side for side, got in (("baseline", listed[suite.name]), ("patched", p)) if not got
            )
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
        checks += compare(suite.name, suite.evidence, b, p, declared, listed[suite.name])
    return checks


GROUP = GroupSpec(_verify, needs_baseline=True)
