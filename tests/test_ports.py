"""Ports of the series to another upstream: their own order file, patches and manifest, linted and
verified like the series; `dgr rebase-check --matrix`; sanitizer builds in the build plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from dgr.builds import buildplan, cmakedefs
from dgr.cli import main
from dgr.core.paths import Context, Repo
from dgr.errors import IntegrityError, UsageError
from dgr.series import patchmanifest

from tests.helpers import FakeUpstream, flip_byte

PORT = "later-port"


def add_port(root: Path) -> Repo:
    """A port whose patches are the series' own (enough to exercise the bookkeeping)."""
    (root / "series" / "ports").mkdir()
    shutil.copy(root / "series" / "series", root / "series" / "ports" / PORT)
    shutil.copytree(root / "patches", root / "patches" / "ports" / PORT)
    assert main(["manifest"]) == 0
    return Repo(root).for_port(PORT)


def test_port_paths_and_manifest(repo: Path) -> None:
    port = add_port(repo)
    assert Repo(repo).ports() == [PORT]
    assert port.series_file == repo / "series" / "ports" / PORT
    assert port.patches_dir == repo / "patches" / "ports" / PORT
    assert port.manifest_file == repo / "locks" / "ports" / f"{PORT}.toml"
    text = port.manifest_file.read_text()
    assert f'file = "series/ports/{PORT}"' in text
    assert patchmanifest.verify(port).patches == patchmanifest.verify(Repo(repo)).patches


def test_check_is_clean_with_a_port_and_names_its_files(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = add_port(repo)
    assert main(["check"]) == 0
    name = next(iter(patchmanifest.verify(port).patches))
    flip_byte(port.patches_dir / name)
    (port.patches_dir / "stray.patch").write_text("not a patch\n")
    capsys.readouterr()
    assert main(["check"]) == 7
    out = capsys.readouterr().out
    assert f"patches/ports/{PORT}/{name}: digest: digest mismatch: locks/ports/{PORT}.toml says" in out
    assert f"patches/ports/{PORT}/stray.patch: unused: not named in series/ports/{PORT}" in out
    # the series itself does not claim the port's files
    assert "not named in series/series" not in out


def test_a_tampered_port_is_refused_before_building(repo: Path) -> None:
    port = add_port(repo)
    flip_byte(port.series_file)
    with pytest.raises(IntegrityError, match=f"series/ports/{PORT} does not match locks/ports/{PORT}.toml"):
        patchmanifest.verify(port)


def test_matrix_with_only_the_pin_is_clean(
    repo: Path, fake_upstream: FakeUpstream, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rebase-check", "--matrix", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    [column] = report["columns"]
    assert column["label"].startswith("pin ")
    assert [p["status"] for p in column["patches"]] == ["clean"] * 3
    assert main(["rebase-check", "--matrix", "--markdown"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| patch | pin ")
    assert "nothing: the series is current on the pin" in table


def test_matrix_and_onto_are_exclusive(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rebase-check", "--matrix", "--onto", "x"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_sanitizers_are_parsed_strictly() -> None:
    assert buildplan.parse_sanitizers("undefined,address") == ("address", "undefined")
    assert buildplan.parse_sanitizers(None) == ()
    with pytest.raises(UsageError, match="unknown sanitizer"):
        buildplan.parse_sanitizers("address,thread")


def test_a_sanitized_build_has_its_own_digest_and_flags(repo: Path) -> None:
    ctx = Context.discover()
    plain = buildplan.plan(ctx, buildplan.Request())
    asan = buildplan.plan(ctx, buildplan.Request(sanitize=("address", "undefined")))
    assert asan.digest != plain.digest
    assert asan.flavor == "patched+address+undefined"
    opts = asan.inputs["cmake_options"]
    assert opts["LLAMA_SANITIZE_ADDRESS"] == opts["GGML_SANITIZE_UNDEFINED"] == "ON"
    assert "LLAMA_SANITIZE_ADDRESS" not in plain.inputs["cmake_options"]
    # instrumented code compiles at -O1 (llama.cpp and the worker); a normal build keeps its own flags
    assert opts["CMAKE_CXX_FLAGS_RELEASE"] == opts["CMAKE_C_FLAGS_RELEASE"] == "-O1 -DNDEBUG"
    assert "CMAKE_CXX_FLAGS_RELEASE" not in plain.inputs["cmake_options"]
    worker = cmakedefs.worker_definitions(asan.toolchain_lock, ("address", "undefined"))
    assert worker["CMAKE_CXX_FLAGS_RELEASE"] == "-O1 -DNDEBUG"
    assert "-fsanitize=address,undefined" in worker["CMAKE_CXX_FLAGS"]
