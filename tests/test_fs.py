"""The core's file-system helpers: publish a directory by rename, re-hash a cached file, a writable dir."""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from dgr.core import fs
from dgr.core.fs import publish_dir, remove_dir, verified_cached, writable_dir
from dgr.errors import ConfigError, IntegrityError


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


def _tar(path: Path, members: list[tuple[str, bytes | None, str]]) -> Path:
    """A tar of (name, data or None for a symlink, link target) members."""
    with tarfile.open(path, "w") as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


# the fallback is what Python 3.11.2 (Debian 12's) runs: its tarfile has no "data" filter
@pytest.mark.parametrize("has_filter", [True, False], ids=["data-filter", "fallback"])
def test_an_archive_extracts_only_inside_its_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_filter: bool
) -> None:
    if not has_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    good = _tar(tmp_path / "good.tar", [("top/a.txt", b"a", ""), ("top/link", None, "a.txt")])
    with tarfile.open(good) as tar:
        fs.extract_members(tar, tmp_path / "out", tar.getmembers(), "good.tar")
    assert (tmp_path / "out" / "top" / "link").read_text() == "a"
    for name, data, link in (("../evil.txt", b"x", ""), ("top/out", None, "../../evil")):
        bad = _tar(tmp_path / "bad.tar", [(name, data, link)])
        with tarfile.open(bad) as tar, pytest.raises(IntegrityError, match=r"bad\.tar"):
            fs.extract_members(tar, tmp_path / "bad", tar.getmembers(), "bad.tar")
        assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "evil").exists()
    # an absolute name: refused (the fallback) or written inside the destination (the data filter)
    absolute = _tar(tmp_path / "abs.tar", [(str(tmp_path / "abs.txt"), b"x", "")])
    with tarfile.open(absolute) as tar, contextlib.suppress(IntegrityError):
        fs.extract_members(tar, tmp_path / "abs", tar.getmembers(), "abs.tar")
    assert not (tmp_path / "abs.txt").exists()
