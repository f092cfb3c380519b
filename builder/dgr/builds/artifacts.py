"""Step 5 of `dgr build`: the artifacts copied to the staging directory (bin/ with the libraries, native
tests and worker), the CTest file of the native tests pointing at them, and the build manifest."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dgr.builds.buildplan import Plan
from dgr.builds.cmake import CMakeProject, Compiler
from dgr.contracts.buildmanifest import (
    AppliedPatch,
    BuildInfo,
    BuildManifest,
    PatchedInfo,
    ToolchainInfo,
    UpstreamInfo,
)
from dgr.core.digest import sha256_canonical
from dgr.errors import BuildError
from dgr.git import apply

_LIB_PATTERNS = ("libllama.so*", "libggml*.so*")
_TEST_LIB_PATTERN = "libllama-common.so*"
# upstream's tools link a library of their own (lib<tool>-impl.so) beside llama-common
_TOOL_LIB_PATTERN = "lib*-impl.so*"


def _copy(src: Path, dest_dir: Path) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest_dir / src.name, follow_symlinks=False)


def _is_executable(path: Path) -> bool:
    if path.is_symlink() or not path.is_file() or not os.access(path, os.X_OK):
        return False
    with path.open("rb") as fh:
        return fh.read(4) == b"\x7fELF" and ".so" not in path.name


def collect(dest: Path, llama_bin: Path, plan: Plan, worker: CMakeProject | None) -> None:
    patterns = [
        *_LIB_PATTERNS,
        *((_TEST_LIB_PATTERN,) if plan.native_tests or plan.tool_targets else ()),
        *((_TOOL_LIB_PATTERN,) if plan.tool_targets else ()),
    ]
    for pattern in patterns:
        for lib in sorted(llama_bin.glob(pattern)):
            _copy(lib, dest)
    for test in (*plan.native_targets, *plan.tool_targets):
        exe = llama_bin / test
        if not _is_executable(exe):
            raise BuildError(
                f"native test {test} was not built at {exe}",
                hint="check the patch's tests/CMakeLists.txt entry",
            )
        _copy(exe, dest)
    if worker is not None:
        exes = worker.executables()
        if not exes:
            raise BuildError(f"the worker project {worker.source} defines no executable")
        for exe in exes:
            if not _is_executable(exe):
                raise BuildError(f"the worker executable {exe} was not built")
            _copy(exe, dest)


# a line of a CTestTestfile.cmake that CMake generates: add_test("name" "/path/to/exe" "arg" ...)
_ADD_TEST = re.compile(r'^add_test\("((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"', re.MULTILINE)


def upstream_test_executables(build_dir: Path) -> dict[str, str]:
    """The target of the executable that each test registered in build_dir runs from its bin/, by test name
    (read from the CTestTestfile.cmake files CMake generated: CTest itself names no command whose executable
    is not built yet); a target's executable is named after it there. A test that runs another program (a
    CMake script) has none."""
    work_bin = build_dir / "bin"
    found = {}
    for testfile in build_dir.rglob("CTestTestfile.cmake"):
        for name, command in _ADD_TEST.findall(testfile.read_text(errors="replace")):
            if Path(command).parent == work_bin:
                found[name] = Path(command).name
    return found


def upstream_test_targets(build_dir: Path) -> list[str]:
    """The targets of the executables the tests registered in build_dir run from its bin/."""
    return sorted(set(upstream_test_executables(build_dir).values()))


def unregistered(declared: Mapping[str, str], registered: list[dict[str, Any]]) -> None:
    """BuildError naming every test a patch declares (`declared`: test -> patch) that CTest does not
    register (`registered`: `ctest --show-only=json-v1`'s tests): a test that never runs passes nothing."""
    names = {t["name"] for t in registered}
    missing = [
        f"{patch} declares the native test {name}" for name, patch in declared.items() if name not in names
    ]
    if missing:
        raise BuildError(
            f"{'; '.join(missing)}, but CTest never registers it",
            hint="check the patch's tests/CMakeLists.txt entry (its name, and the condition around it)",
        )


def _fixtures(props: Mapping[str, Any], key: str) -> set[str]:
    """The fixtures a CTest property (FIXTURES_SETUP, FIXTURES_REQUIRED) names, as a set."""
    value = props.get(key, [])
    return set(value if isinstance(value, list) else str(value).split(";")) - {""}


def native_test_files(
    staging: Path, llama: CMakeProject, declared: Mapping[str, str], work_bin: Path, final_bin: Path
) -> list[dict[str, Any]]:
    """CTestTestfile.cmake and tests.json for the patch-added tests (`declared`: test -> the patch that adds
    it), and the tests that set up a fixture they require (upstream's `test-generate-models` for
    FIXTURES_REQUIRED generate-models), pointing at the final bin/; a path of the work build dir in their
    arguments (the fixture's model directory) becomes the same path in the final dir, created there.
    BuildError when CTest does not register a declared test."""
    if not declared:
        return []
    registered = llama.tests()
    unregistered(declared, registered)
    props_of = {t["name"]: {p["name"]: p["value"] for p in t.get("properties", [])} for t in registered}
    required = {f for name in declared for f in _fixtures(props_of.get(name, {}), "FIXTURES_REQUIRED")}
    work_dir, final_dir = work_bin.parent, final_bin.parent

    def place(arg: str) -> str:
        path = Path(arg)
        if path.parent == work_bin:
            return str(final_bin / path.name)
        if not path.is_absolute() or not path.is_relative_to(work_dir):
            return arg
        rel = path.relative_to(work_dir)
        if (work_dir / rel).is_dir():
            (staging / rel).mkdir(parents=True, exist_ok=True)
        return str(final_dir / rel) + ("/" if arg.endswith("/") else "")

    tests = []
    for test in registered:
        props = props_of[test["name"]]
        setup = _fixtures(props, "FIXTURES_SETUP") & required
        if test["name"] not in declared and not setup:
            continue  # upstream's own tests
        workdir = props.get("WORKING_DIRECTORY", ".")
        tests.append(
            {
                "name": test["name"],
                "command": [place(c) for c in test["command"]],
                "working_directory": str(final_dir) if workdir == "." else workdir,
                "labels": props.get("LABELS", []),
                "fixtures_setup": sorted(setup),
                "fixtures_required": sorted(_fixtures(props, "FIXTURES_REQUIRED") & required),
            }
        )
    lines = ["# Generated by dgr build: the native tests added by the patch series."]
    for t in tests:
        args = " ".join(f"[==[{c}]==]" for c in t["command"])
        lines.append(f"add_test([==[{t['name']}]==] {args})")
        labels = ";".join(t["labels"])
        fixtures = "".join(
            f" FIXTURES_{kind.upper()} [==[{';'.join(t[f'fixtures_{kind}'])}]==]"
            for kind in ("setup", "required")
            if t[f"fixtures_{kind}"]
        )
        lines.append(
            f"set_tests_properties([==[{t['name']}]==] PROPERTIES "
            f"WORKING_DIRECTORY [==[{t['working_directory']}]==] LABELS [==[{labels}]==]{fixtures})"
        )
    (staging / "CTestTestfile.cmake").write_text("\n".join(lines) + "\n")
    (staging / "tests.json").write_text(json.dumps(tests, indent=2) + "\n")
    return tests


def manifest(
    plan: Plan,
    source: str,
    applied: apply.Applied,
    compilers: dict[str, Compiler],
    src: Path,
    build_dir: Path,
    tests: list[dict[str, Any]],
) -> BuildManifest:
    commits = dict(applied.commits)
    return BuildManifest(
        build=BuildInfo(
            inputs_digest=plan.digest,
            upstream_only=plan.request.upstream_only,
            targets=tuple(plan.targets),
            native_tests=tuple(t["name"] for t in tests),
            worker=bool(plan.worker_files),
            source_dir=str(src),
            build_dir=str(build_dir),
        ),
        upstream=UpstreamInfo(
            repo=plan.upstream_lock.repo, commit=plan.pin.commit, tree=plan.pin.tree, source=source
        ),
        patched=PatchedInfo(commit=applied.commit, tree=applied.tree),
        patches=tuple(
            AppliedPatch(name=ref.name, sha256=ref.sha256, commit=commits[ref.name]) for ref in plan.patches
        ),
        toolchain=ToolchainInfo(
            cmake=plan.toolchain.cmake_version,
            ninja=plan.toolchain.ninja_version,
            cc=compilers["cc"].version,
            cc_path=compilers["cc"].path,
            cxx=compilers["cxx"].version,
            cxx_path=compilers["cxx"].path,
        ),
        inputs={key: sha256_canonical(value) for key, value in sorted(plan.inputs.items())},
        cmake_options=plan.inputs["cmake_options"],
        source_date_epoch=plan.pin.epoch,
    )
