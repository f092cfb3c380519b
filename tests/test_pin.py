"""`dgr pin --to SPEC`: the pin moves to a rebase target in one step (its port promoted, or the series
rebased), only with a clean series and a passing verify report, and nothing changes when it refuses.

The fake upstream of conftest.py stands in for llama.cpp: its `base` is the pin, its `later` the target
`pypi:llama-cpp-python==9.9.9` (found through the mirror, like the pin)."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from dgr.builds import buildplan
from dgr.cli import main
from dgr.core.paths import Context
from dgr.maintain import pinning

from tests.helpers import (
    FIXTURE_PAGE,
    ROOT,
    FakeUpstream,
    commit_all,
    flip_byte,
    format_patch,
    git,
    later_upstream,
    message,
    write_report,
)

SPEC = "pypi:llama-cpp-python==9.9.9"
OLD_SPEC = "pypi:llama-cpp-python==0.3.35"
PORT = "later"


def lock_text(up: FakeUpstream, port: str | None = PORT) -> str:
    return f"""[upstream]
repo = "https://github.com/ggml-org/llama.cpp"
commit = "{up.base}"
tree = "{up.base_tree}"
commit_date = 2026-08-16T14:53:13+02:00

[[upstream.sources]]
kind = "mirror"

[[upstream.sources]]
kind = "pypi-sdist"
package = "llama-cpp-python"
version = "0.3.35"
filename = "llama_cpp_python-0.3.35.tar.gz"
sha256 = "{"1" * 64}"
subdir = "vendor/llama.cpp"

[[upstream.sources]]
kind = "git"
url = "http://127.0.0.1:9/llama.cpp.git"

[rebase.targets."{SPEC}"]
package = "llama-cpp-python"
version = "9.9.9"
filename = "llama_cpp_python-9.9.9.tar.gz"
sha256 = "{"2" * 64}"
subdir = "vendor/llama.cpp"
commit = "{up.later}"
tree = "{up.later_tree}"
commit_date = 2026-10-01T09:31:48+09:00
""" + (f'port = "{port}"\n' if port else "")


def port_patches(up: FakeUpstream, work: Path, edit: tuple[str, str] | None = None) -> dict[str, str]:
    """Patches written against `later`: a docs page, and (optionally) an edit of the README."""
    shutil.copytree(up.path, work)
    git(work, "checkout", "-q", "-B", "port", up.later)
    (work / "docs" / "fixture.md").write_text("# fixture\n\nA page added by a patch.\n")
    patches = {
        "docs-add-a-fixture-page.patch": format_patch(work, commit_all(work, message("docs : add a page")))
    }
    if edit:
        readme = work / "README.md"
        readme.write_text(readme.read_text().replace(*edit))
        patches["readme-edit.patch"] = format_patch(work, commit_all(work, message("readme : edit a line")))
    return patches


def add_port(root: Path, patches: dict[str, str]) -> None:
    (root / "series" / "ports").mkdir(parents=True, exist_ok=True)
    (root / "series" / "ports" / PORT).write_text(
        "# the series, ported to 9.9.9\n" + "".join(f"{n}\n" for n in patches)
    )
    directory = root / "patches" / "ports" / PORT
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in patches.items():
        (directory / name).write_text(text)
    assert main(["manifest"]) == 0


def verified_port_digest() -> str:
    """What `dgr verify --upstream SPEC` keeps its report under: the port on its target."""
    return buildplan.plan(Context.discover(), buildplan.Request(upstream=SPEC)).digest


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def ported(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Path:
    (repo / "locks" / "upstream.toml").write_text(lock_text(fake_upstream))
    add_port(repo, port_patches(fake_upstream, tmp_path / "port-work"))
    capsys.readouterr()
    return repo


def test_promote_a_port(
    ported: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = verified_port_digest()
    write_report(digest)
    port_series = (ported / "series" / "ports" / PORT).read_bytes()
    port_patch = (ported / "patches" / "ports" / PORT / "docs-add-a-fixture-page.patch").read_bytes()

    assert main(["pin", "--to", SPEC]) == 0
    out = capsys.readouterr().out
    assert f"pinned {fake_upstream.later} (tree {fake_upstream.later_tree}" in out
    lock = tomllib.loads((ported / "locks" / "upstream.toml").read_text())
    assert (lock["upstream"]["commit"], lock["upstream"]["tree"]) == (
        fake_upstream.later,
        fake_upstream.later_tree,
    )
    assert [s["kind"] for s in lock["upstream"]["sources"]] == ["mirror", "pypi-sdist", "git"]
    assert lock["upstream"]["sources"][1]["version"] == "9.9.9"
    # the port is the series now, byte for byte; the old series and the port's files are gone
    assert (ported / "series" / "series").read_bytes() == port_series
    assert sorted(p.name for p in (ported / "patches").iterdir()) == ["docs-add-a-fixture-page.patch"]
    assert (ported / "patches" / "docs-add-a-fixture-page.patch").read_bytes() == port_patch
    for gone in ("series/ports", "patches/ports", "locks/ports"):
        assert not (ported / gone).exists(), gone
    assert main(["check"]) == 0
    # the port verified on its target and the promoted series are the same inputs: one report
    assert buildplan.plan(Context.discover(), buildplan.Request()).digest == digest
    assert "wrote: locks/upstream.toml" in out and "removed: series/ports/later" in out


def test_the_old_pin_is_kept_as_a_matrix_row(
    ported: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    write_report(verified_port_digest())
    assert main(["pin", "--to", SPEC]) == 0
    lock = tomllib.loads((ported / "locks" / "upstream.toml").read_text())
    assert list(lock["rebase"]["targets"]) == [OLD_SPEC]
    old = lock["rebase"]["targets"][OLD_SPEC]
    assert (old["commit"], old["tree"], old["sha256"]) == (
        fake_upstream.base,
        fake_upstream.base_tree,
        "1" * 64,
    )
    assert "port" not in old
    capsys.readouterr()
    assert main(["rebase-check", "--matrix", "--json"]) == 0
    columns = json.loads(capsys.readouterr().out)["columns"]
    assert [c["label"] for c in columns] == [f"pin {fake_upstream.later[:7]}", OLD_SPEC]
    assert columns[1]["onto"]["commit"] == fake_upstream.base


def test_refuses_without_a_report(ported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(ported)
    assert main(["pin", "--to", SPEC]) == 9
    err = capsys.readouterr().err
    assert "there is no verify report for the current inputs" in err
    assert f"run `dgr verify --upstream {SPEC}` (all groups), then `dgr pin --to {SPEC}` again" in err
    assert snapshot(ported) == before


def test_refuses_a_port_that_is_not_clean_on_its_target(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "locks" / "upstream.toml").write_text(lock_text(fake_upstream))
    # written against the base, this edit needs a 3-way merge on `later`
    patches = port_patches(
        fake_upstream, tmp_path / "w", edit=("| Hexagon | Snapdragon |", "| Hexagon | Qualcomm |")
    )
    patches["readme-edit.patch"] = (repo / "patches" / "readme-name-the-cann-vendor.patch").read_text()
    add_port(repo, patches)
    write_report(verified_port_digest())
    before = snapshot(repo)
    assert main(["pin", "--to", SPEC]) == 5
    err = capsys.readouterr().err
    assert "the new series does not apply cleanly on pypi:llama-cpp-python==9.9.9" in err
    assert "patches/readme-edit.patch: 3-way" in err
    assert snapshot(repo) == before


def test_refuses_a_tampered_port(ported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_report(verified_port_digest())
    flip_byte(ported / "patches" / "ports" / PORT / "docs-add-a-fixture-page.patch")
    before = snapshot(ported)
    assert main(["pin", "--to", SPEC]) == 3
    assert f"does not match locks/ports/{PORT}.toml" in capsys.readouterr().err
    assert snapshot(ported) == before


def test_without_a_port_the_series_is_rebased_and_stops_at_a_conflict(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "locks" / "upstream.toml").write_text(lock_text(fake_upstream, port=None))
    before = snapshot(repo)
    assert main(["pin", "--to", SPEC]) == 5
    err = capsys.readouterr().err
    assert "patches/readme-mark-hexagon-experimental.patch conflicts on pypi:llama-cpp-python==9.9.9" in err
    assert f"run `dgr edit --onto {SPEC}`" in err
    assert snapshot(repo) == before


def keep_only(repo: Path, names: list[str]) -> None:
    (repo / "series" / "series").write_text("".join(f"{n}\n" for n in names))
    for patch in (repo / "patches").iterdir():
        if patch.name not in names:
            patch.unlink()
    assert main(["manifest"]) == 0


def test_a_rebased_series_that_changed_needs_its_own_report(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README patch needs a 3-way merge on `later`: rebased, its mail differs from patches/, so no
    report can exist for it yet; the hint says how to get one."""
    (repo / "locks" / "upstream.toml").write_text(lock_text(fake_upstream, port=None))
    keep_only(repo, ["docs-add-a-fixture-page.patch", "readme-name-the-cann-vendor.patch"])
    before = snapshot(repo)
    capsys.readouterr()
    assert main(["pin", "--to", SPEC]) == 9
    err = capsys.readouterr().err
    assert "the series rebased onto pypi:llama-cpp-python==9.9.9 differs from patches/" in err
    assert f"`dgr verify --upstream {SPEC}`, then `dgr pin --to {SPEC}` again" in err
    assert snapshot(repo) == before


def test_a_series_that_rebases_unchanged_moves_with_the_report_of_verify_upstream(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new file's patch gives the same mail on `later`: the report of `dgr verify --upstream SPEC` (the
    series built on the target) is the report of the moved pin."""
    (repo / "locks" / "upstream.toml").write_text(lock_text(fake_upstream, port=None))
    keep_only(repo, ["docs-add-a-fixture-page.patch"])
    patch = (repo / "patches" / "docs-add-a-fixture-page.patch").read_bytes()
    write_report(verified_port_digest())
    assert main(["pin", "--to", SPEC]) == 0
    assert (repo / "patches" / "docs-add-a-fixture-page.patch").read_bytes() == patch
    lock = tomllib.loads((repo / "locks" / "upstream.toml").read_text())
    assert lock["upstream"]["commit"] == fake_upstream.later
    assert main(["check"]) == 0


def test_nothing_changes_when_writing_fails(
    ported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fourth rename of the final step fails: what was renamed is put back."""
    write_report(verified_port_digest())
    before = snapshot(ported)
    real_rename = Path.rename
    calls: list[Path] = []

    def failing_rename(self: Path, target: Path) -> Path:
        if self.name.endswith((".tmp", ".old")) or str(target).endswith(".old"):
            calls.append(self)
            if len(calls) == 4:
                raise OSError(28, "No space left on device")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="No space left"):
        pinning.move(Context.discover(), SPEC)
    monkeypatch.undo()
    assert len(calls) > 4  # the failing rename, then the renames that put the files back
    assert snapshot(ported) == before


def test_the_pin_itself_is_refused(
    ported: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--to", fake_upstream.base]) == 2
    assert "that is the pin already" in capsys.readouterr().err


def test_an_older_upstream_is_refused_unless_asked_for(
    ported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pin only moves forward: a target older than the pin (by commit date) needs --allow-older."""
    lock = ported / "locks" / "upstream.toml"
    lock.write_text(
        lock.read_text().replace(
            "commit_date = 2026-10-01T09:31:48+09:00", "commit_date = 2026-07-01T09:31:48+09:00"
        )
    )
    assert main(["manifest"]) == 0
    before = snapshot(ported)
    capsys.readouterr()
    assert main(["pin", "--to", SPEC]) == 2
    err = capsys.readouterr().err
    assert "of 2026-07-01T09:31:48+09:00, older than the pin" in err and "the pin only moves forward" in err
    assert "`dgr pin --to SPEC --allow-older`" in err
    assert snapshot(ported) == before
    # asked for, the move goes on to its next condition: a passing verify report
    assert main(["pin", "--to", SPEC, "--allow-older"]) == 9
    assert "there is no verify report for the current inputs" in capsys.readouterr().err
    assert snapshot(ported) == before


def test_a_patch_the_target_has_already_is_refused(
    repo: Path, fake_upstream: FakeUpstream, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target merged the first patch: the pin stays, and dgr names the patch to drop."""
    onto = later_upstream(fake_upstream, tmp_path / "merged", FIXTURE_PAGE, "1795000000 +0000")
    before = snapshot(repo)
    assert main(["pin", "--to", str(onto)]) == 2
    err = capsys.readouterr().err
    assert "has the change of docs-add-a-fixture-page.patch already (it applies there in reverse)" in err
    assert "drop it from the series" in err
    assert snapshot(repo) == before


def test_the_committed_locks_still_read(tmp_path: Path) -> None:
    """`dgr pin` writes locks/upstream.toml with locks.dumps: the committed file is exactly that."""
    from dgr.contracts import locks

    lock = locks.load_upstream(ROOT / "locks")
    assert locks.dumps(lock.to_toml()) == (ROOT / "locks" / "upstream.toml").read_bytes()
