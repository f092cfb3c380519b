"""The `series` group: every prefix of the series, the first k patches built on their own (cached by their
own inputs digest), passes the native tests it adds; the whole series is the last prefix."""

from __future__ import annotations

from functools import partial

from dgr.contracts.report import NATIVE, Check
from dgr.verify.checks import native
from dgr.verify.checks.report import guarded
from dgr.verify.checks.session import Built, GroupSpec, Session
from dgr.verify.checks.testrun import TestRun


def prefix_check(
    k: int, patches: list[str], digest: str, result: TestRun, registered: tuple[str, ...] = ()
) -> Check:
    """The first k patches of the series, built on their own, pass their own native tests: every test the
    build registered (`registered`, the manifest's: `dgr build` fails on a test a patch declares and CTest
    does not register) ran and passed."""
    ran = {c.name for c in result.checks}
    failed = [c.name for c in result.checks if c.failed]
    skipped = [c.detail for c in result.checks if c.not_compared]
    not_run = [name for name in registered if name not in ran]
    problems = []
    if failed:
        problems.append(
            "failing: " + ", ".join(failed) + "\n" + "\n".join(c.detail for c in result.checks if c.failed)
        )
    if not_run:
        problems.append(f"registered but never run: {', '.join(not_run)}")
    return Check(
        group="series",
        name=f"prefix-{k}",
        evidence=NATIVE,
        passed=not problems,
        figures={
            "patches": patches,
            "inputs_digest": digest,
            "tests": {c.name: c.passed for c in result.checks if not c.not_compared},
            **({"skipped": skipped} if skipped else {}),
        },
        detail="\n".join(problems)
        or ("builds; registers no native test of its own" if not result.checks else ""),
    )


def _prefix(session: Session, k: int, names: list[str]) -> Check:
    whole = session.native_ran
    prefix: Built = session.patched if k == len(names) else session.build_prefix(k)
    registered = prefix.manifest.build.native_tests
    if not registered:
        # a prefix that registers no test of its own (the first patch: no change in behaviour) is judged by
        # its build here and by the graph comparison with upstream; its build fails when a patch declares
        # a test that CTest does not register (dgr.builds.artifacts.unregistered)
        ran = TestRun([])
    elif k == len(names) and whole is not None:
        ran = whole
    else:
        ran = native.kept_run(session, prefix)
    return prefix_check(k, names[:k], prefix.manifest.inputs_digest, ran, registered)


def _verify(session: Session) -> list[Check]:
    """A check per prefix of the series: the first k patches, built on their own (cached by their own inputs
    digest), pass the native tests they add; the whole series is the last prefix (its tests as the native
    group ran them, when it did). A prefix that does not build (a declared test CTest does not register) is
    a failed check naming why."""
    names = [p.name for p in session.patched.manifest.patches]
    out = []
    for k in range(1, len(names) + 1):
        out += guarded("series", f"prefix-{k}", NATIVE, partial(_prefix, session, k, names))
    return out


GROUP = GroupSpec(_verify)
