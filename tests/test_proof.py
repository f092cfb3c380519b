"""`dgr rebase-check --onto TARGET --proof`: the range-diff of the series against its port, and the check
that the port adds no drift of its own, on a toy port.

The fake upstream's `later` changes the README line `| Hexagon [In Progress] | Snapdragon |` (and
docs/build.md): onto it, the series' CANN patch needs a 3-way merge (its context moved) and its Hexagon
patch conflicts. The port resolves that conflict by hand, as `dgr edit --onto` would have it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from dgr.cli import main

from tests.helpers import FakeUpstream, commit_all, format_patch, git, message, write_manifest

SPEC = "pypi:llama-cpp-python==9.9.9"
PORT = "later"
HEXAGON = ("| Hexagon | Snapdragon |", "| Hexagon [Experimental] | Snapdragon |")

Edit = Callable[[Path], None]


def replace(path: str, old: str, new: str) -> Edit:
    def edit(work: Path) -> None:
        text = (work / path).read_text()
        assert old in text
        (work / path).write_text(text.replace(old, new))

    return edit


def port_series(up: FakeUpstream, work: Path, extra: dict[str, Edit] | None = None) -> dict[str, str]:
    """The series written again on `later`, its conflict resolved; `extra` edits more in a patch's commit."""
    extra = extra or {}
    shutil.copytree(up.path, work)
    git(work, "checkout", "-q", "-B", "port", up.later)
    commits = {
        "docs-add-a-fixture-page.patch": (
            "docs : add a fixture page",
            lambda w: (w / "docs" / "fixture.md").write_text("# fixture\n\nA page added by a patch.\n"),
        ),
        "readme-name-the-cann-vendor.patch": (
            "readme : name the CANN vendor",
            replace("README.md", "| Ascend NPU", "| Huawei Ascend NPU"),
        ),
        "readme-mark-hexagon-experimental.patch": (
            "readme : mark Hexagon experimental",
            replace("README.md", *HEXAGON),
        ),
    }
    patches = {}
    for name, (subject, edit) in commits.items():
        edit(work)
        if name in extra:
            extra[name](work)
        patches[name] = format_patch(work, commit_all(work, message(subject)))
    return patches


def lock_with_target(up: FakeUpstream) -> str:
    return f"""[upstream]
repo = "https://github.com/ggml-org/llama.cpp"
commit = "{up.base}"
tree = "{up.base_tree}"
commit_date = 2026-08-16T14:53:13+02:00

[[upstream.sources]]
kind = "mirror"

[rebase.targets."{SPEC}"]
package = "llama-cpp-python"
version = "9.9.9"
filename = "llama_cpp_python-9.9.9.tar.gz"
sha256 = "{"2" * 64}"
subdir = "vendor/llama.cpp"
commit = "{up.later}"
tree = "{up.later_tree}"
commit_date = 2026-10-01T09:31:48+09:00
port = "{PORT}"
"""


def add_port(root: Path, up: FakeUpstream, patches: dict[str, str]) -> None:
    (root / "locks" / "upstream.toml").write_text(lock_with_target(up))
    (root / "series" / "ports").mkdir(exist_ok=True)
    (root / "series" / "ports" / PORT).write_text("".join(f"{n}\n" for n in patches))
    directory = root / "patches" / "ports" / PORT
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for name, text in patches.items():
        (directory / name).write_text(text)
    write_manifest(root)
    assert main(["manifest"]) == 0


def proof(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["rebase-check", "--onto", SPEC, "--proof", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_port_that_resolves_the_conflict_proves(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_port(repo, fake_upstream, port_series(fake_upstream, tmp_path / "work"))
    code, out, err = proof(capsys)
    assert code == 0, err
    # git's own range-diff: the fixture page unchanged, the CANN patch's context and the Hexagon line changed
    assert f"git range-diff {fake_upstream.base[:12]}.." in out
    lines = out.splitlines()
    [first] = [line for line in lines if line.endswith("docs : add a fixture page")]
    assert " = " in first and first.startswith("1:")
    [cann] = [line for line in lines if line.endswith("readme : name the CANN vendor")]
    assert " ! " in cann
    [hexagon] = [line for line in lines if line.endswith("readme : mark Hexagon experimental")]
    assert " ! " in hexagon
    assert hexagon.startswith("3:")
    # the changed commit: the line it replaces is upstream's, its own line the same
    assert "    --| Hexagon [In Progress] | Snapdragon |\n    +-| Hexagon | Snapdragon |\n" in out
    assert "     +| Hexagon [Experimental] | Snapdragon |\n" in out
    assert "proof: the port adds no drift of its own" in out
    assert main(["rebase-check", "--onto", SPEC, "--proof", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["drift"] == []
    assert [(p["name"], p["replay"], p["resolved"]) for p in report["patches"]] == [
        ("docs-add-a-fixture-page.patch", "clean", []),
        ("readme-name-the-cann-vendor.patch", "3-way", ["README.md"]),
        ("readme-mark-hexagon-experimental.patch", "conflict", ["README.md"]),
    ]
    # the resolution: the Hexagon line upstream rewrote, removed on its new side and on its old side
    assert report["patches"][2]["explained_lines"] == 2
    assert report["range_diff"].count("\n") >= 3


def test_a_port_that_sneaks_in_a_change_fails_naming_patch_file_and_hunk(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sneak = {
        "readme-mark-hexagon-experimental.patch": replace("README.md", "| BLAS | All |", "| BLAS | Any CPU |")
    }
    add_port(repo, fake_upstream, port_series(fake_upstream, tmp_path / "work", sneak))
    code, out, err = proof(capsys)
    assert code == 9
    assert "proof FAILED: 1 hunk(s) of drift" in out
    assert (
        "dgr: verify: the port later on pypi:llama-cpp-python==9.9.9 adds drift of its own: 1 hunk(s) in "
        "readme-mark-hexagon-experimental.patch: README.md" in err
    )
    assert (
        "readme-mark-hexagon-experimental.patch: README.md: hunk @@ -5 +5 @@: the port adds a change the "
        "series does not make" in err
    )
    assert "    -| BLAS | All |" in err and "    +| BLAS | Any CPU |" in err
    # the resolution itself is not drift
    assert "Hexagon" not in err.split("next:")[0].split("adds drift")[1]


def test_a_change_where_upstream_changed_is_drift_in_a_patch_that_applied_cleanly(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/build.md is upstream's change; the fixture page patch applied plainly: nothing to resolve."""
    sneak = {
        "docs-add-a-fixture-page.patch": replace("docs/build.md", "then ninja.", "then ninja -j 2."),
    }
    add_port(repo, fake_upstream, port_series(fake_upstream, tmp_path / "work", sneak))
    code, _, err = proof(capsys)
    assert code == 9
    assert "docs-add-a-fixture-page.patch: docs/build.md: hunk @@ -3 +3 @@: the port adds" in err


def test_a_port_that_leaves_a_patch_out_drops_its_change(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patches = port_series(fake_upstream, tmp_path / "work")
    del patches["readme-mark-hexagon-experimental.patch"]
    add_port(repo, fake_upstream, patches)
    code, out, err = proof(capsys)
    assert code == 9
    assert "readme-mark-hexagon-experimental.patch  dropped" in out
    assert "readme-mark-hexagon-experimental.patch: README.md: hunk @@ -9 +9 @@: the port drops" in err


def test_proof_needs_a_target_with_a_port(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebase-check", "--onto", SPEC, "--proof"]) == 2
    err = capsys.readouterr().err
    assert f"--proof needs a locked rebase target with a port; {SPEC} is not a locked rebase target" in err
    assert main(["rebase-check", "--matrix", "--proof"]) == 2
