"""The results kept by what they ran (dgr.verify.checks.results): a part whose binaries, models and harness
are those of a passing run is taken from it; anything else runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dgr.contracts.buildmanifest import BuildManifest
from dgr.contracts.report import Check, Report
from dgr.verify.checks import native, results, testrun
from dgr.verify.checks.results import ResultStore
from dgr.verify.checks.session import Session


def check(name: str, passed: bool = True) -> Check:
    return Check(group="native", name=name, evidence="native test", passed=passed)


@dataclass
class FakeBuilt:
    path: Path
    artifacts: dict[str, str] = field(default_factory=dict)

    @property
    def manifest(self) -> BuildManifest:
        return type("M", (), {"artifacts": self.artifacts})()  # type: ignore[return-value]


def built(tmp_path: Path, name: str, libllama: str) -> FakeBuilt:
    root = tmp_path / name
    root.mkdir()
    # the CTest file names the build's own directory: two builds of the same binaries differ only there
    (root / "CTestTestfile.cmake").write_text(f'add_test("t" "{root}/bin/test-llama-archs" "-s" "42")\n')
    return FakeBuilt(
        root, {"bin/libllama.so": libllama, "bin/test-llama-archs": "e" * 64, "manifest.toml": name}
    )


def session(tmp_path: Path, store: ResultStore | None) -> Session:
    return Session(None, Path("ctest"), None, None, lambda k: None, results=store)  # type: ignore[arg-type]


def test_a_passing_part_is_kept_and_taken_for_the_same_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[Path] = []

    def run(ctest: Path, build_dir: Path) -> testrun.TestRun:
        ran.append(build_dir)
        return testrun.TestRun(
            [check("test-llama-archs-layer-ranges")], {"test-llama-archs-layer-ranges": "|table|"}
        )

    monkeypatch.setattr(native, "run", run)
    store = ResultStore(tmp_path / "results", harness="h" * 64)
    s = session(tmp_path, store)
    one, two = built(tmp_path, "one", "a" * 64), built(tmp_path, "two", "a" * 64)
    first = native.kept_run(s, one)
    # another build of the same binaries (another inputs digest: a comment edited in a patch)
    second = native.kept_run(s, two)
    assert ran == [one.path]
    assert second.checks == first.checks and second.outputs == {"test-llama-archs-layer-ranges": "|table|"}
    assert list(store.used) == ["native"]
    # other binaries run; so does every part without the store (`dgr verify --rerun`)
    native.kept_run(s, built(tmp_path, "three", "b" * 64))
    native.kept_run(session(tmp_path, None), two)
    assert ran == [one.path, tmp_path / "three", two.path]


def test_a_result_is_kept_for_its_harness_only_and_only_when_it_passed(tmp_path: Path) -> None:
    calls: list[str] = []

    def run(outcome: bool) -> Any:
        def go() -> tuple[list[Check], dict[str, str]]:
            calls.append("run")
            return [check("t", outcome)], {}

        return go

    store = ResultStore(tmp_path / "results", harness="h" * 64)
    store.run("graph", {"part": "graph"}, run(False))
    store.run("graph", {"part": "graph"}, run(True))  # a failure is not kept: it runs again
    store.run("graph", {"part": "graph"}, run(True))  # taken
    assert calls == ["run", "run"]
    other = ResultStore(tmp_path / "results", harness="g" * 64)
    other.run("graph", {"part": "graph"}, run(True))
    assert calls == ["run", "run", "run"]
    # a group of checks counted apart alone is no pass: not kept
    apart = [Check(group="graph", name="x", evidence="native test", passed=False, not_compared=True)]
    store.put(store.key({"part": "apart"}), {"part": "apart"}, apart, {})
    assert store.get(store.key({"part": "apart"})) is None


def test_a_kept_result_that_does_not_read_is_run_again(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results", harness="h" * 64)
    key = store.key({"part": "graph"})
    store.put(key, {"part": "graph"}, [check("t")], {})
    (tmp_path / "results" / f"{key}.json").write_text('{"key": "x", "key": "y"}')
    assert store.get(key) is None
    assert not (tmp_path / "results" / f"{key}.json").exists()


def test_the_build_digest_leaves_out_the_builds_own_directory(tmp_path: Path) -> None:
    one, two = built(tmp_path, "one", "a" * 64), built(tmp_path, "two", "a" * 64)
    assert results.build_digest(one.path, one.artifacts) == results.build_digest(two.path, two.artifacts)
    (two.path / "CTestTestfile.cmake").write_text(
        f'add_test("t" "{two.path}/bin/test-llama-archs" "-s" "7")\n'
    )
    assert results.build_digest(one.path, one.artifacts) != results.build_digest(two.path, two.artifacts)


def test_the_report_names_the_parts_it_took_and_reads_back() -> None:
    report = Report(
        inputs_digest="d" * 64,
        baseline_digest=None,
        groups=("native",),
        checks=(check("t"),),
        reused={"native": "k" * 64},
    )
    assert Report.from_json(report.to_json()) == report
    assert (
        "reused"
        not in Report(
            inputs_digest="d" * 64, baseline_digest=None, groups=("native",), checks=(check("t"),)
        ).to_json()
    )
