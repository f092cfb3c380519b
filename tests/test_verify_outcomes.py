"""What counts as a pass of `dgr verify`: a part, a group or a report with no check is not one, and a device
failure (the driver, not the check) is a count of its own, never part of the passed checks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from dgr.contracts.report import Check, Counts, Report
from dgr.errors import ConfigError
from dgr.verify.checks import native, session
from dgr.verify.checks.progress import Progress
from dgr.verify.checks.report import junit_xml, nonempty, table
from dgr.verify.models.env import Env, RealModel
from dgr.verify.models.inventory import Inventory


def check(name: str, passed: bool = True, device_failure: bool = False) -> Check:
    return Check(
        group="archs",
        name=name,
        evidence="synthetic fixture",
        passed=passed,
        device_failure=device_failure,
        detail="" if passed else "lavapipe crashed here, and in upstream's own test too",
    )


MIXED = [check("llama/dense"), check("qwen3next/moe", passed=False, device_failure=True), check("gemma3")]


def report(checks: list[Check]) -> Report:
    return Report(inputs_digest="d" * 64, baseline_digest=None, groups=("archs",), checks=tuple(checks))


def test_a_device_failure_is_counted_apart_from_passed_and_failed() -> None:
    counts = Counts.of(MIXED)
    assert counts == Counts(passed=2, device_failures=1, failed=0)
    assert counts.text() == "2 passed, 1 device failure (driver), 0 failed"
    assert table(MIXED).splitlines()[-1] == "2 passed, 1 device failure (driver), 0 failed"
    assert "DEVICE FAILURE  archs/qwen3next/moe" in table(MIXED)
    # the run is not failed by the driver, but nothing counts it as passed
    assert report(MIXED).passed
    assert not MIXED[1].passed


def test_a_device_failure_cannot_be_a_pass() -> None:
    with pytest.raises(ConfigError, match="not a passed check"):
        check("x", passed=True, device_failure=True)


def test_a_device_failure_is_a_junit_error_not_a_success() -> None:
    suite = ET.fromstring(junit_xml(MIXED))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "1")
    case = next(c for c in suite.iter("testcase") if c.get("name") == "qwen3next/moe")
    error = case.find("error")
    assert error is not None and error.get("type") == "device-failure"


def test_the_report_keeps_a_device_failure_and_refuses_format_1() -> None:
    data = report(MIXED).to_json()
    back = Report.from_json(data)
    assert [c.device_failure for c in back.checks] == [False, True, False]
    assert back.counts == Counts(passed=2, device_failures=1, failed=0)
    with pytest.raises(ConfigError, match="format 1"):
        Report.from_json(data | {"format": 1})


def test_no_check_is_not_a_pass() -> None:
    empty = report([])
    assert not empty.passed
    assert "it holds no check" in empty.problems("d" * 64, ("archs",))
    assert table([]).splitlines()[-1] == "no checks: nothing was verified"
    assert Progress(("kv",)).line("kv/fixtures", [], 0.0) == (
        "[0] FAIL kv/fixtures (no checks: nothing was verified, 0.0 s)"
    )
    [made] = nonempty("kv", "fixtures", "synthetic fixture", [])
    assert made.failed and "ran no check" in made.detail


def test_progress_counts_device_failures_apart() -> None:
    assert Progress(("archs",)).line("archs", MIXED, 1.0) == (
        "[3] DEVICE FAILURE archs (2 passed, 1 device failure (driver), 0 failed, 1.0 s)"
    )
    failed = [*MIXED, check("bitnet", passed=False)]
    assert Progress(("archs",)).line("archs", failed, 1.0) == (
        "[4] FAIL archs (2 passed, 1 device failure (driver), 1 failed: bitnet, 1.0 s)"
    )


def test_device_failures_alone_are_no_pass() -> None:
    alone = [c for c in MIXED if c.device_failure]
    assert not report(alone).passed
    assert report(alone).problems("d" * 64, ("archs",)) == [
        "no check passed in the group(s) archs (0 passed, 1 device failure (driver), 0 failed)"
    ]
    assert Progress(("archs",)).line("archs", alone, 1.0) == (
        "[1] FAIL archs (0 passed, 1 device failure (driver), 0 failed, 1.0 s)"
    )
    assert "no check passed in the group(s) archs: not a pass" in table(alone)
    assert "no check passed" not in table(MIXED)


LISTED = Check(
    group="graph",
    name="gptj/dense",
    evidence="synthetic fixture",
    passed=False,
    not_compared=True,
    detail="built in neither tree, with the same error: unknown model architecture: 'gptj'",
)


def test_a_check_that_compared_nothing_is_listed_in_the_table_and_skipped_in_junit() -> None:
    checks = [*MIXED, LISTED]
    shown = table(checks)
    assert "LISTED          graph/gptj/dense" in shown
    assert "\nLISTED graph/gptj/dense:\n  built in neither tree" in shown
    assert shown.splitlines()[-1] == "2 passed, 1 device failure (driver), 1 not compared (listed), 0 failed"
    suite = ET.fromstring(junit_xml(checks))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "4",
        "0",
        "1",
        "1",
    )
    case = next(c for c in suite.iter("testcase") if c.get("name") == "gptj/dense")
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("type") == "not-compared"
    assert (skipped.get("message") or "").startswith("built in neither tree")
    # a run of listed checks alone compared nothing: it is no pass
    assert Progress(("graph",)).line("graph", [LISTED], 1.0) == (
        "[1] FAIL graph (0 passed, 1 not compared (listed), 0 failed, 1.0 s)"
    )


def test_a_conformance_part_with_no_check_fails(tmp_path: Path) -> None:
    worker = tmp_path / "layer-worker"
    worker.write_text("")
    inv = Inventory(tmp_path / "m.gguf", "llama", 2, 8, {"blk.0.attn_q.weight": 64})
    env = Env(worker=worker, models=(RealModel("m", inv.path, inv),), fixtures=tmp_path)
    spec = session.conformance("kv", lambda env: [], lambda env, m: [])
    ran = spec.verify(
        session.Session(env, tmp_path / "ctest", None, None, lambda k: None)  # type: ignore[arg-type]
    )
    assert [(c.id, c.passed) for c in ran] == [("kv/fixtures", False), ("kv/m", False)]


def test_a_check_a_native_test_skipped_is_listed_not_passed() -> None:
    from dgr.verify.checks import native, series
    from dgr.verify.checks.native import CaseResult
    from dgr.verify.checks.testrun import TestRun

    case = CaseResult(
        "test-llama-archs-layer-ranges",
        True,
        "run",
        1.0,
        "|llama|Dense|\n"
        "test_layer_range_files: SKIPPED: mlock of [0, 1) not checked: RLIMIT_MEMLOCK is low\n",
    )
    (skip,) = native.skipped(case)
    assert (skip.name, skip.outcome, skip.detail) == (
        "test-llama-archs-layer-ranges/skipped-1",
        "LISTED",
        "skipped: mlock of [0, 1) not checked: RLIMIT_MEMLOCK is low",
    )
    assert native.skipped(CaseResult("t", True, "run", 1.0, "no SKIPPED: here\n")) == []
    # a prefix whose test passed with a check skipped passes, and names the skip
    passed = Check(group="native", name=case.name, evidence="native test", passed=True)
    check = series.prefix_check(4, ["a.patch"], "d" * 64, TestRun([passed, skip]), (case.name,))
    assert check.passed and check.figures["skipped"] == [skip.detail]
    assert Counts.of([passed, skip]) == Counts(passed=1, device_failures=0, failed=0, not_compared=1)


EXAMPLE_OK = "\n".join(
    f"main: step {i}: {4 if i == 0 else 1} token(s) in, max |logit difference| 0, "
    f"next token {i} 'x' (split: {i})"
    for i in range(9)
)


def test_the_example_passes_only_when_every_step_is_the_whole_models() -> None:
    assert native.example_check("m", 0, EXAMPLE_OK, 30).passed
    # a step whose logits differ, a step whose next token differs, a step missing, a failing exit
    differs = EXAMPLE_OK.replace(
        "step 3: 1 token(s) in, max |logit difference| 0,",
        "step 3: 1 token(s) in, max |logit difference| 0.25,",
    )
    token = EXAMPLE_OK.replace("next token 5 'x' (split: 5)", "next token 5 'x' (split: 6)")
    short = "\n".join(EXAMPLE_OK.splitlines()[:-1])
    for output, code, why in (
        (differs, 0, "at step(s) [3]"),
        (token, 0, "at step(s) [5]"),
        (short, 0, "not 0 to 8"),
        (EXAMPLE_OK, 1, "exited 1"),
        ("", 0, "printed steps []"),
    ):
        check = native.example_check("m", code, output, 30)
        assert not check.passed and why in check.detail, (why, check.detail)
