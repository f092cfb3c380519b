"""End-to-end: the rewrite rules of series/rules/ on the real pin and the real series (marker e2e).

`dgr edit` lays the pinned llama.cpp with the series as commits; each rule, run on the parent of the
commit it generates, must give exactly that commit's src/models/, a second run must change nothing, and
a hand edit of one generated line must be found by `--check`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, git, run_dgr

pytestmark = pytest.mark.e2e

PROGRAM = ROOT / "series" / "rules" / "rewrite.py"


def rule(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def edit_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = Path(os.environ.get("DGR_TEST_CACHE") or tmp_path_factory.mktemp("rules-cache")).resolve()
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


@pytest.mark.parametrize(("name", "index"), [("layer-inputs", 1), ("layer-range-archs", 4)])
def test_the_rule_gives_the_committed_patch_on_the_pin(
    edit_tree: Path, tmp_path: Path, name: str, index: int
) -> None:
    commits = series_commits(edit_tree)
    assert len(commits) == 5, commits
    work = worktree_at(edit_tree, commits[index - 1], tmp_path / "work")
    result = rule(name, str(work))
    assert result.returncode == 0, result.stderr
    # the rule's output is the commit's src/models/, byte for byte, and touches nothing else
    assert git(work, "diff", commits[index], "--", "src/models") == ""
    touched = git(work, "diff", "--name-only").split()
    parent, commit = commits[index - 1], commits[index]
    committed = git(work, "diff", "--name-only", parent, commit, "--", "src/models").split()
    assert touched == committed and len(touched) > 90
    # a second run changes nothing
    again = rule("--check", name, str(work))
    assert again.returncode == 0, again.stdout + again.stderr
    assert git(work, "diff", "--name-only").split() == touched


def test_a_hand_edit_of_a_generated_line_is_found(edit_tree: Path, tmp_path: Path) -> None:
    commits = series_commits(edit_tree)
    work = worktree_at(edit_tree, commits[1], tmp_path / "work")
    assert rule("--check", "layer-inputs", str(work)).returncode == 0
    llama = work / "src" / "models" / "qwen2.cpp"
    text = llama.read_text()
    assert text.count("        inpL = build_layer_inp(il, inpL);\n\n") == 1
    llama.write_text(text.replace("        inpL = build_layer_inp(il, inpL);\n\n", ""))
    result = rule("--check", "layer-inputs", str(work))
    assert result.returncode == 1
    assert "src/models/qwen2.cpp" in result.stdout + result.stderr
