"""The typed contracts: the verify report and the build manifest read back what they write, refuse a
malformed document naming the field, and are built with keywords only."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dgr.builds import buildplan
from dgr.builds.buildcache import MANIFEST, BuildStore
from dgr.contracts.buildmanifest import (
    AppliedPatch,
    BuildInfo,
    BuildManifest,
    PatchedInfo,
    ToolchainInfo,
    UpstreamInfo,
)
from dgr.contracts.report import GROUPS, Check, Report
from dgr.core.paths import Cache
from dgr.errors import ConfigError


def report(**overrides: Any) -> Report:
    checks = tuple(
        Check(
            group=g, name=f"{g}-check", evidence="native test" if g == "native" else "real model", passed=True
        )
        for g in GROUPS
    )
    fields: dict[str, Any] = {
        "inputs_digest": "a" * 64,
        "baseline_digest": None,
        "groups": GROUPS,
        "durations_s": {"native": 1.5},
        "checks": checks,
    }
    return Report(**{**fields, **overrides})


def test_the_report_reads_back_what_it_writes() -> None:
    written = report()
    data = json.loads(json.dumps(written.to_json()))
    assert Report.from_json(data) == written
    assert data["passed"] is True and data["format"] == 2
    assert written.problems("a" * 64) == []


def test_problems_name_the_digest_the_groups_and_the_failures() -> None:
    failing = Check(group="kv", name="x", evidence="real model", passed=False, detail="broke")
    partial = report(groups=("native", "kv"), checks=(failing,))
    assert partial.problems("b" * 64) == [
        f"it is for the inputs {'a' * 64}, not {'b' * 64}",
        f"it does not cover the group(s) {', '.join(g for g in GROUPS if g != 'kv')} (it ran native, kv)",
        "1 check(s) failed: kv/x",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 1}, "format 1 is not 2"),
        (
            {
                "checks": [
                    {
                        "group": "archs",
                        "name": "x",
                        "evidence": "synthetic fixture",
                        "passed": True,
                        "device_failure": True,
                    }
                ]
            },
            "a device failure is not a passed check",
        ),
        ({"passed": False}, "`passed` is False, but its checks say True"),
        ({"groups": ["native", "speed"]}, r"report.groups\[1\]: 'speed' is not one of"),
        ({"checks": [{"group": "kv", "name": "x", "evidence": "a hunch", "passed": True}]}, "evidence"),
        (
            {"checks": [{"group": "kv", "name": "x", "evidence": "real model", "passed": "yes"}]},
            r"report.checks\[0\].passed: expected true or false, found str",
        ),
        ({"inputs_digest": 5}, "report.inputs_digest: expected a string, found int"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Report.from_json({**report().to_json(), **change})


def test_records_take_keywords_only() -> None:
    with pytest.raises(TypeError):
        Check("kv", "x", "real model", True)  # type: ignore[misc]  # the point: positional is refused
    fields = [f.name for f in dataclasses.fields(buildplan.Plan)]
    assert len(fields) == 14
    with pytest.raises(TypeError):
        buildplan.Plan(*fields)  # type: ignore[misc]  # the point: positional is refused


def manifest() -> BuildManifest:
    return BuildManifest(
        build=BuildInfo(
            inputs_digest="d" * 64,
            upstream_only=False,
            targets=("llama", "ggml"),
            native_tests=(),
            worker=True,
            source_dir="/c/work/k/src",
            build_dir="/c/work/k/build",
        ),
        upstream=UpstreamInfo(repo="https://x/llama.cpp", commit="1" * 40, tree="2" * 40, source="mirror"),
        patched=PatchedInfo(commit="3" * 40, tree="4" * 40),
        patches=(AppliedPatch(name="a.patch", sha256="5" * 64, commit="3" * 40),),
        toolchain=ToolchainInfo(
            cmake="4.4.5", ninja="1.13.2", cc="gcc", cc_path="/cc", cxx="g++", cxx_path="/c"
        ),
        inputs={"format": "6" * 64},
        cmake_options={"GGML_NATIVE": "OFF"},
        source_date_epoch=1786884793,
        artifacts={"bin/libllama.so.0": "7" * 64},
        links={"bin/libllama.so": "libllama.so.0"},
    )


def test_the_build_manifest_reads_back_from_toml() -> None:
    written = manifest()
    data = tomllib.loads(tomli_w.dumps(written.to_json()))
    assert BuildManifest.from_json(data) == written
    # the JSON of `dgr build --json` keeps the order the manifest was always printed in
    assert list(written.to_json())[:3] == ["build", "upstream", "patched"]


def test_the_manifest_reads_back_from_what_dgr_build_json_prints() -> None:
    """`dgr build --json` prints the manifest with `path` and `status` (the bench's build timing reads it)."""
    written = manifest()
    printed = {**written.to_json(), "path": "/c/builds/d", "status": "built"}
    assert BuildManifest.from_printed(printed) == written
    with pytest.raises(ConfigError, match="unknown key `pth`"):
        BuildManifest.from_printed({**printed, "pth": "/x"})
    with pytest.raises(ConfigError, match="no status"):
        BuildManifest.from_printed({**written.to_json(), "path": "/c/builds/d"})


def test_a_published_build_with_a_malformed_manifest_is_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = BuildStore(Cache(tmp_path))
    root = store.path("d" * 64)
    root.mkdir(parents=True)
    data = manifest().to_json()
    del data["patched"]["tree"]
    (root / MANIFEST).write_text(tomli_w.dumps(data))
    assert store.lookup("d" * 64) is None
    assert "manifest.toml.patched.tree: missing" in capsys.readouterr().err
    assert not root.exists()
