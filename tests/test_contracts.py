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
from dgr.contracts import expectations
from dgr.contracts.buildmanifest import (
    AppliedPatch,
    BuildInfo,
    BuildManifest,
    PatchedInfo,
    ToolchainInfo,
    UpstreamInfo,
)
from dgr.contracts.report import GROUPS, REPORT_FORMAT, Check, Counts, Report
from dgr.core.paths import Cache
from dgr.errors import ConfigError

from tests.helpers import ROOT


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
    assert data["passed"] is True and data["format"] == REPORT_FORMAT == 3
    assert written.problems("a" * 64) == []


def test_problems_name_the_digest_the_groups_and_the_failures() -> None:
    failing = Check(group="kv", name="x", evidence="real model", passed=False, detail="broke")
    partial = report(groups=("native", "kv"), checks=(failing,))
    assert partial.problems("b" * 64) == [
        f"it is for the inputs {'a' * 64}, not {'b' * 64}",
        f"it does not cover the group(s) {', '.join(g for g in GROUPS if g != 'kv')} (it ran native, kv)",
        "no check passed in the group(s) kv (0 passed, 1 failed)",
        "1 check(s) failed: kv/x",
    ]


def test_a_report_passes_only_when_every_group_it_ran_has_a_passed_check() -> None:
    listed = Check(
        group="graph", name="gptj/dense", evidence="synthetic fixture", passed=False, not_compared=True
    )
    device = Check(group="archs", name="x", evidence="synthetic fixture", passed=False, device_failure=True)
    upstream = Check(
        group="upstream", name="main/t", evidence="native test", passed=False, upstream_failure=True
    )
    whole = report()
    for apart in (listed, device, upstream):
        # the group holds only a check counted apart: no pass, and `problems` names the group
        others = tuple(c for c in whole.checks if c.group != apart.group)
        alone = report(checks=(*others, apart))
        assert not alone.passed and alone.counts.failed == 0
        assert alone.groups_not_passed() == [apart.group]
        [problem] = alone.problems("a" * 64)
        assert problem.startswith(f"no check passed in the group(s) {apart.group} (0 passed, ")
        assert Report.from_json(alone.to_json()) == alone  # `passed: false` reads back
        # beside a passed check of its group, it is no failure
        beside = report(checks=(*whole.checks, apart))
        assert beside.passed and beside.problems("a" * 64) == []
    assert not report(groups=(), checks=()).passed


def test_a_check_that_compared_nothing_is_listed_apart() -> None:
    listed = Check(group="graph", name="v", evidence="synthetic fixture", passed=False, not_compared=True)
    assert listed.outcome == "LISTED" and not listed.failed
    assert Counts.of([listed]) == Counts(passed=0, device_failures=0, failed=0, not_compared=1)
    assert listed.to_json()["not_compared"] is True
    assert "not_compared" not in Check(group="graph", name="v", evidence="real model", passed=True).to_json()
    for other in ({"passed": True}, {"device_failure": True}, {"upstream_failure": True}):
        with pytest.raises(ConfigError, match="compared nothing is neither a pass nor a failure"):
            Check(
                **{
                    "group": "graph",
                    "name": "v",
                    "evidence": "real model",
                    "passed": False,
                    **other,
                    "not_compared": True,
                }
            )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "format 2 is not 3"),
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


# --------------------------------------------------------------------------- series/verify.toml


def test_the_series_declares_what_verify_holds_it_to() -> None:
    declared = expectations.load(ROOT)
    assert declared.archs.certified_at_least >= 100
    assert declared.why_upstream_fails("test-chat") is not None
    assert declared.why_upstream_fails("test-thread-safety") is None
    assert all(f.why.strip() for f in declared.upstream_failures.values())


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        (
            '[archs]\ncertified_at_least = 104\n[upstream_failures.test-chat]\nwhy = "x"\nwhen = "always"\n',
            ["verify.toml.upstream_failures.test-chat: unknown key `when`"],
        ),
        (
            "[archs]\ncertifed_at_least = 104\n",
            [
                "verify.toml.archs.certified_at_least: missing",
                "verify.toml.archs: unknown key `certifed_at_least`; did you mean `certified_at_least`?",
            ],
        ),
        (
            "[archs]\ncertified_at_least = 0\n",
            ["verify.toml.archs.certified_at_least: 0 is not a positive number"],
        ),
        ("[archs]\ncertified_at_least = true\n", ["expected an integer, found bool"]),
        (
            '[archs]\ncertified_at_least = 1\n[upstream_failures.test-chat]\nwhy = " "\n',
            ["verify.toml.upstream_failures.test-chat.why: expected a non-empty string"],
        ),
        ("[upstream_failures]\n", ["verify.toml.archs: missing"]),
        ("[archs\n", ["not valid TOML"]),
    ],
)
def test_a_malformed_series_verify_toml_is_refused_naming_every_problem(
    tmp_path: Path, text: str, problems: list[str]
) -> None:
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "verify.toml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        expectations.load(tmp_path)
    said = caught.value.render()
    assert said.startswith("dgr: config: series/verify.toml: ")
    for problem in problems:
        assert problem in said, said
    assert caught.value.exit_code == 8


def test_a_missing_series_verify_toml_says_how_to_restore_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"series/verify\.toml: missing") as caught:
        expectations.load(tmp_path)
    assert caught.value.hint == "restore it with `git checkout -- series/verify.toml`"


def test_series_verify_toml_is_part_of_the_harness(tmp_path: Path) -> None:
    # a report judged under other declarations is stale: the harness holds the file by its SHA-256
    from dgr.builds import harness
    from dgr.core.paths import Repo

    assert expectations.PATH in harness.current(Repo(ROOT)).files
    assert expectations.PATH not in harness.current(Repo(tmp_path)).files
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "verify.toml").write_text("[archs]\ncertified_at_least = 1\n")
    before = harness.current(Repo(tmp_path))
    (tmp_path / "series" / "verify.toml").write_text("[archs]\ncertified_at_least = 2\n")
    assert before.changes(harness.current(Repo(tmp_path))) == [f"changed: {expectations.PATH}"]
