"""The one strict decoder (dgr.contracts.convert) on every schema: a misspelt key in a copy of each lock,
in upstream-package/package.toml and in a verify report is refused, naming the file, the key and the known
key closest to it; every committed lock and JSON document still reads. Under every JSON document, the one
strict JSON decoder (dgr.core.jsonio): a key twice, NaN and Infinity refused, through the real readers (the
report store, bench.json as `dgr status` reads it)."""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dgr.builds import buildplan, harness, reportstore
from dgr.cli import main
from dgr.contracts import locks
from dgr.contracts.bench import TARGETS, BenchResult
from dgr.contracts.report import ALL_GROUPS, GROUPS
from dgr.core import jsonio
from dgr.core.paths import Context, Repo
from dgr.errors import ConfigError, VerifyError
from dgr.export import measured
from dgr.export.upstream_package import load_config
from dgr.series import generated
from dgr.verify.wire import bundle, frames
from dgr.verify.wire.bundle import BundleError
from dgr.verify.wire.frames import FrameError

from tests.export_upstream.support import bench_data
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
    data = bench_data("d" * 64)  # the committed docs/bench/bench.json may be of an older format
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


# the strict JSON decoder (dgr.core.jsonio), under every JSON read: a key twice, NaN and Infinity refused


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"checks": [{"passed": false, "passed": true}]}', "f.json.checks[0]: duplicate key `passed`"),
        ('{"figures": {"ratio": NaN}}', "f.json.figures.ratio: NaN is refused"),
        ('{"figures": [1.0, Infinity]}', "f.json.figures[1]: Infinity is refused"),
        ('{"figures": {"low": -Infinity}}', "f.json.figures.low: -Infinity is refused"),
        ('{"figures": {"big": 1e400}}', "f.json.figures.big: 1e400 is out of the range of a number"),
        ('{"passed": true,}', "f.json is not JSON: "),
    ],
)
def test_the_json_decoder_refuses_a_key_twice_nan_and_infinity_naming_where(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        jsonio.loads(text, "f.json")
    assert info.value.exit_code == 8 and problem in info.value.what
    assert jsonio.loads('{"passed": true, "figures": {"ratio": 0.5, "n": [1, 2e3]}}', "f.json") == {
        "passed": True,
        "figures": {"ratio": 0.5, "n": [1, 2000.0]},
    }


def test_every_json_read_of_the_package_goes_through_the_strict_decoder() -> None:
    """No module but dgr.core.jsonio calls `json.load`/`json.loads` or makes a JSONDecoder (read with `ast`):
    a new reader cannot take the lenient path."""
    found = []
    for path in sorted((ROOT / "builder" / "dgr").rglob("*.py")):
        if path == ROOT / "builder" / "dgr" / "core" / "jsonio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "json":
                found += [f"{path}:{node.lineno}: from json import {a.name}" for a in node.names]
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "json"
                and node.attr in ("load", "loads", "JSONDecoder")
            ):
                found.append(f"{path}:{node.lineno}: json.{node.attr}")
    assert found == []


def test_the_worker_protocol_keeps_its_own_error_for_a_key_twice() -> None:
    """A frame or a bundle header with a key twice is the protocol's error (exit 13 through the client), not a
    config error: the wire keeps its classes."""
    header = b'{"id":1,"op":"decode","op":"hello"}'
    with pytest.raises(FrameError, match="frame header: duplicate key `op`"):
        frames.read(io.BytesIO(frames.PREFIX.pack(frames.MAGIC, len(header), 0) + header))
    text = b'{"__metadata__":{"format":"layer-bundle","format":"layer-bundle"}}'
    with pytest.raises(BundleError, match=re.escape("header.__metadata__: duplicate key `format`")):
        bundle.decode(struct.pack("<Q", len(text)) + text)


def strict_problems(text: str, flag: str, nan: str, infinity: str) -> list[tuple[str, str, str]]:
    """(what, `text` with it, the problem named) for a key twice (the first `"<flag>": true` preceded by
    `"<flag>": false`), NaN (for the first number of the key `nan`) and Infinity (of the key `infinity`)."""
    cases = [
        ("a key twice", text.replace(f'"{flag}": true', f'"{flag}": false, "{flag}": true', 1), f"`{flag}`"),
        ("NaN", re.sub(rf'"{nan}": [-0-9.e]+', f'"{nan}": NaN', text, count=1), f"{nan}: NaN is refused"),
        (
            "Infinity",
            re.sub(rf'"{infinity}": [-0-9.e]+', f'"{infinity}": Infinity', text, count=1),
            f"{infinity}: Infinity is refused",
        ),
    ]
    assert all(changed != text for _, changed, _ in cases)
    return cases


def test_a_report_with_a_key_twice_nan_or_infinity_is_no_pass(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`"passed": false, "passed": true` in a stored verify report: read by the report store (status,
    export-upstream, pin) it is no report, where `json.loads` read it as passed; so are NaN and Infinity."""
    digest = buildplan.plan(Context.discover(), buildplan.Request()).digest
    path = write_report(digest)
    text = path.read_text()
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verify"].startswith("passed: ")
    where = {
        "a key twice": f"{path}: duplicate key `passed`",
        "NaN": f"{path}.checks[0].figures.max_abs_diff: NaN is refused",
        "Infinity": f"{path}.checks[0].figures.ratio: Infinity is refused",
    }
    for what, broken, problem in strict_problems(text, "passed", "max_abs_diff", "ratio"):
        path.write_text(broken)
        assert main(["status", "--json"]) == 0, what
        verify = json.loads(capsys.readouterr().out)["verify"]
        assert verify.startswith(f"missing: {path} is not a verify report: {where[what]}"), what
        assert problem in verify, what
        with pytest.raises(VerifyError, match=re.escape(where[what])):
            reportstore.load_passing(Context.discover().cache, digest, harness.current(Repo(repo)))


def write_bench(data: dict[str, Any] | str) -> Path:
    """bench.json where `dgr status` and `export-upstream` look for the current inputs' full bench."""
    ctx = Context.discover()
    path = measured.full_result(ctx.cache, buildplan.plan(ctx, buildplan.Request()).digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


BENCH_REFUSALS: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str]] = [
    ("an unknown key", lambda d: d | {"verdict": "every target met"}, ": unknown key `verdict`"),
    (
        "a summary saying every target is met",
        lambda d: (
            d | {"summary": {"targets": dict(TARGETS), "worst": {}, "met": dict.fromkeys(TARGETS, True)}}
        ),
        ": `summary` is not the one its measurements give",
    ),
    ("workers as a string", lambda d: d | {"workers": "5"}, ".workers: expected a list, found str"),
]


@pytest.mark.parametrize(("what", "change", "problem"), BENCH_REFUSALS, ids=[r[0] for r in BENCH_REFUSALS])
def test_status_refuses_a_bench_json_that_is_no_bench_result(
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    problem: str,
) -> None:
    """bench.json is read whole, as BenchResult (the export reads it so too: tests/export_upstream), not
    with `.get` of the keys the export renders: exit 8 naming the file and the key."""
    path = write_bench(bench_data(buildplan.plan(Context.discover(), buildplan.Request()).digest))
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bench"] == "current (`dgr bench --rpc` of these inputs)"
    write_bench(change(json.loads(path.read_text())))
    assert main(["status"]) == 8
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"dgr: config: not a bench result of `dgr bench`: {path}{problem}" in err


def test_status_refuses_a_bench_json_with_a_key_twice_nan_or_infinity(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(bench_data(buildplan.plan(Context.discover(), buildplan.Request()).digest), indent=2)
    for what, broken, problem in strict_problems(text, "same_output", "decode_tps", "prefill_tps"):
        path = write_bench(broken)
        assert main(["status"]) == 8, what
        err = capsys.readouterr().err
        assert "Traceback" not in err, what
        assert f"dgr: config: not a bench result of `dgr bench`: {path}.rpc.rows[0]" in err, what
        assert problem in err, what
