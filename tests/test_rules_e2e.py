"""End-to-end: the rewrite rules of series/rules/ on the real pin and the real series (marker e2e).

`dgr edit` lays the pinned llama.cpp with the series as commits; each rule, run on the parent of the
commit it generates, must give exactly that commit's src/models/, a second run must change nothing, and
a hand edit of one generated line must be found by `--check`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dgr.series import order as series

from tests.helpers import ROOT, git, run_dgr

pytestmark = pytest.mark.e2e

PROGRAM = ROOT / "series" / "rules" / "rewrite.py"


def rule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(os.environ.get("DGR_TEST_CACHE") or tmp_path_factory.mktemp("rules-cache")).resolve()


@pytest.fixture(scope="module")
def edit_tree(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    tree = tmp_path_factory.mktemp("rules") / "edit"
    result = run_dgr("edit", "--dir", str(tree), env={"DGR_REPO": str(ROOT), "DGR_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    return tree


def series_commits(tree: Path) -> list[str]:
    """The series' commits, oldest first, and the upstream commit they start from."""
    base = git(tree, "rev-parse", "refs/patches/upstream-head")
    return [base, *git(tree, "rev-list", "--reverse", f"{base}..HEAD").split()]


def worktree_at(tree: Path, commit: str, path: Path) -> Path:
    git(tree, "worktree", "add", "-q", "--detach", str(path), commit)
    return path


@pytest.mark.parametrize(("name", "index", "files"), [("layer-inputs", 1, 25), ("layer-range-archs", 3, 107)])
def test_the_rule_gives_the_committed_patch_on_the_pin(
    edit_tree: Path, tmp_path: Path, name: str, index: int, files: int
) -> None:
    commits = series_commits(edit_tree)
    assert len(commits) == 1 + len(series.load(ROOT / "series" / "series").names), commits
    work = worktree_at(edit_tree, commits[index - 1], tmp_path / "work")
    result = rule(name, str(work))
    assert result.returncode == 0, result.stderr
    # the rule's output is the commit's src/models/, byte for byte, and touches nothing else
    assert git(work, "diff", commits[index], "--", "src/models") == ""
    touched = git(work, "diff", "--name-only").split()
    parent, commit = commits[index - 1], commits[index]
    committed = git(work, "diff", "--name-only", parent, commit, "--", "src/models").split()
    assert touched == committed and len(touched) == files
    # a second run changes nothing
    again = rule("--check", name, str(work))
    assert again.returncode == 0, again.stdout + again.stderr
    assert git(work, "diff", "--name-only").split() == touched


def test_a_hand_edit_of_a_generated_line_is_found(edit_tree: Path, tmp_path: Path) -> None:
    commits = series_commits(edit_tree)
    work = worktree_at(edit_tree, commits[1], tmp_path / "work")
    assert rule("--check", "layer-inputs", str(work)).returncode == 0
    llama = work / "src" / "models" / "gemma2.cpp"
    text = llama.read_text()
    assert text.count("        inpL = build_layer_inp(il, inpL);\n\n") == 1
    llama.write_text(text.replace("        inpL = build_layer_inp(il, inpL);\n\n", ""))
    result = rule("--check", "layer-inputs", str(work))
    assert result.returncode == 1
    assert "src/models/gemma2.cpp" in result.stdout + result.stderr


def test_dgr_check_refuses_a_hand_edit_of_a_generated_hunk_naming_the_rule(
    edit_tree: Path, cache: Path, tmp_path: Path
) -> None:
    """A copy of the repository whose layer-inputs.patch has one generated line edited by hand, its manifest
    updated to match: `dgr check` finds it (exit 7), naming the rule and the file."""
    repo = tmp_path / "repo"
    for name in ("pyproject.toml", "locks", "series", "patches", "upstream-package"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name)
        else:
            repo.mkdir(exist_ok=True)
            shutil.copy(source, repo / name)
    patch = repo / "patches" / "layer-inputs.patch"
    text = patch.read_text()
    start = text.index("+++ b/src/models/qwen3vl.cpp")
    line = "+        inpL = build_layer_inp(il, inpL);"
    at = text.index(line, start)
    patch.write_text(
        text[:at] + "+        inpL = build_layer_inp(il, ggml_cont(ctx0, inpL));" + text[at + len(line) :]
    )
    env = {"DGR_REPO": str(repo), "DGR_CACHE_DIR": str(cache)}  # the upstream is there (edit_tree)
    assert run_dgr("manifest", env=env).returncode == 0
    result = run_dgr("check", env=env)
    assert result.returncode == 7, result.stdout + result.stderr
    assert (
        "patches/layer-inputs.patch: generated: src/models/qwen3vl.cpp is not the output of the rule "
        "layer-inputs (1 file(s) of src/models/ differ)"
    ) in result.stdout
    assert result.stdout.rstrip().endswith("dgr check: 1 problem(s)")
