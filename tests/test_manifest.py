"""The patch manifest: compute, verify (a flipped byte names the file and both digests), rewrite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.core.digest import sha256_file
from dgr.core.paths import Repo
from dgr.errors import ConfigError, IntegrityError
from dgr.series import patchmanifest

from tests.helpers import flip_byte

SECOND = "readme-name-the-cann-vendor.patch"


def test_verify_passes_and_keeps_series_order(repo: Path) -> None:
    verified = patchmanifest.verify(Repo(repo))
    assert list(verified.patches) == [
        "docs-add-a-fixture-page.patch",
        SECOND,
        "readme-mark-hexagon-experimental.patch",
    ]


@pytest.mark.parametrize("target", [f"patches/{SECOND}", "series/series"])
def test_flipped_byte_names_file_and_both_digests(repo: Path, target: str) -> None:
    path = repo / target
    before = sha256_file(path)
    flip_byte(path)
    with pytest.raises(IntegrityError) as info:
        patchmanifest.verify(Repo(repo))
    error = info.value
    assert error.exit_code == 3
    assert target in error.what
    assert error.expected == before
    assert error.actual == sha256_file(path)
    assert "dgr manifest" in (error.hint or "")


def test_missing_patch_is_a_config_error(repo: Path) -> None:
    (repo / "patches" / SECOND).unlink()
    with pytest.raises(ConfigError, match=f"names {SECOND}, which is not in patches/"):
        patchmanifest.compute(Repo(repo))


def test_duplicate_in_series_refused(repo: Path) -> None:
    series = repo / "series" / "series"
    series.write_text(series.read_text() + SECOND + "\n")
    with pytest.raises(ConfigError, match="a second time"):
        patchmanifest.compute(Repo(repo))


def test_manifest_command_rewrites_atomically(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flip_byte(repo / "patches" / SECOND)
    assert main(["manifest"]) == 0
    patchmanifest.verify(Repo(repo))
    assert not list((repo / "locks").glob(".*tmp"))
    assert main(["manifest"]) == 0
    assert "up to date" in capsys.readouterr().err


def test_build_refuses_tampering_before_touching_anything(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flip_byte(repo / "patches" / SECOND)
    assert main(["build"]) == 3
    err = capsys.readouterr().err
    assert f"patches/{SECOND}" in err
    assert len(re.findall(r"[0-9a-f]{64}", err)) >= 2
    cache = tmp_path / "cache"
    assert not (cache / "upstream").exists()
    assert not (cache / "work").exists()
