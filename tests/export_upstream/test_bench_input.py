"""`dgr export-upstream --bench FILE`: the bench.json given is read as `dgr status` reads the cached one
(dgr.export.measured): strict JSON, then a whole BenchResult; anything else is exit 8 naming the file and the
key, and no package is written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.export_upstream.support import bench_data, config, digest, export, write_package, write_report
from tests.test_strict_input import BENCH_REFUSALS, strict_problems


@pytest.fixture
def bench_file(repo: Path, tmp_path: Path) -> Path:
    """Where the test writes the bench.json it gives: the package configuration and a passing report are
    there, only the bench is left to read."""
    write_package(repo, config())
    write_report()
    return tmp_path / "bench.json"


def refused(bench: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """What `export-upstream --bench BENCH` says, refusing it: exit 8 naming the file, nothing written."""
    assert export(out, "--bench", str(bench)) == 8
    err = capsys.readouterr().err
    assert "Traceback" not in err and not out.exists()
    assert f"dgr: config: not a bench result of `dgr bench`: {bench}" in err
    return err


def test_a_bench_file_that_is_a_bench_result_is_rendered(bench_file: Path, tmp_path: Path) -> None:
    bench_file.write_text(json.dumps(bench_data(digest()), indent=2))
    assert export(tmp_path / "out", "--bench", str(bench_file)) == 0


@pytest.mark.parametrize(("what", "change", "problem"), BENCH_REFUSALS, ids=[r[0] for r in BENCH_REFUSALS])
def test_a_bench_file_that_is_no_bench_result_is_refused(
    bench_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    problem: str,
) -> None:
    bench_file.write_text(json.dumps(change(bench_data(digest())), indent=2))
    assert f"{bench_file}{problem}" in refused(bench_file, tmp_path / "out", capsys)


def test_a_bench_file_with_a_key_twice_nan_or_infinity_is_refused(
    bench_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(bench_data(digest()), indent=2)
    for what, broken, problem in strict_problems(text, "same_output", "decode_tps", "prefill_tps"):
        bench_file.write_text(broken)
        err = refused(bench_file, tmp_path / "out", capsys)
        assert f"{bench_file}.rpc.rows[0]" in err and problem in err, what
