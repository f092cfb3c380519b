"""The series group: a test a patch declares and CTest never registers fails the build of that prefix,
naming the test and the patch; a registered test that never ran fails its prefix."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dgr.builds import artifacts, buildplan
from dgr.contracts.report import Check
from dgr.errors import BuildError
from dgr.series import patchfile
from dgr.verify.checks import native, series

from tests.test_build_plan import ADDS_TESTS

REGISTERED = [{"name": "test-sampling"}, {"name": "test-layer-range"}, {"name": "test-bundle-v1"}]


def test_the_patch_that_declares_each_test() -> None:
    declared = buildplan.declared_tests([("layer-range.patch", patchfile.parse(ADDS_TESTS))])
    assert declared == {
        "test-layer-range": "layer-range.patch",
        "test-bundle-v1": "layer-range.patch",
        "test-llama-archs-layer-ranges": "layer-range.patch",
    }


def test_a_declared_test_ctest_never_registers_fails_the_build_naming_it() -> None:
    declared = buildplan.declared_tests([("layer-range.patch", patchfile.parse(ADDS_TESTS))])
    with pytest.raises(BuildError) as err:
        artifacts.unregistered(declared, REGISTERED)
    assert "layer-range.patch declares the native test test-llama-archs-layer-ranges" in str(err.value)
    assert "CTest never registers it" in str(err.value)
    artifacts.unregistered(declared, [*REGISTERED, {"name": "test-llama-archs-layer-ranges"}])


def passed(name: str) -> Check:
    return Check(group="native", name=name, evidence="native test", passed=True)


def test_a_registered_test_that_never_ran_fails_its_prefix() -> None:
    ran = native.TestRun([passed("test-layer-range")])
    check = series.prefix_check(2, ["a.patch", "b.patch"], "d", ran, ("test-layer-range", "test-bundle-v1"))
    assert not check.passed and "registered but never run: test-bundle-v1" in check.detail
    assert series.prefix_check(2, ["a.patch", "b.patch"], "d", ran, ("test-layer-range",)).passed


def built(tests: tuple[str, ...]) -> Any:
    build = SimpleNamespace(native_tests=tests)
    manifest = SimpleNamespace(
        build=build,
        inputs_digest="d" * 64,
        patches=[SimpleNamespace(name="a.patch"), SimpleNamespace(name="b.patch")],
    )
    return SimpleNamespace(path=Path("/nonexistent"), manifest=manifest)


def test_a_prefix_that_does_not_build_is_a_failed_check_naming_why() -> None:
    def build_prefix(k: int) -> Any:
        raise BuildError("a.patch declares the native test test-x, but CTest never registers it")

    session = SimpleNamespace(
        patched=built(()), native_ran=None, build_prefix=build_prefix, ctest=Path("ctest")
    )
    first, last = series.GROUP.verify(session)  # type: ignore[arg-type]
    assert first.name == "prefix-1" and not first.passed
    assert "a.patch declares the native test test-x" in first.detail
    assert last.name == "prefix-2" and last.passed  # the whole series registers no test of its own
