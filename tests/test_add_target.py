"""`dgr pin --add-target`: the sdist's vendor/llama.cpp commit, tree and date, and its sha256, locked as a
rebase target in locks/upstream.toml (with tomli-w); a duplicate, the pin or an unknown version refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.contracts import locks
from dgr.core.digest import sha256_file

from tests.helpers import FakeUpstream, git
from tests.test_upstream import make_sdist

SPEC = "pypi:fake-llama-sdist==1.0"


def index_of(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip finds `archive` (and nothing else): no network."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(archive.parent))


@pytest.fixture
def later_sdist(tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An sdist laid out like llama-cpp-python's whose vendor/llama.cpp is the fake upstream's `later`."""
    clone = tmp_path / "later"
    git(tmp_path, "clone", "-q", str(fake_upstream.path), str(clone))
    git(clone, "checkout", "-q", fake_upstream.later)
    archive = make_sdist(dataclasses.replace(fake_upstream, path=clone), tmp_path / "sdist")
    index_of(archive, monkeypatch)
    return archive


def lock_bytes(repo: Path) -> bytes:
    return (repo / "locks" / "upstream.toml").read_bytes()


def test_add_target_locks_the_sdists_commit_and_tree(
    repo: Path, fake_upstream: FakeUpstream, later_sdist: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--add-target", SPEC]) == 0
    assert f"locked {SPEC}: commit {fake_upstream.later}" in capsys.readouterr().out
    lock = locks.load_upstream(repo / "locks")
    target = lock.rebase_targets[SPEC]
    assert (target.pin.commit, target.pin.tree) == (fake_upstream.later, fake_upstream.later_tree)
    assert target.pin.commit_date.isoformat() == "2026-10-01T11:11:48+09:00"
    assert target.sdist.sha256 == sha256_file(later_sdist)
    assert target.sdist.filename == "fake_llama_sdist-1.0.tar.gz"
    assert target.sdist.subdir == "vendor/llama.cpp"
    assert lock_bytes(repo) == locks.dumps(lock.to_toml())  # what tomli-w writes
    # from now on a locked upstream: the matrix checks the series on it, verified by sha256, commit, tree
    assert main(["rebase-check", "--matrix", "--json"]) == 0
    labels = [c["label"] for c in json.loads(capsys.readouterr().out)["columns"]]
    assert labels[1:] == [SPEC]


def test_add_target_refuses_a_duplicate(
    repo: Path, later_sdist: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--add-target", SPEC]) == 0
    before = lock_bytes(repo)
    capsys.readouterr()
    assert main(["pin", "--add-target", SPEC]) == 2
    assert f"{SPEC} is a rebase target already" in capsys.readouterr().err
    assert lock_bytes(repo) == before


def test_add_target_refuses_an_unknown_version(
    repo: Path, later_sdist: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = lock_bytes(repo)
    assert main(["pin", "--add-target", "pypi:fake-llama-sdist==2.0"]) == 4
    err = capsys.readouterr().err
    assert "fake-llama-sdist 2.0 is not on PyPI" in err
    assert "pip index versions fake-llama-sdist" in err
    assert lock_bytes(repo) == before


def test_add_target_refuses_the_pins_commit(
    repo: Path,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    index_of(make_sdist(fake_upstream, tmp_path / "sdist"), monkeypatch)  # its llama.cpp is the pin
    assert main(["pin", "--add-target", SPEC]) == 2
    assert f"carries commit {fake_upstream.base}, which is the pin" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["pin", "--add-target", "newest"],
            "--add-target 'newest' is neither a version, pypi:NAME==VERSION, a release tag bN nor latest",
        ),
        (["pin", "--add-target", "1.0", "--to", SPEC], "not allowed with argument"),
        (["pin", "--add-target", "1.0", "--allow-older"], "--allow-older is for --to"),
        (["pin"], "one of the arguments --to --add-target is required"),
    ],
)
def test_add_target_usage(
    repo: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
