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


def test_the_published_tests_carry_the_fixture_a_series_test_requires(tmp_path: Path) -> None:
    """A series test that requires upstream's model-directory fixture is published with the test that sets
    it up, and the directory moves from the work build into the published one (created there); upstream's
    other tests and fixtures stay out."""
    work = tmp_path / "work"
    (work / "tests" / "test-models").mkdir(parents=True)
    models = f"{work}/tests/test-models/"

    def test(name: str, args: list[str], **props: Any) -> dict[str, Any]:
        properties = [{"name": k, "value": v} for k, v in props.items()]
        return {
            "name": name,
            "command": [str(work / "bin" / "test-llama-archs"), *args],
            "properties": properties,
        }

    registered = [
        test("test-generate-models", ["-o", models], FIXTURES_SETUP=["generate-models"]),
        test("test-download-model", ["x"], FIXTURES_SETUP=["test-download-model"]),
        test("test-save-load-state", ["--models", models], FIXTURES_REQUIRED=["generate-models"]),
        test("test-llama-archs-layer-inputs", ["--layer-inputs"], LABELS=["main"]),
        test("test-llama-archs-layer-ranges", ["--models", models], FIXTURES_REQUIRED=["generate-models"]),
    ]
    declared = {"test-llama-archs-layer-inputs": "a", "test-llama-archs-layer-ranges": "b"}
    staging, final = tmp_path / "staging", tmp_path / "final"
    staging.mkdir()
    llama: Any = SimpleNamespace(tests=lambda: registered)
    tests = artifacts.native_test_files(staging, llama, declared, work / "bin", final / "bin")
    assert [t["name"] for t in tests] == [
        "test-generate-models",
        "test-llama-archs-layer-inputs",
        "test-llama-archs-layer-ranges",
    ]
    assert tests[0]["command"] == [
        str(final / "bin" / "test-llama-archs"),
        "-o",
        f"{final}/tests/test-models/",
    ]
    assert tests[2]["command"][-1] == f"{final}/tests/test-models/"
    assert (staging / "tests" / "test-models").is_dir()
    testfile = (staging / "CTestTestfile.cmake").read_text()
    assert "FIXTURES_SETUP [==[generate-models]==]" in testfile
    assert testfile.count("FIXTURES_REQUIRED [==[generate-models]==]") == 1
    assert str(work) not in testfile
