"""Locks: tomli-w round trip, validation problems, the committed files are canonical."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import tomli_w
from dgr.contracts import locks
from dgr.errors import ConfigError

from tests.helpers import ROOT


@pytest.mark.parametrize(("name", "parse"), list(locks.LOCK_FILES.values()))
def test_committed_locks_are_valid_and_canonical(name: str, parse: locks.Parser) -> None:
    path = ROOT / "locks" / name
    problems: list[str] = []
    parsed = parse(tomllib.loads(path.read_text()), name, problems)
    assert problems == []
    # written by tomli-w: dumping the parsed lock gives back the exact bytes
    assert tomli_w.dumps(parsed.to_toml()) == path.read_text()


def test_round_trip_through_files(tmp_path: Path) -> None:
    upstream = locks.load_upstream(ROOT / "locks")
    toolchain = locks.load_toolchain(ROOT / "locks")
    locks.write_toml(tmp_path / "upstream.toml", upstream.to_toml())
    locks.write_toml(tmp_path / "toolchain.toml", toolchain.to_toml())
    assert locks.load_upstream(tmp_path) == upstream
    assert locks.load_toolchain(tmp_path) == toolchain


def test_pin_dates() -> None:
    pin = locks.load_upstream(ROOT / "locks").pin
    assert pin.epoch == 1790820708
    assert pin.git_date == "1790820708 +0900"
    assert pin.short == "0c1e570"


def test_locked_rebase_target() -> None:
    # the pin before the move to 0c1e570, kept as a row of the rebase matrix
    target = locks.load_upstream(ROOT / "locks").rebase_targets["pypi:llama-cpp-python==0.3.35"]
    assert target.pin.commit == "4df29be4f4c3673f428170fda944a5b19f743bb8"
    assert target.sdist.sha256 == "1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12"
    assert target.port is None


def test_validation_lists_every_problem(tmp_path: Path) -> None:
    data = locks.load_upstream(ROOT / "locks").to_toml()
    data["upstream"]["commit"] = "4df29be"
    data["upstream"]["tree"] = 42
    data["upstream"]["sources"][1]["sha256"] = "not-a-digest"
    data["upstream"]["sources"].append({"kind": "ftp"})
    locks.write_toml(tmp_path / "upstream.toml", data)
    with pytest.raises(ConfigError) as info:
        locks.load_upstream(tmp_path)
    detail = info.value.detail or ""
    assert "upstream.toml.upstream.commit: '4df29be' is not a 40-hex git object id" in detail
    assert "upstream.toml.upstream.tree: expected a string" in detail
    assert "upstream.sources[1].sha256" in detail
    assert "'ftp' is not one of mirror, pypi-sdist, release-sdist, git" in detail
    assert info.value.exit_code == 8


def test_unreadable_toml_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "model.toml").write_text("[model\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        locks.load_model(tmp_path)
    with pytest.raises(ConfigError, match="lock file missing"):
        locks.load_toolchain(tmp_path)


def test_toolchain_rejects_unsupported_values(tmp_path: Path) -> None:
    data = locks.load_toolchain(ROOT / "locks").to_toml()
    data["toolchain"]["generator"] = "Unix Makefiles"
    data["toolchain"]["cmake_options"]["GGML_NATIVE"] = False
    data["reproducibility"]["prefix_maps"] = ["no-equals-sign"]
    locks.write_toml(tmp_path / "toolchain.toml", data)
    problems = locks.problems_in(tmp_path / "toolchain.toml", locks.ToolchainLock.parse)
    assert any('only "Ninja"' in p for p in problems)
    assert any("GGML_NATIVE: expected a string" in p for p in problems)
    assert any("is not OLD=NEW" in p for p in problems)


def test_toolchain_lock_keeps_portable_cpu_flags() -> None:
    options = locks.load_toolchain(ROOT / "locks").cmake_options
    assert options["GGML_NATIVE"] == "OFF"
    assert options["GGML_AVX2"] == "ON"
    assert all(options[k] == "OFF" for k in options if k.startswith(("GGML_AMX", "GGML_AVX512")))
