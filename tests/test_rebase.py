"""`dgr rebase-check` against a newer fake upstream: clean, 3-way and conflict, reported per patch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dgr.cli import main

from tests.helpers import FIXTURE_PAGE, FakeUpstream, git, later_upstream


@pytest.mark.parametrize("how", ["commit", "path"])
def test_report_every_patch(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if how == "commit":
        onto = fake_upstream.later
    else:
        onto = str(tmp_path / "later")
        git(tmp_path, "clone", "-q", str(fake_upstream.path), onto)
        git(Path(onto), "checkout", "-q", fake_upstream.later)
    assert main(["rebase-check", "--onto", onto, "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["onto"]["commit"] == fake_upstream.later
    assert report["onto"]["verified"] is False
    assert [(p["name"], p["status"]) for p in report["patches"]] == [
        ("docs-add-a-fixture-page.patch", "clean"),
        ("readme-name-the-cann-vendor.patch", "3-way"),
        ("readme-mark-hexagon-experimental.patch", "conflict"),
    ]
    conflict = report["patches"][2]
    assert conflict["files"] == ["README.md"]
    assert conflict["hunks"][0]["file"] == "README.md"
    assert conflict["hunks"][0]["header"].startswith("@@ -")
    assert "dgr edit --onto" in report["next"]
    assert report["ok"] is False


def test_a_patch_upstream_has_already_is_redundant(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upstream that merged the first patch: the patch applies there in reverse, so it is redundant."""
    onto = later_upstream(fake_upstream, tmp_path / "merged", FIXTURE_PAGE, "1795000000 +0000")
    assert main(["rebase-check", "--onto", str(onto), "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["status"]) for p in report["patches"]] == [
        ("docs-add-a-fixture-page.patch", "redundant"),
        ("readme-name-the-cann-vendor.patch", "3-way"),
        ("readme-mark-hexagon-experimental.patch", "conflict"),
    ]
    assert (
        "has the change of docs-add-a-fixture-page.patch already: drop it from series/series"
        in report["next"]
    )


def test_onto_the_pin_itself_is_clean(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rebase-check", "--onto", fake_upstream.base]) == 0
    out = capsys.readouterr().out
    assert out.count("clean") >= 3
    assert "applies cleanly" in out


def test_edit_onto_stops_at_the_conflict(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["edit", "--onto", fake_upstream.later]) == 5
    captured = capsys.readouterr()
    tree = Path(captured.out.strip())
    assert (tree / ".git" / "rebase-apply").is_dir()
    assert "readme-mark-hexagon-experimental.patch conflicts" in captured.err


def test_unknown_onto(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebase-check", "--onto", "no such thing"]) == 2
    assert "cannot resolve 'no such thing' as an upstream" in capsys.readouterr().err


def test_no_port_is_suggested_onto_an_older_upstream(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onto = later_upstream(
        fake_upstream, tmp_path / "older", ("docs/other.md", "# other\n"), "1700000000 +0000"
    )
    assert main(["rebase-check", "--onto", str(onto), "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["next"].startswith(f"{onto} is older than the pin (2023-11-14 < 2026-08-16)")
    assert "dgr edit --onto" not in report["next"]
