"""Obtaining the upstream: mirror, sdist, git remote; refusals leave nothing in the cache."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.contracts import locks
from dgr.contracts.locks import Pin, SdistRef, Source
from dgr.core.digest import sha256_file
from dgr.core.paths import Cache
from dgr.errors import IntegrityError, NetworkError, UpstreamError
from dgr.sources import upstream

from tests.helpers import FakeUpstream, git

BACKEND = """
import os

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, "fake_llama_sdist-1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\\nName: fake-llama-sdist\\nVersion: 1.0\\n")
    return "fake_llama_sdist-1.0.dist-info"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise NotImplementedError

def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError
"""


def pin_of(fake: FakeUpstream) -> Pin:
    return locks.load_upstream(Path(os.environ["DGR_REPO"]) / "locks").pin


def cache() -> Cache:
    return Cache(Path(os.environ["DGR_CACHE_DIR"]))


def leftovers(root: Path) -> list[str]:
    """Files left in the cache except lock files and empty directories."""
    return (
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.parent.name != "locks")
        if root.exists()
        else []
    )


def test_fetch_from_mirror(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fetch"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == cache().upstream_repo(fake_upstream.base)
    assert git(path, "rev-parse", "refs/dgr/upstream") == fake_upstream.base
    # cached: the second fetch verifies and reuses it
    assert main(["fetch"]) == 0
    assert "mirror" in (path / upstream.SOURCE_NOTE).read_text()


def test_mirror_with_wrong_tree_is_refused(repo: Path, fake_upstream: FakeUpstream) -> None:
    pin = pin_of(fake_upstream)
    wrong = Pin(pin.commit, fake_upstream.later_tree, pin.commit_date)
    with pytest.raises(UpstreamError) as info:
        upstream.obtain(cache(), wrong, (Source("mirror"),), fake_upstream.path)
    assert info.value.expected == fake_upstream.later_tree
    assert info.value.actual == fake_upstream.base_tree
    assert not cache().upstream_repo(pin.commit).exists()
    assert leftovers(cache().root) == []


def test_commit_missing_everywhere(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = repo / "locks" / "upstream.toml"
    lock.write_text(
        lock.read_text()
        .replace(fake_upstream.base, "1" * 40)
        .replace('kind = "git"\nurl', 'kind = "git"\nurl', 1)
    )
    text = lock.read_text()
    lock.write_text(text[: text.index('[[upstream.sources]]\nkind = "git"')])
    assert main(["fetch"]) == 4
    err = capsys.readouterr().err
    assert "does not contain commit 1111111111111111111111111111111111111111" in err
    assert "no source provided the upstream commit" in err


def test_unreachable_remote_is_a_network_error(
    repo: Path,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("DGR_UPSTREAM_MIRROR")
    assert main(["fetch"]) == NetworkError.exit_code
    err = capsys.readouterr().err
    assert "mirror (not configured)" in err
    assert "git remote http://127.0.0.1:9/llama.cpp.git" in err
    assert leftovers(cache().root) == []


def test_broken_cache_entry_is_replaced(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fetch"]) == 0
    path = Path(capsys.readouterr().out.strip())
    git(path, "update-ref", "-d", "refs/dgr/upstream")
    assert main(["fetch"]) == 0
    assert "is broken" in capsys.readouterr().err
    assert git(path, "rev-parse", "refs/dgr/upstream") == fake_upstream.base


# --------------------------------------------------------------------------- sdist


def make_sdist(fake: FakeUpstream, where: Path) -> Path:
    """An sdist laid out like llama-cpp-python's: the submodule's git dir under .git/modules/."""
    top = where / "build" / "fake_llama_sdist-1.0"
    modules = top / ".git" / "modules" / "vendor" / "llama.cpp"
    shutil.copytree(fake.path / ".git", modules)
    git(modules.parent, "--git-dir", str(modules), "config", "core.worktree", "../../../../vendor/llama.cpp")
    (top / "vendor" / "llama.cpp").mkdir(parents=True)
    (top / "vendor" / "llama.cpp" / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    (top / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        '[project]\nname = "fake-llama-sdist"\nversion = "1.0"\n'
    )
    (top / "backend.py").write_text(BACKEND)
    (top / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: fake-llama-sdist\nVersion: 1.0\n")
    index = where / "index"
    index.mkdir()
    archive = index / "fake_llama_sdist-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return archive


@pytest.fixture
def sdist_index(tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Path:
    archive = make_sdist(fake_upstream, tmp_path / "sdist")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(archive.parent))
    return archive


def sdist_source(sha256: str) -> tuple[Source, ...]:
    return (
        Source(
            "pypi-sdist",
            sdist=SdistRef(
                "fake-llama-sdist", "1.0", "fake_llama_sdist-1.0.tar.gz", sha256, "vendor/llama.cpp"
            ),
        ),
    )


def test_sdist_source(repo: Path, fake_upstream: FakeUpstream, sdist_index: Path) -> None:
    got = upstream.obtain(cache(), pin_of(fake_upstream), sdist_source(sha256_file(sdist_index)))
    assert git(got.repo, "rev-parse", "refs/dgr/upstream^{tree}") == fake_upstream.base_tree
    assert "pypi:fake-llama-sdist==1.0" in got.source
    assert (cache().downloads / sha256_file(sdist_index) / sdist_index.name).is_file()


def test_sdist_digest_mismatch_leaves_nothing(
    repo: Path, fake_upstream: FakeUpstream, sdist_index: Path
) -> None:
    wrong = "0" * 64
    with pytest.raises(IntegrityError) as info:
        upstream.obtain(cache(), pin_of(fake_upstream), sdist_source(wrong))
    assert info.value.exit_code == 3
    assert info.value.expected == wrong
    assert info.value.actual == sha256_file(sdist_index)
    assert "fake_llama_sdist-1.0.tar.gz" in info.value.what
    assert leftovers(cache().root) == []
    assert not any(cache().upstream.glob("*")) if cache().upstream.exists() else True


def test_sdist_with_another_commit_is_refused(
    repo: Path, fake_upstream: FakeUpstream, sdist_index: Path
) -> None:
    pin = pin_of(fake_upstream)
    other = Pin(fake_upstream.later, fake_upstream.later_tree, pin.commit_date)
    with pytest.raises(UpstreamError) as info:
        upstream.obtain(cache(), other, sdist_source(sha256_file(sdist_index)))
    assert info.value.expected == fake_upstream.later
    assert info.value.actual == fake_upstream.base
    assert not cache().upstream_repo(fake_upstream.later).exists()
