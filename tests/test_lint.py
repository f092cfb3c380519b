"""`dgr check`: series <-> patches <-> manifest, message lint, lock lint; exit codes 0 / 7 / 8."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.contracts.locks import PatchManifest
from dgr.core.digest import sha256_bytes, sha256_file
from dgr.core.paths import Repo
from dgr.maintain import lint
from dgr.series import patchmanifest

from tests.helpers import WHY, flip_byte, write_manifest

FIRST = "docs-add-a-fixture-page.patch"


def kinds(repo: Path) -> list[tuple[str, str]]:
    return [(f.file, f.kind) for f in lint.check(Repo(repo))]


def rewrite_message(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new, 1))


def test_clean_fixture(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kinds(repo) == []
    assert main(["check"]) == 0
    assert "clean" in capsys.readouterr().out


def test_committed_repository_is_clean() -> None:
    root = Path(__file__).resolve().parent.parent
    assert lint.check(Repo(root)) == []


def test_missing_unused_duplicate(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    series = repo / "series" / "series"
    series.write_text(series.read_text() + "gone.patch\n" + FIRST + "\n")
    (repo / "patches" / "stray.patch").write_text("x\n")
    write_manifest_ignoring_missing(repo)
    found = kinds(repo)
    assert ("series/series:5", "missing") in found
    assert ("series/series", "duplicate") in found
    assert ("patches/stray.patch", "unused") in found
    assert main(["check", "--json"]) == 7
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert {"file", "kind", "problem", "hint"} <= set(report["findings"][0])


def write_manifest_ignoring_missing(repo: Path) -> None:
    """Keep the manifest in step with the series except for the (deliberately) missing file."""
    series = (repo / "series" / "series").read_bytes()
    names = [n for n in series.decode().split() if not n.startswith("#") and (repo / "patches" / n).is_file()]
    digests = {n: sha256_file(repo / "patches" / n) for n in names}
    patchmanifest.write(Repo(repo), PatchManifest(sha256_bytes(series), digests))


def test_unparsable_patch(repo: Path) -> None:
    path = repo / "patches" / FIRST
    path.write_text("this is not a mail\n")
    write_manifest(repo)
    found = lint.check(Repo(repo))
    assert [(f.file, f.kind) for f in found] == [(f"patches/{FIRST}", "unparsable")]
    assert "From <40-hex>" in found[0].problem


def test_digest_mismatch_names_both_digests(repo: Path) -> None:
    path = repo / "patches" / FIRST
    flip_byte(path)
    flip_byte(repo / "series" / "series", offset=3)
    found = lint.check(Repo(repo))
    assert {(f.file, f.kind) for f in found} == {("series/series", "digest"), (f"patches/{FIRST}", "digest")}
    for finding in found:
        assert len(re.findall(r"[0-9a-f]{64}", finding.problem)) == 2
        assert "dgr manifest" in finding.hint


def test_stale_manifest_entry(repo: Path) -> None:
    series = repo / "series" / "series"
    write_manifest(repo)
    series.write_text(series.read_text().replace(FIRST + "\n", ""))
    (repo / "patches" / FIRST).unlink()
    found = kinds(repo)
    assert ("series/series", "digest") in found
    assert (f"patches/{FIRST}", "digest") in found


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (WHY, "Too short.", "must say why"),
        ("Upstream-Status: Pending", "Signed-off-by: A <a@b>", "no Upstream-Status trailer"),
        ("Upstream-Status: Pending", "Upstream-Status: Maybe later", "not a known status"),
        ("Upstream-Status: Pending", "Upstream-Status: Submitted", "not a known status"),
        ("docs : add a fixture page", "docs : " + "x" * 70, "subject is 77 characters"),
    ],
)
def test_message_lint(repo: Path, old: str, new: str, expected: str) -> None:
    rewrite_message(repo / "patches" / FIRST, old, new)
    write_manifest(repo)
    found = lint.check(Repo(repo))
    assert [f.kind for f in found] == ["message"]
    assert expected in found[0].problem


@pytest.mark.parametrize(
    "status",
    ["Pending", "Accepted", "Backport", "Submitted [https://x/pr/1]", "Inappropriate [test fixture]"],
)
def test_known_statuses(repo: Path, status: str) -> None:
    rewrite_message(repo / "patches" / FIRST, "Upstream-Status: Pending", f"Upstream-Status: {status}")
    write_manifest(repo)
    assert kinds(repo) == []


def test_lock_problems_are_findings(repo: Path) -> None:
    lock = repo / "locks" / "model.toml"
    lock.write_text(lock.read_text().replace('version = "0.1.2"', 'version = "latest"'))
    assert kinds(repo) == [("locks/model.toml", "lock")]


def test_unreadable_lock_is_exit_8(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "locks" / "toolchain.toml").write_text("[toolchain\n")
    assert main(["check"]) == 8
    assert "toolchain.toml: not valid TOML" in capsys.readouterr().err


def test_series_syntax_is_exit_8(repo: Path) -> None:
    (repo / "series" / "series").write_text("a.patch --option\n")
    assert main(["check"]) == 8


def test_empty_series_is_clean(repo: Path) -> None:
    for patch in (repo / "patches").iterdir():
        patch.unlink()
    (repo / "series" / "series").write_text("# nothing yet\n")
    write_manifest(repo)
    assert kinds(repo) == []
