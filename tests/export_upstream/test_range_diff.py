"""The package's range-diff.txt: `git range-diff` of the series on the previous pin (the git history of
locks/upstream.toml) against the series on the pin, or why there is none."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.export_upstream.support import TEXT, bench_data, digest, export, tree, write_bench, write_report
from tests.helpers import FakeUpstream, commit_all, format_patch, git, message, write_manifest


def test_without_a_previous_pin_the_file_says_so(packaged: Path, tmp_path: Path) -> None:
    assert export(tmp_path / "out") == 0
    files = tree(tmp_path / "out")
    text = files["range-diff.txt"].decode()
    assert text.startswith("# The series against the previous pin\n\nNo previous pin is recorded: ")
    assert "the repository is not a git checkout" in text
    assert (
        "| `range-diff.txt` | `git range-diff` of the series on the previous pin"
        in files["README.md"].decode()
    )


def move_pin(repo: Path, up: FakeUpstream, work: Path) -> None:
    """Pin `later`, with the fixture page reworded there (the other patches as they are)."""
    lock = repo / "locks" / "upstream.toml"
    date = git(up.path, "log", "-1", "--format=%cI", up.later)
    text = lock.read_text().replace(up.base, up.later).replace(up.base_tree, up.later_tree)
    lock.write_text(text.replace("commit_date = 2026-08-16T14:53:13+02:00", f"commit_date = {date}"))
    shutil.copytree(up.path, work)
    git(work, "checkout", "-q", "-B", "moved", up.later)
    (work / "docs" / "fixture.md").write_text("# fixture\n\nA page added by a patch, reworded.\n")
    reworded = message("docs : add a fixture page").replace("a realistic message", "a reworded message")
    page = format_patch(work, commit_all(work, reworded))
    (repo / "patches" / "docs-add-a-fixture-page.patch").write_text(page)
    write_manifest(repo)


def test_the_range_diff_against_the_previous_pin(
    packaged: Path, pr_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(packaged, "init", "-q", "-b", "main")
    commit_all(packaged, "the series on the first pin")
    move_pin(packaged, pr_upstream, tmp_path / "work")
    commit_all(packaged, "pin: later")
    (packaged / "docs.md").write_text("a later commit that leaves the lock alone\n")
    commit_all(packaged, "docs")
    write_report()
    # the perplexity text is docs/build.md of the pin, which `later` changed
    sha = {t: hashlib.sha256(t.encode()).hexdigest() for t in (TEXT, TEXT + "Then ninja.\n")}
    write_bench(json.loads(json.dumps(bench_data(digest())).replace(sha[TEXT], sha[TEXT + "Then ninja.\n"])))
    assert export(tmp_path / "out") == 0, capsys.readouterr().err
    text = tree(tmp_path / "out")["range-diff.txt"].decode()
    head, _, diff = text.partition(f"{pr_upstream.later[:12]}..")
    assert f"previous pin: {pr_upstream.base} (2026-08-16T14:53:13+02:00), 3 patch(es)\n" in head
    assert f"pin:          {pr_upstream.later} (" in head
    assert f"git range-diff --creation-factor=100 {pr_upstream.base[:12]}.." in head
    lines = diff.splitlines()
    [page] = [line for line in lines if line[:1].isdigit() and line.endswith("docs : add a fixture page")]
    assert page.startswith("1:") and " ! 1:" in page
    assert "    -+A page added by a patch.\n    ++A page added by a patch, reworded.\n" in diff
    [cann] = [line for line in lines if line.endswith("readme : name the CANN vendor")]
    assert " = 2:" in cann
    assert "    -    This change exists because the fixture needs a realistic message" in diff
    assert "Upstream-Status" not in text  # our trailers are dropped, as on the branches


def test_a_history_with_one_pin_only_says_so(packaged: Path, tmp_path: Path) -> None:
    git(packaged, "init", "-q", "-b", "main")
    commit_all(packaged, "the series on its only pin")
    assert export(tmp_path / "out") == 0
    text = tree(tmp_path / "out")["range-diff.txt"].decode()
    assert (
        "No previous pin is recorded: the history of locks/upstream.toml (1 commit(s)) holds no other pin"
        in text
    )
