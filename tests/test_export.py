"""`dgr edit` / `dgr export-patches`: a lossless round trip, byte-identical re-export, no churn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dgr.cli import main

from tests.helpers import FakeUpstream, commit_all, git, message


def edit(capsys: pytest.CaptureFixture[str], *args: str) -> Path:
    assert main(["edit", *args]) == 0
    return Path(capsys.readouterr().out.strip())


def snapshot(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for d in ("patches", "series", "locks")
        for p in sorted((repo / d).rglob("*"))
        if p.is_file()
    }


def test_edit_creates_series_commits(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = edit(capsys)
    assert tree == Path(os.environ["DGR_CACHE_DIR"]).resolve() / "edit" / fake_upstream.base
    assert git(tree, "rev-parse", "refs/patches/upstream-head") == fake_upstream.base
    subjects = git(tree, "log", "--format=%s", "refs/patches/upstream-head..HEAD").splitlines()
    assert subjects == [
        "readme : mark Hexagon experimental",
        "readme : name the CANN vendor",
        "docs : add a fixture page",
    ]
    assert git(tree, "log", "-1", "--format=%cn <%ce> %cd", "--date=raw") == (
        "llama.cpp patch series <series@localhost> 1786884793 +0200"
    )


def test_export_without_edits_changes_nothing(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(repo)
    tree = edit(capsys)
    assert main(["export-patches", "--dry-run"]) == 0
    assert main(["export-patches"]) == 0
    assert snapshot(repo) == before
    # the same commits again: identical ids, and edit may reset a clean, exported tree
    head = git(tree, "rev-parse", "HEAD")
    assert edit(capsys) == tree
    assert git(tree, "rev-parse", "HEAD") == head


def test_export_is_deterministic_and_minimal(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = edit(capsys)
    (tree / "docs" / "new.md").write_text("# new\n")
    commit_all(tree, message("docs : add another page"))
    git(tree, "rebase", "-q", "--exec", "true", "refs/patches/upstream-head")
    assert main(["export-patches", "--dry-run"]) == 7
    assert "would change: patches/docs-add-another-page.patch" in capsys.readouterr().out
    before = snapshot(repo)
    assert main(["export-patches"]) == 0
    after = snapshot(repo)
    changed = sorted(k for k in after if before.get(k) != after[k])
    assert changed == ["locks/patches.toml", "patches/docs-add-another-page.patch", "series/series"]
    assert after["series/series"].decode().startswith("# fixture series\n")
    assert after["series/series"].decode().endswith("docs-add-another-page.patch\n")
    assert main(["export-patches"]) == 0
    assert snapshot(repo) == after
    assert main(["check"]) == 0


def series_commits(tree: Path) -> tuple[str, list[str]]:
    """The base of the edit tree and its commits, oldest first."""
    base = git(tree, "rev-parse", "refs/patches/upstream-head")
    return base, git(tree, "rev-list", "--reverse", f"{base}..HEAD").split()


def test_export_reworded_keeps_its_name_and_dropped_are_removed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = edit(capsys)
    _, commits = series_commits(tree)
    git(tree, "reset", "-q", "--hard", commits[0])
    git(tree, "commit", "-q", "--amend", "-m", message("docs : add the fixture page"))
    assert main(["export-patches"]) == 0
    names = sorted(p.name for p in (repo / "patches").iterdir())
    assert names == ["docs-add-a-fixture-page.patch"]
    assert main(["check"]) == 0


def test_export_of_a_new_commit_in_place_of_a_dropped_one_gets_its_own_name(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = edit(capsys)
    base, commits = series_commits(tree)
    first = git(tree, "log", "-1", "--format=%s", commits[0])
    git(tree, "reset", "-q", "--hard", commits[1])
    git(tree, "rebase", "-q", "--onto", base, commits[0])
    assert main(["export-patches"]) == 0
    names = [p.name for p in (repo / "patches").iterdir()]
    # the second commit keeps its own name: it has its subject, so it does not take the first's place
    assert len(names) == 1 and names[0] != "docs-add-a-fixture-page.patch", (first, names)


def test_edit_refuses_dirty_or_unexported(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = edit(capsys)
    (tree / "README.md").write_text("changed\n")
    assert main(["edit"]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    commit_all(tree, message("readme : replace everything"))
    assert main(["edit"]) == 2
    assert "holds commits that differ from patches/" in capsys.readouterr().err


def test_export_without_edit_tree(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-patches"]) == 2
    assert "run `dgr edit` first" in capsys.readouterr().err
