"""The `series` group: every prefix of the series, the first k patches built on their own (cached by their
own inputs digest), passes the native tests it adds; the whole series is the last prefix."""

from __future__ import annotations

from dgr.contracts.report import NATIVE, Check
from dgr.verify.checks import native
from dgr.verify.checks.native import TestRun
from dgr.verify.checks.session import GroupSpec, Session


def prefix_check(k: int, patches: list[str], digest: str, result: TestRun) -> Check:
    """The first k patches of the series, built on their own, pass their own native tests."""
    failed = [c.name for c in result.checks if not c.passed]
    return Check(
        group="series",
        name=f"prefix-{k}",
        evidence=NATIVE,
        passed=not failed,
        figures={
            "patches": patches,
            "inputs_digest": digest,
            "tests": {c.name: c.passed for c in result.checks},
        },
        detail=("builds; registers no native test of its own" if not result.checks else "")
        if not failed
        else "failing: "
        + ", ".join(failed)
        + "\n"
        + "\n".join(c.detail for c in result.checks if not c.passed),
    )


def _verify(session: Session) -> list[Check]:
    """A check per prefix of the series: the first k patches, built on their own (cached by their own inputs
    digest), pass the native tests they add; the whole series is the last prefix (its tests as the native
    group ran them, when it did)."""
    patched = session.patched
    whole = session.native_ran
    names = [p.name for p in patched.manifest.patches]
    out = []
    for k in range(1, len(names) + 1):
        prefix = patched if k == len(names) else session.build_prefix(k)
        if not prefix.manifest.build.native_tests:
            # a prefix that registers no test of its own (the first patch: no change in behaviour) is judged
            # by its build here and by the graph comparison with upstream
            ran = TestRun([])
        elif k == len(names) and whole is not None:
            ran = whole
        else:
            ran = native.run(session.ctest, prefix.path)
        out.append(prefix_check(k, names[:k], prefix.manifest.inputs_digest, ran))
    return out


GROUP = GroupSpec(_verify)
