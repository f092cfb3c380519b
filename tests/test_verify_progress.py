"""`dgr verify`'s progress: a line per finished part with the check count and the time left, estimated from
the last stored report over the same groups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dgr.builds import reportstore
from dgr.contracts.report import Check, Report
from dgr.core import log
from dgr.core.paths import Cache
from dgr.verify.checks.progress import Progress, duration, last_report, remaining
from dgr.verify.checks.session import Session

DURATIONS = {"native": 40.0, "kv/fixtures": 5.0, "kv/smollm2": 60.0, "kv/gemma3": 35.0, "kv": 100.0}


def checks(group: str, n: int, failed: int = 0) -> list[Check]:
    return [
        Check(group=group, name=f"c{i}/m", evidence="synthetic fixture", passed=i >= failed)  # type: ignore[arg-type]
        for i in range(n)
    ]


def previous(groups: tuple[str, ...] = ("native", "kv"), digest: str = "d" * 64) -> Report:
    return Report(
        inputs_digest=digest,
        baseline_digest=None,
        groups=groups,  # type: ignore[arg-type]
        durations_s=DURATIONS,
        checks=tuple(checks("native", 4) + checks("kv", 16)),
    )


def test_duration() -> None:
    assert [duration(s) for s in (4.4, 59.6, 185, 3720)] == ["4 s", "1 min 0 s", "3 min 5 s", "1 h 2 min"]


def test_remaining_counts_the_parts_not_done_else_the_group() -> None:
    assert remaining(DURATIONS, ("native", "kv"), set()) == 140.0
    assert remaining(DURATIONS, ("native", "kv"), {"native", "kv/fixtures"}) == 95.0
    assert remaining(DURATIONS, ("native", "kv"), {"native", "kv/fixtures", "kv/smollm2", "kv/gemma3"}) == 0
    assert remaining(DURATIONS, ("native", "graph"), {"native"}) is None  # graph never ran


def test_lines_count_checks_and_estimate_what_is_left() -> None:
    p = Progress(("native", "kv"), previous())
    assert (
        p.line("native", checks("native", 4), 38.04)
        == "[4/20] PASS native (4 checks, 38.0 s), about 1 min 40 s left"
    )
    assert (
        p.line("kv/fixtures", checks("kv", 1), 5.0)
        == "[5/20] PASS kv/fixtures (1 check, 5.0 s), about 1 min 35 s left"
    )
    line = p.line("kv/smollm2", checks("kv", 8, failed=5), 3.2)
    assert line == (
        "[13/20] FAIL kv/smollm2 (5 of 8 checks failed: c0/m, c1/m, c2/m and 2 more, 3.2 s), about 35 s left"
    )
    assert p.line("kv/gemma3", checks("kv", 7), 30.0) == "[20/20] PASS kv/gemma3 (7 checks, 30.0 s)"


def test_without_a_previous_report_only_the_count() -> None:
    assert (
        Progress(("kv",)).line("kv/fixtures", checks("kv", 3), 1.0)
        == "[3] PASS kv/fixtures (3 checks, 1.0 s)"
    )


def test_last_report_is_the_newest_covering_the_groups() -> None:
    cache = Cache(Path(os.environ["DGR_CACHE_DIR"]))
    assert last_report(cache, ("native",)) is None
    for age, (groups, digest) in enumerate(
        [(("native", "kv"), "b"), (("native", "kv"), "a"), (("native",), "c")]
    ):
        path, _ = reportstore.write(cache, previous(groups, digest=digest * 64))
        os.utime(path, (3000 - age * 1000, 3000 - age * 1000))  # b newest of the full ones, then a
    os.utime(cache.root / reportstore.name("c" * 64, ("native",)), (4000, 4000))  # c newest of all
    (cache.root / "reports" / "broken.json").write_text("{")
    full = last_report(cache, ("native", "kv"))
    assert full is not None and full.inputs_digest == "b" * 64  # c does not cover kv
    native = last_report(cache, ("native",))
    assert native is not None and native.inputs_digest == "c" * 64


def test_session_reports_each_timed_part(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[str, int]] = []
    session = Session(
        None, Path("ctest"), None, None, lambda k: None, on_part=lambda p, c, s: seen.append((p, len(c)))
    )  # type: ignore[arg-type]
    session.timed("kv/fixtures", lambda: checks("kv", 2))
    assert seen == [("kv/fixtures", 2)]
    assert "kv/fixtures" in session.durations


def test_quiet_suppresses_the_lines(capsys: pytest.CaptureFixture[str]) -> None:
    p = Progress(("kv",))
    log.detail(p.line("kv/fixtures", checks("kv", 1), 1.0))
    assert "[1] PASS kv/fixtures" in capsys.readouterr().err
    log.set_quiet(True)
    log.detail(p.line("kv/smollm2", checks("kv", 1), 1.0))
    assert capsys.readouterr().err == ""
