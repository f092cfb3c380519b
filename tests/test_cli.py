"""Errors map to documented exit codes through main(argv); paths and the cache dir resolve as documented."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
import pytest
from dgr import errors
from dgr.cli import main
from dgr.paths import find_cache_root, find_repo_root

from tests.helpers import ROOT


def test_usage_error_is_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert main(["rebase-check"]) == 2
    assert main([]) == 2


def test_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in (3, 4, 5, 6, 7, 8, 9, 10, 130):
        assert f"{code:>5}  " in out


def test_every_error_class_has_a_documented_code() -> None:
    classes: list[type[errors.DgrError]] = [errors.DgrError, *errors.DgrError.__subclasses__()]
    assert {c.exit_code for c in classes} == set(errors.EXIT_CODES) - {0, 130}
    readme = (ROOT / "README.md").read_text()
    for code, meaning in errors.EXIT_CODES.items():
        assert f"| {code} |" in readme, meaning


def test_missing_lock_is_8(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "locks" / "upstream.toml").unlink()
    assert main(["fetch"]) == 8
    assert "upstream.toml: lock file missing" in capsys.readouterr().err


def test_verify_refuses_an_unknown_group_before_building(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--only", "ownership,bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown group" in err and "native, ownership, boundary, kv" in err


def test_generate_refuses_a_split_that_does_not_tile(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--split", "0:10,12:30", "hello"]) == 2
    assert "does not tile" in capsys.readouterr().err


def test_error_rendering_names_expected_actual_and_next() -> None:
    text = errors.IntegrityError("x.patch changed", expected="a" * 64, actual="b" * 64, hint="run y").render()
    assert text.splitlines() == [
        "dgr: integrity: x.patch changed",
        f"  expected: {'a' * 64}",
        f"  actual:   {'b' * 64}",
        "  next: run y",
    ]


def test_repo_root_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT / "builder")
    assert find_repo_root() == ROOT
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.ConfigError):
        find_repo_root()
    monkeypatch.setenv("DGR_REPO", str(tmp_path))
    with pytest.raises(errors.ConfigError, match="DGR_REPO"):
        find_repo_root()


def test_cache_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_cache_root(ROOT) == Path(os.environ["DGR_CACHE_DIR"]).resolve()
    monkeypatch.delenv("DGR_CACHE_DIR")
    assert find_cache_root(ROOT) == Path(platformdirs.user_cache_dir("dgr")).resolve()
    monkeypatch.setenv("DGR_CACHE_DIR", str(ROOT / "cache"))
    with pytest.raises(errors.ConfigError, match="inside the repository"):
        find_cache_root(ROOT)
