"""`dgr export-upstream`: a deterministic package whose mails apply with `git am`, and every refusal.

The fake upstream and series of conftest.py stand in for llama.cpp; the verify
report is a fake but well-formed file at the digest `build.plan` computes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr import buildplan, package
from dgr.cli import main
from dgr.contracts import GROUPS
from dgr.figures import counts_text, fmt
from dgr.patchfile import why_paragraphs
from dgr.paths import Context

from tests import helpers
from tests.helpers import (
    GIT_ENV,
    ROOT,
    WHY,
    FakeUpstream,
    commit_all,
    format_patch,
    git,
    message,
    write_manifest,
)

FIXTURE_CONCERNS = {
    "docs-add-a-fixture-page.patch": ("ownership", ["docs/*.md"]),
    "readme-name-the-cann-vendor.patch": ("boundary", ["README.md"]),
    "readme-mark-hexagon-experimental.patch": ("kv", ["README.md"]),
}
README = (
    "# fixture\n\n```sh\npython3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/dgr build "
    "&& .venv/bin/dgr verify\n```\n"
)


def write_package(repo: Path, concerns: dict[str, tuple[str, list[str]]], **extra: Any) -> None:
    """upstream-package/ (the repository's templates, a config for `concerns`) and a README."""
    shutil.copytree(ROOT / "upstream-package" / "templates", repo / "upstream-package" / "templates")
    config = {
        "title": "docs : a fixture series",
        "deny_words": ["meshnet", "dgr", "routing", "billing", "relay"],
        "drop_trailers": ["Upstream-Status"],
        "cover": {"summary": "A fixture series.\n", "why": "Because the tests need one.\n"},
        "reproduce": {"clone": "git clone https://example.invalid/fixture.git fixture && cd fixture"},
        "concerns": [
            {"patch": name, "title": f"Concern {i}", "verify_group": group, "paths": paths}
            for i, (name, (group, paths)) in enumerate(concerns.items(), start=1)
        ],
        **extra,
    }
    (repo / "upstream-package" / "package.toml").write_text(tomli_w.dumps(config))
    (repo / "README.md").write_text(README)


def write_report(passed: bool = True, groups: tuple[str, ...] = GROUPS, native: tuple[str, ...] = ()) -> Path:
    """A well-formed verify report for the current inputs, in the test's cache."""
    digest = buildplan.plan(Context.discover(), buildplan.Request()).digest
    return helpers.write_report(digest, passed, groups, native)


@pytest.fixture
def packaged(repo: Path) -> Path:
    write_package(repo, FIXTURE_CONCERNS)
    write_report()
    return repo


def export(out: Path, *args: str) -> int:
    return main(["export-upstream", "--out", str(out), *args])


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def edit_patch(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / "patches" / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    write_manifest(repo)
    write_report()  # a passing report for the new inputs: only the patch itself is wrong


def refused(out: Path, code: int, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    assert export(out) == code
    err = capsys.readouterr().err
    for text in expected:
        assert text in err
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return err


# --------------------------------------------------------------------------- the package


def test_two_renders_are_byte_identical(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    assert export(first) == 0
    assert capsys.readouterr().out.strip() == str(first)
    assert export(second, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert tree(first) == tree(second)
    assert sorted(tree(first)) == [
        "API.md",
        "EVIDENCE.md",
        "MANIFEST.sha256",
        "OUTREACH.md",
        "TEST-MAP.md",
        "evidence.json",
        "patches/0000-cover-letter.patch",
        "patches/0001-docs-add-a-fixture-page.patch",
        "patches/0002-readme-name-the-cann-vendor.patch",
        "patches/0003-readme-mark-hexagon-experimental.patch",
        "series.mbox",
    ]
    files = tree(first)
    assert summary["files"] == {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
    manifest = files["MANIFEST.sha256"].decode().splitlines()
    assert manifest == [
        f"{hashlib.sha256(files[p]).hexdigest()}  {p}" for p in sorted(files) if p != "MANIFEST.sha256"
    ]
    # an earlier export is replaced, with the same bytes
    assert export(first) == 0
    assert tree(first) == tree(second)


def test_default_out_is_in_the_repository(packaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-upstream"]) == 0
    assert Path(capsys.readouterr().out.strip()) == packaged / "upstream-package" / "out"
    assert (packaged / "upstream-package" / "out" / "MANIFEST.sha256").is_file()


def test_mails_are_numbered_and_apply_with_git_am(
    packaged: Path, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    mails = sorted((out / "patches").glob("000[1-9]-*.patch"))
    cover = (out / "patches" / "0000-cover-letter.patch").read_text()
    assert "Subject: [PATCH 0/3] docs : a fixture series" in cover
    assert "From: Fixture Author <author@example.invalid>" in cover
    assert "Date: Tue, 14 Nov 2023 22:13:20 +0000" in cover
    assert f"base-commit: {fake_upstream.base}" in cover
    for n, mail in enumerate(mails, start=1):
        text = mail.read_text()
        assert f"Subject: [PATCH {n}/3] " in text
        assert "Upstream-Status" not in text
    assert (out / "series.mbox").read_text() == cover + "".join(m.read_text() for m in mails)

    work = tmp_path / "am"
    git(tmp_path, "clone", "-q", str(fake_upstream.path), str(work))
    git(work, "checkout", "-q", "--detach", fake_upstream.base)
    git(work, "am", *map(str, mails))
    subjects = git(work, "log", "--reverse", "--format=%s", f"{fake_upstream.base}..HEAD").splitlines()
    assert subjects == [
        "docs : add a fixture page",
        "readme : name the CANN vendor",
        "readme : mark Hexagon experimental",
    ]
    assert "Huawei Ascend NPU" in (work / "README.md").read_text()
    assert "[Experimental]" in (work / "README.md").read_text()
    applied_tree = git(work, "rev-parse", "HEAD^{tree}")

    # the mbox: git am stops at the cover letter (no diff); skipping it applies the series
    git(work, "checkout", "-q", "--detach", fake_upstream.base)
    env = {**os.environ, **GIT_ENV}
    stopped = subprocess.run(
        ["git", "am", str(out / "series.mbox")], cwd=work, env=env, capture_output=True, text=True
    )
    assert stopped.returncode != 0
    assert "Patch is empty" in stopped.stdout + stopped.stderr
    git(work, "am", "--skip")
    assert git(work, "rev-parse", "HEAD^{tree}") == applied_tree


def test_documents_name_the_pin_the_tests_and_the_figures(
    packaged: Path, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    outreach = (out / "OUTREACH.md").read_text()
    assert fake_upstream.base in outreach
    commands = outreach.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert commands == [
        "git clone https://example.invalid/fixture.git fixture && cd fixture && python3 -m venv .venv "
        "&& .venv/bin/pip install -e .",
        ".venv/bin/dgr build",
        ".venv/bin/dgr verify",
    ]
    assert "(patches/0001-docs-add-a-fixture-page.patch)" in outreach
    test_map = (out / "TEST-MAP.md").read_text()
    assert "| `ownership-check/fixture` | synthetic fixture | pass |" in test_map
    evidence = (out / "EVIDENCE.md").read_text()
    assert "max_abs_diff=0; ratio=0.333333; shape=[8, 576]; bit_exact=true" in evidence
    data = json.loads((out / "evidence.json").read_text())
    assert data["summary"]["by_group"]["kv"] == {"total": 1, "passed": 1}
    assert data["checks"][1]["figures"]["ratio"] == 0.333333
    assert WHY in (out / "API.md").read_text()


# --------------------------------------------------------------------------- refusals


def test_refuses_a_word_of_ours(packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_patch(
        packaged,
        "docs-add-a-fixture-page.patch",
        "+A page added by a patch.",
        "+A page added by a Relay patch.",
    )
    lines = (packaged / "patches" / "docs-add-a-fixture-page.patch").read_text().split("\n")
    number = next(i for i, line in enumerate(lines, start=1) if "Relay" in line)
    refused(
        tmp_path / "out",
        7,
        capsys,
        f"patches/docs-add-a-fixture-page.patch:{number}: word of ours 'Relay'",
        "added line of docs/fixture.md",
    )


def test_refuses_a_word_of_ours_in_the_subject(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "readme-name-the-cann-vendor.patch", "name the CANN vendor", "name the CANN vendor (dgr)"
    )
    refused(tmp_path / "out", 7, capsys, "patches/readme-name-the-cann-vendor.patch:4: word of ours 'dgr'")


def test_refuses_whitespace_errors(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "docs-add-a-fixture-page.patch", "+A page added by a patch.", "+A page added by a patch.  "
    )
    refused(
        tmp_path / "out",
        7,
        capsys,
        "patches/docs-add-a-fixture-page.patch: git diff --check: docs/fixture.md:3: trailing whitespace.",
    )


def test_refuses_files_outside_the_declared_paths(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_package(repo, {**FIXTURE_CONCERNS, "docs-add-a-fixture-page.patch": ("ownership", ["docs/*/*.md"])})
    write_report()
    refused(
        tmp_path / "out",
        7,
        capsys,
        "patches/docs-add-a-fixture-page.patch: touches docs/fixture.md, outside the paths of its concern",
    )


def test_refuses_a_patch_that_does_not_apply(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_patch(
        packaged, "readme-name-the-cann-vendor.patch", "-| CANN | Ascend NPU |", "-| CANN | Ascend XPU |"
    )
    refused(
        tmp_path / "out", 5, capsys, "patches/readme-name-the-cann-vendor.patch does not apply", "README.md"
    )


def test_refuses_without_a_report(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_package(repo, FIXTURE_CONCERNS)
    refused(tmp_path / "out", 9, capsys, "there is no verify report for the current inputs", "dgr verify")


@pytest.mark.parametrize(
    ("passed", "groups", "expected"),
    [
        (False, GROUPS, "4 check(s) failed: native/native-check/fixture"),
        (True, ("native", "ownership", "boundary"), "does not cover the group(s) kv"),
    ],
)
def test_refuses_a_report_that_is_not_a_complete_pass(
    repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    passed: bool,
    groups: tuple[str, ...],
    expected: str,
) -> None:
    write_package(repo, FIXTURE_CONCERNS)
    write_report(passed=passed, groups=groups)
    refused(tmp_path / "out", 9, capsys, "is not a complete pass", expected, "dgr verify")


def test_a_refusal_keeps_the_earlier_export(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert export(out) == 0
    before = tree(out)
    edit_patch(packaged, "docs-add-a-fixture-page.patch", "+A page added by a patch.", "+A page on billing.")
    assert export(out) == 7
    assert tree(out) == before


def test_refuses_to_replace_a_foreign_directory(
    packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    assert export(out) == 2
    assert "is not the output of an earlier" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me\n"


def test_every_patch_needs_a_concern(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    concerns = dict(FIXTURE_CONCERNS)
    del concerns["readme-mark-hexagon-experimental.patch"]
    write_package(repo, concerns)
    write_report()
    assert export(tmp_path / "out") == 8
    assert "no concern declares patch readme-mark-hexagon-experimental.patch" in capsys.readouterr().err


# --------------------------------------------------------------------------- API.md

HEADER = """#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

    struct llama_model_params {
        int32_t n_gpu_layers;
    };

    // the default parameters
    LLAMA_API struct llama_model_params llama_model_default_params(void);

#ifdef __cplusplus
}
#endif
"""


def api_series(upstream: FakeUpstream, work: Path) -> dict[str, str]:
    """Two patches: one adds a public header, the next adds a field, functions and an enum."""
    git(work.parent, "clone", "-q", str(upstream.path), str(work))
    git(work, "checkout", "-q", "-B", "series", upstream.base)
    (work / "include").mkdir()
    (work / "include" / "llama.h").write_text(HEADER)
    first = commit_all(work, message("llama : add the public header"))
    header = work / "include" / "llama.h"
    header.write_text(
        header.read_text().replace(
            "        int32_t n_gpu_layers;\n",
            "        int32_t n_gpu_layers;\n\n        // first layer to load\n        int32_t layer_begin;\n",
        )
    )
    (work / "src").mkdir()
    (work / "src" / "llama-ext.h").write_text(
        "#pragma once\n\n"
        "enum llama_range_status {\n    LLAMA_RANGE_OK = 0,\n    LLAMA_RANGE_INVALID = -1,\n};\n\n"
        "// first layer held by the model\n"
        "LLAMA_API int32_t llama_model_layer_begin(\n        const struct llama_model * model,\n"
        "                         int32_t   flags);\n"
    )
    (work / "src" / "internal.h").write_text("LLAMA_API int32_t llama_internal_helper(void);\n")
    (work / "tests" / "test-api.cpp").write_text("int main() { return 0; }\n")
    cmake = work / "tests" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + "llama_build_and_test(test-api.cpp)\n")
    second = commit_all(work, message("llama : add a layer range"))
    return {
        "add-the-public-header.patch": format_patch(work, first),
        "add-a-layer-range.patch": format_patch(work, second),
    }


def install_api_series(repo: Path, fake_upstream: FakeUpstream, work: Path) -> None:
    """Replace the repository's series with the two patches of api_series, and their concerns."""
    patches = api_series(fake_upstream, work)
    shutil.rmtree(repo / "patches")
    (repo / "patches").mkdir()
    for name, text in patches.items():
        (repo / "patches" / name).write_text(text)
    (repo / "series" / "series").write_text("".join(f"{name}\n" for name in patches))
    write_manifest(repo)
    write_package(
        repo,
        {
            "add-the-public-header.patch": ("ownership", ["include/llama.h"]),
            "add-a-layer-range.patch": ("boundary", ["include/*.h", "src/*.h", "tests/**"]),
        },
    )


def test_api_lists_the_declarations_the_patches_add(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    install_api_series(repo, fake_upstream, tmp_path / "work")
    write_report(native=("test-api",))
    out = tmp_path / "out"
    assert export(out) == 0
    api = (out / "API.md").read_text()
    first, second = api.split("## 2. ", 1)
    assert "- struct `llama_model_params`" in first
    assert "- function `llama_model_default_params()`" in first
    assert (
        "// the default parameters\nLLAMA_API struct llama_model_params llama_model_default_params(void);"
        in first
    )
    assert "- fields added to struct `llama_model_params`" in second
    assert "```c\n// first layer to load\nint32_t layer_begin;\n```" in second
    assert "- enum `llama_range_status`" in second
    assert (
        "// first layer held by the model\nLLAMA_API int32_t llama_model_layer_begin(\n"
        "        const struct llama_model * model,\n                         int32_t   flags);"
    ) in second
    assert "llama_internal_helper" not in api  # src/internal.h is not a public header
    assert "- native test: `test-api` (passed)" in second
    assert "| `test-api` | pass | 0.25 |" in (out / "TEST-MAP.md").read_text()


def test_a_native_test_missing_from_the_report_is_refused(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_api_series(repo, fake_upstream, tmp_path / "work")
    write_report()
    refused(tmp_path / "out", 9, capsys, "adds the native test(s) test-api, which the verify report lacks")


# --------------------------------------------------------------------------- helpers


def test_globs_do_not_cross_directories_unless_asked() -> None:
    assert package.glob_match("src/*.h", "src/llama-ext.h")
    assert not package.glob_match("src/*.h", "src/models/llama.h")
    assert package.glob_match("src/**/*.h", "src/models/llama.h")
    assert package.glob_match("src/**/*.h", "src/llama.h")
    assert package.glob_match("tests/**", "tests/a/b.cpp")
    assert not package.glob_match("README.md", "docs/README.md")


def test_deny_words_are_whole_words_in_any_case() -> None:
    pattern = package.deny_pattern(("dgr", "relay", "routing"))
    assert pattern.search("the DGR tool")
    assert pattern.search("dgr_cache")
    assert pattern.search("x-relay")
    assert not pattern.search("rerouting")
    assert not pattern.search("relays")
    assert not pattern.search("dgrx")


def test_figures_and_why_are_formatted_deterministically() -> None:
    assert fmt(0.1 + 0.2) == "0.3"
    assert fmt({"a": [1.0, True, "x"], "b": None}) == '{a: [1, true, "x"], b: null}'
    assert counts_text({"native test": 1, "real model": 2, "synthetic fixture": 3}) == (
        "1 native test, 2 with a real model, 3 with synthetic models"
    )
    body = "Why this is needed:\n\n- one\n- two\n\ntests : add a test"
    assert why_paragraphs(body) == "Why this is needed."


def test_the_repository_configuration_covers_the_series() -> None:
    from dgr import series

    names = series.load(ROOT / "series" / "series").names
    config = package.load_config(ROOT / "upstream-package" / "package.toml", names)
    assert [c.patch for c in config.concerns] == names
    assert [c.group for c in config.concerns] == ["ownership", "boundary", "kv"]
    assert config.deny_words == ("meshnet", "dgr", "routing", "billing", "relay")
    commands = package.reproduce_commands(ROOT / "README.md", config.clone)
    assert commands[1:] == (".venv/bin/dgr build", ".venv/bin/dgr verify")
