"""The table of test-llama-archs --layer-ranges as checks of the archs group (dgr.verify.checks.archs)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from dgr.contracts.expectations import ArchsFloor, Expectations
from dgr.contracts.report import Check, Counts, Report
from dgr.errors import VerifyError
from dgr.verify.checks import archs, testrun
from dgr.verify.checks.session import Session

ESC = "\x1b"
FAIL = f"{ESC}[1;31mFAIL{ESC}[0m"
TABLE = """\
0.00.000.290 I main: using seed 42, stdev 0.100000
|     Model arch.|Config| Layers|Ranges      |Result
|           llama| Dense|      4|2,3,1+1,3seq,3seq-split|CERTIFIED bit-identical logits, KV cache by range
|           llama|   MoE|      4|2,3,1+1,3seq,3seq-split|CERTIFIED bit-identical logits, KV cache by range
|           rwkv7| Dense|      4|[0, 2)      |REFUSED not opted in, refused at load
|            gptj|     -|      -|-           |NO MODEL llama.cpp has no implementation of the architecture
Summary: 3 architectures, 2 certified, 1 refused, 1 without a model, 0 failed, 0 load checks failed
"""


def test_rows_are_parsed_with_status_ranges_and_reason() -> None:
    table = archs.parse(TABLE)
    assert [(r.name, r.status, r.n_layer) for r in table.rows] == [
        ("llama/dense", "certified", 4),
        ("llama/moe", "certified", 4),
        ("rwkv7/dense", "refused", 4),
        ("gptj", "no-model", None),
    ]
    assert table.rows[0].ranges == ("2", "3", "1+1", "3seq", "3seq-split")
    assert table.rows[2].detail == archs.REFUSAL
    assert table.n_archs == 3


def test_every_row_passes_and_the_table_covers_the_arch_list() -> None:
    checks = {c.name: c for c in archs.checks(TABLE, 0, floor=1)}
    listed = checks.pop("gptj")
    assert all(c.passed for c in checks.values()), [c.detail for c in checks.values() if not c.passed]
    summary = checks[archs.SUMMARY]
    assert summary.figures["certified"] == 1 and summary.figures["refused"] == 1
    assert summary.figures["no-model"] == 1 and summary.figures["architectures"] == 3
    assert summary.figures["certified_floor"] == 1
    assert checks["rwkv7/dense"].figures["reason"] == archs.REFUSAL
    # an architecture without a model compared nothing: listed with its reason, neither passed nor failed
    assert listed.not_compared and not listed.passed and not listed.failed and listed.outcome == "LISTED"
    assert listed.detail == "llama.cpp has no implementation of the architecture"
    assert Counts.of([*checks.values(), listed]).text() == "4 passed, 1 not compared (listed), 0 failed"


def test_a_no_model_row_without_a_reason_fails() -> None:
    bare = TABLE.replace("NO MODEL llama.cpp has no implementation of the architecture", "NO MODEL")
    gptj = {c.name: c for c in archs.checks(bare, 0, floor=1)}["gptj"]
    assert gptj.failed and not gptj.not_compared and "without a reason" in gptj.detail


def test_fewer_certified_architectures_than_the_series_declares_fail_the_table() -> None:
    summary = {c.name: c for c in archs.checks(TABLE, 0, floor=2)}[archs.SUMMARY]
    assert not summary.passed
    assert (
        "1 architectures are certified, fewer than the 2 that series/verify.toml declares" in summary.detail
    )
    # every architecture refused: nothing certified, the table fails
    refused = TABLE.replace(
        "|2,3,1+1,3seq,3seq-split|CERTIFIED bit-identical logits, KV cache by range",
        "|[0, 2)      |REFUSED not opted in, refused at load",
    )
    summary = {c.name: c for c in archs.checks(refused, 0, floor=1)}[archs.SUMMARY]
    assert summary.figures["certified"] == 0 and not summary.passed


def test_the_group_takes_the_floor_from_the_series(tmp_path: Path) -> None:
    native = testrun.TestRun(
        [Check(group="native", name=archs.TEST_NAME, evidence="native test", passed=True)],
        {archs.TEST_NAME: TABLE},
    )
    env = SimpleNamespace(device=None)
    built = SimpleNamespace(path=tmp_path)

    def session(floor: int) -> Session:
        expected = Expectations(archs=ArchsFloor(certified_at_least=floor))
        return Session(
            env, Path("ctest"), built, None, lambda k: None, native_ran=native, expected=lambda: expected
        )  # type: ignore[arg-type]

    assert {c.name: c for c in archs.GROUP.verify(session(1))}[archs.SUMMARY].passed
    summary = {c.name: c for c in archs.GROUP.verify(session(105))}[archs.SUMMARY]
    assert not summary.passed and "fewer than the 105" in summary.detail
    with pytest.raises(VerifyError, match=r"no series/verify\.toml"):
        archs.GROUP.verify(Session(env, Path("ctest"), built, None, lambda k: None, native_ran=native))  # type: ignore[arg-type]


def test_a_refusal_other_than_the_standard_one_fails() -> None:
    other = TABLE.replace("REFUSED not opted in, refused at load", "REFUSED failed to decode batch")
    checks = {c.name: c for c in archs.checks(other, 0, floor=1)}
    assert not checks["rwkv7/dense"].passed and "standard refusal" in checks["rwkv7/dense"].detail


def test_a_missing_architecture_fails_the_table() -> None:
    missing = TABLE.replace("Summary: 3 architectures", "Summary: 4 architectures")
    summary = {c.name: c for c in archs.checks(missing, 0, floor=1)}[archs.SUMMARY]
    assert not summary.passed and "3 architectures have a row, the arch list has 4" in summary.detail


def test_a_mismatch_fails_and_a_crash_is_named() -> None:
    crashed = TABLE.split("Summary:")[0] + "|          gemma3| Dense|      4|"
    mismatch = crashed.replace("CERTIFIED bit-identical logits", f"{FAIL} split 2: NMSE 1.0e-03", 1)
    checks = {c.name: c for c in archs.checks(mismatch, -6, floor=1)}
    assert not checks["llama/dense"].passed and "NMSE" in checks["llama/dense"].detail
    assert not checks["gemma3/dense"].passed and checks["gemma3/dense"].figures["status"] == "crashed"
    summary = checks[archs.SUMMARY]
    assert not summary.passed and "no summary line" in summary.detail and "exited with -6" in summary.detail


def test_no_table_is_a_failure() -> None:
    checks = archs.checks("encountered runtime error: failed to create llama model\n", 255, floor=1)
    assert [c.name for c in checks] == [archs.SUMMARY] and not checks[0].passed


# a test-llama-archs whose table stops at qwen3next's MoE on the device: it crashes there (as Mesa 22's
# lavapipe does), hangs (prints nothing), or is slow (alone it finishes); upstream's own test of the
# architecture (no --layer-ranges) exits with OWN_RC, or hangs, or does not know the device. The unpatched
# build's test (the judge) and the patched build's (never the judge) are two copies with opposite OWN_RC: the
# verdict says which one was asked.
FAKE_TEST = r"""
import sys, time
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(" ".join(args) + "\n")
row = "|%16s|%6s|%7s|%-12s|%s"
ok = "CERTIFIED logits within NMSE 1e-4"
if "--layer-ranges" not in args:
    if OWN_RC == "hang":
        time.sleep(60)
    if OWN_RC == "no-device":
        sys.stderr.write("main: unknown backend device: Vulkan0\n")
        sys.exit(1)
    sys.exit(OWN_RC)
only = args[args.index("-a") + 1] if "-a" in args else None
if only is None:
    print(row % ("llama", "Dense", 4, "2,3,1+1,3seq,3seq-split", ok))
if only in (None, "^qwen3next$"):
    print(row % ("qwen3next", "Dense", 4, "2,3,1+1,3seq,3seq-split", ok))
    print("|%16s|%6s|%7s|" % ("qwen3next", "MoE", 4), end="", flush=True)
    if MODE == "slow":
        time.sleep(2 if only else 60)
        print("2,3,1+1,3seq,3seq-split|" + ok)
        print("Summary: 1 architectures, 2 certified, 0 refused, 0 without a model, 0 failed, "
              "0 load checks failed")
        sys.exit(0)
    if MODE == "hang":
        time.sleep(60)
    sys.exit(139)
print(row % ("gemma3", "Dense", 4, "2,3,1+1,3seq,3seq-split", ok))
print("Summary: 1 architectures, 1 certified, 0 refused, 0 without a model, 0 failed, 0 load checks failed")
"""


def fake_test(where: Path, own_rc: int | str, mode: str = "crash") -> Path:
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "test-llama-archs"
    exe.write_text(f"#!{sys.executable}\nOWN_RC = {own_rc!r}\nMODE = {mode!r}\n{FAKE_TEST}")
    exe.chmod(0o755)
    return exe


def on_device(
    tmp_path: Path, upstream_rc: int | str, mode: str = "crash", floor: int = 1
) -> dict[str, Check]:
    """The archs group on the fake device: the patched build's test, judged by the unpatched build's, whose
    own test exits with `upstream_rc` (the patched build's own test would say the opposite)."""
    patched = fake_test(tmp_path / "patched", 0 if upstream_rc != 0 else 139, mode)
    baseline = fake_test(tmp_path / "baseline", upstream_rc)
    ran = archs._on_device(patched, "Vulkan0", tmp_path, lambda: baseline, floor=floor)
    return {c.name: c for c in ran}


def calls(tmp_path: Path, build: str = "patched") -> list[str]:
    path = tmp_path / build / "test-llama-archs.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_device_that_fails_upstreams_own_test_is_a_device_failure(tmp_path: Path) -> None:
    checks = on_device(tmp_path, 139)
    stopped = checks["qwen3next/moe"]
    others = [c for c in checks.values() if c is not stopped]
    assert all(c.passed for c in others), [c.detail for c in others if not c.passed]
    # the row never ran: not a pass, and not a failure of the check either, a count of its own
    assert not stopped.passed and stopped.device_failure and not stopped.failed
    assert stopped.figures["status"] == "device-failure"
    assert Counts.of(checks.values()) == Counts(passed=len(others), device_failures=1, failed=0)
    assert Counts.of(checks.values()).text() == f"{len(others)} passed, 1 device failure (driver), 0 failed"
    assert "upstream's own test of qwen3next" in stopped.detail
    reason = stopped.figures["reason"]
    own = "upstream's own test of qwen3next on Vulkan0, without a range (the unpatched build),"
    assert f"{own} exits with 139 too" in reason
    assert checks["qwen3next/dense"].figures["status"] == "certified"
    summary = checks[archs.SUMMARY].figures
    assert summary["architectures"] == 3 and summary["device_failure"] == {"qwen3next": reason}
    # upstream's test of the architecture alone, by the unpatched build; then the table again without the
    # architectures done, by the patched build, which never ran upstream's own test
    assert calls(tmp_path, "baseline") == ["-s 42 -b Vulkan0 -a ^qwen3next$"]
    assert calls(tmp_path)[1].endswith("-b Vulkan0 -a ^(?!(llama|qwen3next)$)")
    assert all("--layer-ranges" in c for c in calls(tmp_path))


def test_a_crash_that_upstreams_own_test_does_not_share_fails(tmp_path: Path) -> None:
    # the patched build's own test crashes there too (the series broke the architecture): it is no judge
    checks = on_device(tmp_path, 0)
    assert not checks["qwen3next/moe"].passed and checks["qwen3next/moe"].failed
    detail = checks["qwen3next/moe"].detail
    assert (
        "stopped here (exit 139), and upstream's own test of qwen3next on Vulkan0, without a range (the "
        "unpatched build), passes" in detail
    )
    assert checks[archs.SUMMARY].figures["failed"] == 1
    assert len(calls(tmp_path)) == 2 and len(calls(tmp_path, "baseline")) == 1  # a crash is not run alone


def test_an_unpatched_test_that_does_not_know_the_device_judges_nothing(tmp_path: Path) -> None:
    checks = on_device(tmp_path, "no-device")
    stopped = checks["qwen3next/moe"]
    assert stopped.failed and not stopped.device_failure
    assert "does not know the device (unknown backend device): it judges nothing" in stopped.detail


def test_the_unpatched_test_is_built_only_when_a_row_must_be_judged(tmp_path: Path) -> None:
    exe = fake_test(tmp_path / "patched", 0, "slow")
    table = exe.read_text().replace('if only in (None, "^qwen3next$"):', "if False:")
    exe.write_text(table)

    def never() -> Path:
        raise AssertionError("the unpatched build was asked for with nothing to judge")

    checks = archs._on_device(exe, "Vulkan0", tmp_path, never, floor=1)
    assert [c.name for c in checks] == ["llama/dense", "gemma3/dense", archs.SUMMARY]


def test_the_unpatched_test_is_the_baseline_work_builds(tmp_path: Path) -> None:
    built = tmp_path / "work" / "build"
    asked: list[tuple[bool, tuple[str, ...] | None]] = []

    def work_build(baseline: bool, only: tuple[str, ...] | None = None) -> Path:
        asked.append((baseline, only))
        return built

    session = Session(None, Path("ctest"), None, None, lambda k: None, work_build=work_build)  # type: ignore[arg-type]
    with pytest.raises(VerifyError, match="has no test-llama-archs"):
        archs.baseline_test(session)
    fake_test(built / "bin", 0)
    assert archs.baseline_test(session) == built / "bin" / "test-llama-archs"
    # the baseline builds the executable of upstream's test that runs it, not all of upstream's tests
    assert asked == [(True, ("test-generate-models",))] * 2
    with pytest.raises(VerifyError, match="no work build dirs"):
        archs.baseline_test(Session(None, Path("ctest"), None, None, lambda k: None))  # type: ignore[arg-type]


def test_a_hung_driver_is_stopped_and_its_row_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the table hangs at qwen3next's MoE (as Mesa 25's lavapipe does), and so does upstream's own test
    monkeypatch.setattr(archs, "IDLE_TIMEOUT", 3.0)
    checks = on_device(tmp_path, "hang", "hang")
    assert [c.name for c in checks.values() if not c.passed] == ["qwen3next/moe"]
    assert checks["qwen3next/moe"].device_failure
    # the rows printed before the hang are kept, the hung one is a device failure, the table goes on
    assert checks["qwen3next/dense"].figures["status"] == "certified"
    reason = checks["qwen3next/moe"].figures["reason"]
    assert "the test printed nothing for 3 s here; upstream's own test" in reason
    assert "prints nothing for 3 s too" in reason
    assert checks[archs.SUMMARY].figures["architectures"] == 3
    assert calls(tmp_path, "baseline") == ["-s 42 -b Vulkan0 -a ^qwen3next$"]
    assert len(calls(tmp_path)) == 2


def test_an_architecture_that_is_only_slow_finishes_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archs, "IDLE_TIMEOUT", 1.0)
    monkeypatch.setattr(archs, "ARCH_TIMEOUT", 10.0)
    checks = on_device(tmp_path, 0, "slow")
    assert all(c.passed for c in checks.values()), [c.detail for c in checks.values() if not c.passed]
    assert checks["qwen3next/moe"].figures["status"] == "certified"
    # the table, upstream's test (passes), the architecture alone (finishes), the rest of the table
    assert calls(tmp_path, "baseline") == ["-s 42 -b Vulkan0 -a ^qwen3next$"]
    assert calls(tmp_path)[1] == "--layer-ranges -s 42 -b Vulkan0 -a ^qwen3next$"
    assert len(calls(tmp_path)) == 3


def test_a_row_that_hangs_alone_too_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archs, "IDLE_TIMEOUT", 2.0)
    monkeypatch.setattr(archs, "ARCH_TIMEOUT", 2.0)
    checks = on_device(tmp_path, 0, "hang")
    detail = checks["qwen3next/moe"].detail
    assert not checks["qwen3next/moe"].passed
    assert "printed nothing for 2 s here, and alone it printed nothing for 2 s, and upstream's own" in detail


def test_a_table_of_device_failures_only_is_no_pass() -> None:
    # every row of the table a device failure: nothing passed, nothing certified
    rows = [
        archs.Row(arch=a, config="Dense", n_layer=4, ranges=(), status="device-failure", detail="crash")
        for a in ("llama", "gemma3")
    ]
    *ran, summary = archs.checks("", 0, archs.Table(rows=rows, n_archs=2), floor=1)
    assert [c.device_failure for c in ran] == [True, True] and not Counts.of(ran).ok
    # the check of the whole table fails on the floor, so the group cannot pass by it
    assert not summary.passed and "0 architectures are certified, fewer than the 1" in summary.detail
    # and the rows alone are no pass of the group
    report = Report(inputs_digest="d" * 64, baseline_digest=None, groups=("archs",), checks=tuple(ran))
    assert not report.passed
    assert "no check passed in the group(s) archs (0 passed, 2 device failures (driver), 0 failed)" in (
        report.problems("d" * 64, ("archs",))
    )


def test_a_certified_row_without_the_multi_sequence_cases_fails() -> None:
    output = TABLE.replace("|2,3,1+1,3seq,3seq-split|CERTIFIED", "|2,3,1+1|CERTIFIED", 1)
    checks = {c.name: c for c in archs.checks(output, 0, floor=1)}
    assert not checks["llama/dense"].passed
    assert "without the multi-sequence case(s) 3seq, 3seq-split" in checks["llama/dense"].detail
    assert checks["llama/moe"].passed


def test_split_equal_may_be_left_out_only_with_upstreams_reason() -> None:
    reason = "; split_equal not run: the graph of the whole model aborts with several KV streams"
    cut = TABLE.replace("|2,3,1+1,3seq,3seq-split|CERTIFIED", "|2,3,1+1,3seq|CERTIFIED", 1)
    assert not {c.name: c for c in archs.checks(cut, 0, floor=1)}["llama/dense"].passed
    lines = cut.splitlines()
    i = next(n for n, line in enumerate(lines) if "|2,3,1+1,3seq|CERTIFIED" in line)
    lines[i] += reason
    assert {c.name: c for c in archs.checks("\n".join(lines) + "\n", 0, floor=1)}["llama/dense"].passed
