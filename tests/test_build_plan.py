"""The build plan: native tests derived from the patches, the inputs digest and what enters it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from dgr.builds import build, buildplan
from dgr.builds.cmake import CMakeProject
from dgr.cli import build_parser, main
from dgr.core.paths import Context
from dgr.series import patchfile

from tests.helpers import FIXTURES, fake_toolchain, write_manifest

ADDS_TESTS = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@b>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: [PATCH] tests : add two tests

Body.

diff --git a/tests/CMakeLists.txt b/tests/CMakeLists.txt
index 1111111..2222222 100644
--- a/tests/CMakeLists.txt
+++ b/tests/CMakeLists.txt
@@ -1,1 +1,5 @@
 llama_build_and_test(test-sampling.cpp)
+llama_build_and_test(test-layer-range.cpp)
+llama_build_and_test(test-bundle.cpp NAME test-bundle-v1 LABEL main)
+# llama_build_and_test(test-commented-out.cpp)
+llama_test(test-llama-archs NAME test-llama-archs-layer-ranges LABEL main ARGS --layer-ranges)
"""


def test_native_tests_from_added_lines() -> None:
    patches = [patchfile.parse(ADDS_TESTS)]
    assert buildplan.native_tests(patches) == (
        "test-layer-range",
        "test-bundle-v1",
        "test-llama-archs-layer-ranges",
    )
    # a test of a target the patch does not build itself: its target is built too
    assert buildplan.native_test_targets(patches)[-1] == ("test-llama-archs-layer-ranges", "test-llama-archs")


ADDS_EXAMPLE = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@b>
Date: Thu, 1 Jan 2026 00:00:00 +0000
Subject: [PATCH] examples : add an example

Body.

diff --git a/examples/split/CMakeLists.txt b/examples/split/CMakeLists.txt
new file mode 100644
index 0000000..2222222
--- /dev/null
+++ b/examples/split/CMakeLists.txt
@@ -0,0 +1,5 @@
+set(TARGET llama-split-example)
+add_executable(${TARGET} split.cpp)
+add_test(NAME test-split-example COMMAND llama-split-example -m model.gguf -n 4)
+# add_test(NAME test-commented-out COMMAND llama-split-example)
+set_tests_properties(test-split-example PROPERTIES LABELS main)
diff --git a/tools/other/CMakeLists.txt b/tools/other/CMakeLists.txt
index 1111111..2222222 100644
--- a/tools/other/CMakeLists.txt
+++ b/tools/other/CMakeLists.txt
@@ -1,1 +1,2 @@
 set(TARGET llama-other)
+add_test(NAME test-not-an-example COMMAND llama-other)
"""


def test_an_examples_test_is_a_native_test_of_its_executable() -> None:
    """upstream's form (eval-callback): an example registers its test in its own CMakeLists.txt; a test of a
    tool or a commented-out line is none of the series' native tests."""
    patches = [patchfile.parse(ADDS_TESTS), patchfile.parse(ADDS_EXAMPLE)]
    assert buildplan.native_test_targets(patches)[-1] == ("test-split-example", "llama-split-example")
    assert "test-not-an-example" not in buildplan.native_tests(patches)
    assert "test-commented-out" not in buildplan.native_tests(patches)


def test_fixture_series_adds_no_native_tests() -> None:
    patches = [patchfile.load(p) for p in sorted((FIXTURES / "series" / "patches").iterdir())]
    assert buildplan.native_tests(patches) == ()


def digest(request: buildplan.Request | None = None) -> str:
    return buildplan.plan(Context.discover(), request or buildplan.Request()).digest


def test_digest_is_stable_and_input_sensitive(repo: Path) -> None:
    first = digest()
    assert digest() == first
    baseline = digest(buildplan.Request(upstream_only=True))
    assert baseline != first
    patch = repo / "patches" / "docs-add-a-fixture-page.patch"
    patch.write_text(patch.read_text().replace("A page added by a patch.", "A page added by the patch."))
    write_manifest(repo)
    assert digest() != first
    # the baseline does not depend on the series
    assert digest(buildplan.Request(upstream_only=True)) == baseline


def test_bookkeeping_does_not_enter_the_digest(repo: Path) -> None:
    """The lock's sources and rebase targets, and where the manifest says the series lives, change no
    build: they leave the digest as it is; the pinned commit's date does not."""
    first = digest()
    lock = repo / "locks" / "upstream.toml"
    text = lock.read_text()
    lock.write_text(
        text.replace('url = "http://127.0.0.1:9/llama.cpp.git"', 'url = "http://example.invalid/x"')
    )
    assert digest() == first
    lock.write_text(
        text.replace("commit_date = 2026-08-16T14:53:13+02:00", "commit_date = 2026-08-16T14:53:14+02:00")
    )
    assert digest() != first


def test_comments_of_the_order_file_do_not_enter_the_digest_but_the_order_does(repo: Path) -> None:
    first = digest()
    order = repo / "series" / "series"
    names = [line for line in order.read_text().splitlines() if line and not line.startswith("#")]
    order.write_text("# a comment of the series\n" + "\n".join(names) + "\n")
    write_manifest(repo)
    assert digest() == first
    order.write_text("\n".join(reversed(names)) + "\n")
    write_manifest(repo)
    assert digest() != first


def test_worker_sources_enter_the_digest(repo: Path) -> None:
    without = digest()
    shutil.copytree(FIXTURES / "worker", repo / "verify" / "worker")
    with_worker = digest()
    assert with_worker != without
    (repo / "verify" / "worker" / "main.cpp").write_text("int main() { return 0; }\n")
    assert digest() != with_worker
    # the baseline builds the worker too (against the unpatched API), so its sources enter its digest
    baseline = buildplan.plan(Context.discover(), buildplan.Request(upstream_only=True))
    assert set(baseline.worker_files) == {"CMakeLists.txt", "main.cpp"}


def test_definitions_fix_build_commit_and_map_paths(repo: Path) -> None:
    plan = buildplan.plan(Context.discover(), buildplan.Request())
    defs = plan.inputs["cmake_options"]
    assert defs["LLAMA_BUILD_COMMIT"].endswith("-p3")
    assert defs["LLAMA_BUILD_NUMBER"] == "0"
    assert "-ffile-prefix-map={src}=/src" in defs["CMAKE_C_FLAGS"]
    assert defs["GGML_NATIVE"] == "OFF"
    assert plan.targets == ["llama", "ggml"]


def test_tampered_series_refused_before_planning(repo: Path) -> None:
    (repo / "series" / "series").write_text("# changed\n")
    with pytest.raises(Exception, match="series/series does not match"):
        digest()


def test_compiler_change_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "last-compiler.toml"
    state.write_text('cc = "gcc (old) 11.0"\ncxx = "g++ (old) 11.0"\n')
    toolchain = fake_toolchain("gcc (new) 12.2", "g++ (old) 11.0")
    build._warn_if_compiler_changed(state, toolchain)
    err = capsys.readouterr().err
    assert "the cc compiler changed since the last build: was 'gcc (old) 11.0', now 'gcc (new) 12.2'" in err
    assert "cxx" not in err


def test_unknown_upstream_spec_is_a_usage_error(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--upstream", "pypi:llama-cpp-python==9.9.9"]) == 2
    assert "unknown upstream 'pypi:llama-cpp-python==9.9.9'" in capsys.readouterr().err


def test_jobs_go_to_ninja_and_not_into_the_digest(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(
        "dgr.core.proc.stream", lambda cmd, **kwargs: calls.append([str(c) for c in cmd]) or []
    )
    toolchain = fake_toolchain()
    project = CMakeProject(toolchain, tmp_path / "src", tmp_path / "build", "Release", {})
    project.build_targets(["llama"], 3)
    project.build_targets(["llama"])
    assert calls == [
        ["ninja", "-C", str(tmp_path / "build"), "-j", "3", "llama"],
        ["ninja", "-C", str(tmp_path / "build"), "llama"],
    ]
    # the option is the command's, not the request's: the inputs digest cannot see it
    assert "jobs" not in {f.name for f in dataclasses.fields(buildplan.Request)}
    assert build_parser().parse_args(["build", "-j", "3"]).jobs == 3
