"""The one strict decoder (dgr.contracts.convert) on every schema: a misspelt key in a copy of each lock,
in upstream-package/package.toml and in a verify report is refused, naming the file, the key and the known
key closest to it; every committed lock and JSON document still reads."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from dgr.builds import buildplan, reportstore
from dgr.cli import main
from dgr.contracts import locks
from dgr.contracts.bench import BenchResult
from dgr.contracts.report import ALL_GROUPS, GROUPS
from dgr.core.paths import Context, Repo
from dgr.errors import ConfigError
from dgr.export.upstream_package import load_config
from dgr.series import generated

from tests.helpers import ROOT, write_report

PORT = "llama-cpp-python-0.3.35"


def misspell(path: Path, key: str, typo: str) -> None:
    """Rename the first `key = ...` line of the TOML file `path` to `typo = ...`."""
    text = path.read_text()
    changed = re.sub(rf"^{re.escape(key)} = ", f"{typo} = ", text, count=1, flags=re.M)
    assert changed != text, f"{path} has no `{key} = ` line"
    path.write_text(changed)


@pytest.mark.parametrize(
    ("lock", "key", "typo", "where"),
    [
        ("toolchain.toml", "ninja", "ninjaa", "toolchain.toml.toolchain"),
        ("toolchain.toml", "committer_name", "commiter_name", "toolchain.toml.reproducibility.git_am"),
        ("upstream.toml", "tree", "tre", "upstream.toml.upstream"),
        ("model.toml", "default", "defualt", "model.toml"),
        ("model.toml", "wheel_sha256", "wheel_sha265", "model.toml.models.smollm2.wheels[0]"),
        ("patches.toml", "sha256", "sha265", "patches.toml.series"),
    ],
)
def test_a_misspelt_key_in_a_lock_is_exit_8_naming_the_file_the_key_and_the_closest_one(
    repo: Path, capsys: pytest.CaptureFixture[str], lock: str, key: str, typo: str, where: str
) -> None:
    misspell(repo / "locks" / lock, key, typo)
    assert main(["status"]) == 8
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{repo / 'locks' / lock}: invalid lock" in err
    assert f"{where}: unknown key `{typo}`; did you mean `{key}`?" in err


def test_a_misspelt_key_in_a_ports_lock_is_refused(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "series" / "ports").mkdir()
    shutil.copy(repo / "series" / "series", repo / "series" / "ports" / PORT)
    shutil.copytree(repo / "patches", repo / "patches" / "ports" / PORT)
    assert main(["manifest"]) == 0
    port = Repo(repo).for_port(PORT)
    misspell(port.manifest_file, "file", "fiel")
    with pytest.raises(ConfigError) as info:
        locks.load_manifest_file(port.manifest_file)
    assert info.value.exit_code == 8
    assert f"{PORT}.toml.series: unknown key `fiel`; did you mean `file`?" in (info.value.detail or "")
    # and `dgr check`, which reads it, cannot go on (exit 8, naming it)
    assert main(["check", "--no-style"]) == 8
    err = capsys.readouterr().err
    assert f"{port.manifest_file}: invalid lock" in err and "unknown key `fiel`; did you mean `file`?" in err


def test_a_misspelt_key_gets_the_closest_known_one_and_the_key_it_replaces_is_missing(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    misspell(tmp_path / "locks" / "toolchain.toml", "cmake", "cmake_versoin")
    with pytest.raises(ConfigError) as info:
        locks.load_toolchain(tmp_path / "locks")
    assert (info.value.detail or "").splitlines() == [
        "toolchain.toml.toolchain.cmake: missing",
        "toolchain.toml.toolchain: unknown key `cmake_versoin`; did you mean `cmake_options`?",
    ]


def test_a_key_like_no_known_one_lists_the_known_ones(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    path = tmp_path / "locks" / "patches.toml"
    path.write_text(path.read_text().replace("[series]\n", '[series]\nzzz = "x"\n', 1))
    with pytest.raises(ConfigError) as info:
        locks.load_manifest_file(path)
    assert "patches.toml.series: unknown key `zzz` (known: sha256, file)" in str(info.value.render())


def test_an_added_unknown_key_is_refused_even_beside_the_right_one(tmp_path: Path) -> None:
    # the case that once loaded and did not even change the digest: a key the lock does not have, added
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    path = tmp_path / "locks" / "toolchain.toml"
    path.write_text(path.read_text().replace('cmake = "', 'cmake_versoin = "9.9"\ncmake = "', 1))
    with pytest.raises(ConfigError, match="invalid lock") as info:
        locks.load_toolchain(tmp_path / "locks")
    assert "unknown key `cmake_versoin`" in (info.value.detail or "")


def test_a_misspelt_key_in_the_package_configuration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "package.toml"
    shutil.copy(ROOT / "upstream-package" / "package.toml", path)
    misspell(path, "drop_when", "drop_wehn")
    series = [
        line for line in (ROOT / "series" / "series").read_text().splitlines() if line and line[0] != "#"
    ]
    with pytest.raises(ConfigError) as info:
        load_config(path, series)
    assert info.value.exit_code == 8
    detail = info.value.detail or ""
    assert "package.toml.concerns[0]: unknown key `drop_wehn`; did you mean `drop_when`?" in detail
    assert "package.toml.concerns[0].drop_when: missing" in detail


@pytest.mark.parametrize("group", ["native", "offload", "sieries"])
def test_a_concern_backed_by_no_conformance_group_is_refused(tmp_path: Path, group: str) -> None:
    """A concern's `verify_group` (read straight into Concern.group) names a group of `dgr verify` other than
    the native tests; the others are listed."""
    path = tmp_path / "package.toml"
    shutil.copy(ROOT / "upstream-package" / "package.toml", path)
    text = path.read_text()
    first = re.search(r'^verify_group = "\w+"$', text, flags=re.M)
    assert first is not None
    path.write_text(text[: first.start()] + f'verify_group = "{group}"' + text[first.end() :])
    series = [
        line for line in (ROOT / "series" / "series").read_text().splitlines() if line and line[0] != "#"
    ]
    with pytest.raises(ConfigError) as info:
        load_config(path, series)
    # the groups of dgr verify but the native tests, and offload (a GPU group that the CPU verify lacks)
    listed = ", ".join(g for g in GROUPS if g != "native")
    assert "native" not in listed and "offload" not in listed and "kv" in listed
    detail = info.value.detail or ""
    assert f"package.toml.concerns[0].verify_group: {group!r} is not one of {listed}" in detail
    shutil.copy(ROOT / "upstream-package" / "package.toml", path)
    assert load_config(path, series).concerns[0].group in set(ALL_GROUPS) - {"native", "offload"}


def test_a_misspelt_key_in_a_verify_report_is_refused(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digest = buildplan.plan(Context.discover(), buildplan.Request()).digest
    path = write_report(digest)
    data = json.loads(path.read_text())
    data["checks"][0]["detial"] = data["checks"][0].pop("detail", "")
    path.write_text(json.dumps(data))
    assert main(["status", "--json"]) == 0
    verify = json.loads(capsys.readouterr().out)["verify"]
    assert f"missing: {path} is not a verify report: {path}.checks[0]: unknown key `detial`; " in verify
    assert "did you mean `detail`?" in verify
    with pytest.raises(ConfigError, match=r"unknown key `detial`; did you mean `detail`\?"):
        reportstore.Report.from_json(data, str(path))


def test_a_misspelt_key_in_a_bench_result_is_refused() -> None:
    data = json.loads((ROOT / "docs" / "bench" / "bench.json").read_text())
    data["machine"]["cpuz"] = data["machine"].pop("cpu")
    with pytest.raises(ConfigError) as info:
        BenchResult.from_json(data)
    assert (info.value.detail or "").splitlines() == [
        "bench result.machine.cpu: missing",
        "bench result.machine: unknown key `cpuz`; did you mean `cpu`?",
    ]


def test_a_misspelt_key_in_the_rules_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "series" / "rules").mkdir(parents=True)
    text = (ROOT / "series" / "rules" / "rules.toml").read_text()
    (tmp_path / "series" / "rules" / "rules.toml").write_text(text.replace("rule = ", "rulle = ", 1))
    with pytest.raises(ConfigError) as info:
        generated.load(Repo(tmp_path))
    assert info.value.exit_code == 8
    assert "series/rules/rules.toml.generated[0]: unknown key `rulle`; did you mean `rule`?" in (
        info.value.detail or ""
    )
