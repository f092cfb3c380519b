"""The core's file-system helpers: publish a directory by rename, re-hash a cached file, a writable dir."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from dgr.core.fs import publish_dir, remove_dir, verified_cached, writable_dir
from dgr.errors import ConfigError


def filled(path: Path, text: str) -> Path:
    path.mkdir(parents=True)
    (path / "file").write_text(text)
    return path


def test_publish_replaces_an_existing_directory_whole(tmp_path: Path) -> None:
    final = filled(tmp_path / "out", "old")
    (final / "stale").write_text("gone after")
    publish_dir(filled(tmp_path / ".out.tmp", "new"), final, replace=True)
    assert sorted(p.name for p in final.iterdir()) == ["file"]
    assert (final / "file").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_publish_keeps_what_another_process_published_first(tmp_path: Path) -> None:
    final = filled(tmp_path / "abc", "first")
    publish_dir(filled(tmp_path / ".abc.1", "second"), final, replace=False)
    assert (final / "file").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc"]


def test_a_failed_publish_puts_the_old_directory_back(tmp_path: Path) -> None:
    final = filled(tmp_path / "out", "old")
    with pytest.raises(OSError):
        publish_dir(tmp_path / "missing-staging", final, replace=True)
    assert (final / "file").read_text() == "old"
    remove_dir(final)
    assert list(tmp_path.iterdir()) == []


def test_a_cached_file_is_used_only_with_its_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = filled(tmp_path / "entry", "model bytes")
    good = hashlib.sha256(b"model bytes").hexdigest()
    assert verified_cached(entry / "file", good, "model") == entry / "file"
    assert "model: cached and verified" in capsys.readouterr().err
    (entry / "file").write_text("model bytez")
    assert verified_cached(entry / "file", good, "model") is None
    assert "is broken" in capsys.readouterr().err and not entry.exists()
    assert verified_cached(entry / "file", good, "model") is None


@pytest.mark.parametrize(
    ("make", "problem"), [("file", "it is a file"), ("under-file", "a part of it is a file")]
)
def test_a_dir_that_cannot_be_written_is_a_config_error(tmp_path: Path, make: str, problem: str) -> None:
    (tmp_path / "f").write_text("x")
    target = tmp_path / "f" if make == "file" else tmp_path / "f" / "sub"
    with pytest.raises(ConfigError, match=problem) as info:
        writable_dir(target, "$DGR_CACHE_DIR")
    assert str(target) in info.value.what and "$DGR_CACHE_DIR" in (info.value.hint or "")
    writable_dir(tmp_path / "new" / "dir", "--out")
    assert (tmp_path / "new" / "dir").is_dir() and not any((tmp_path / "new" / "dir").iterdir())
