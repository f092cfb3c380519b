"""`dgr bench --fuzz-only` (what .ci/run runs): the decoders' libFuzzer harness built against the pin's
vendor/ and run for a time limit, nothing else; a finding is exit 1 naming the file libFuzzer wrote. With a
fake clang++ on PATH whose "fuzzer" reports as libFuzzer does (the real one: .ci/run)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from dgr.cli import main
from dgr.verify.bench import fuzz

FUZZER = """
import sys
args = sys.argv[1:]
with open(sys.argv[0] + ".args", "w") as log:
    log.write("\\n".join(args))
prefix = next(a.split("=", 1)[1] for a in args if a.startswith("-artifact_prefix="))
if CRASH:
    open(prefix + "crash-0123abcd", "wb").write(b"LW")
    sys.stderr.write("==1==ERROR: AddressSanitizer: SEGV on unknown address\\n")
    sys.exit(1)
sys.stderr.write(f"stat::number_of_executed_units: {EXECUTIONS}\\nstat::average_exec_per_sec:     7535\\n")
"""


def fake_clang(where: Path, crash: bool, executions: int = 904242) -> None:
    """A clang++ whose output is a fuzzer reporting as libFuzzer does (a finding when `crash`), with
    `executions` run (CI's 120 s make about 900,000)."""
    where.mkdir()
    fuzzer = where / "fuzzer"
    fuzzer.write_text(f"#!{sys.executable}\nCRASH = {crash}\nEXECUTIONS = {executions}\n{FUZZER}")
    clang = where / "clang++"
    clang.write_text(f'#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\ncp {fuzzer} "$2"\n')
    for script in (fuzzer, clang):
        script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fuzzing(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("dgr.builds.build.run", lambda *a, **k: pytest.fail("--fuzz-only built"))
    return Path(os.environ["DGR_CACHE_DIR"]) / "fuzz"


def test_fuzz_only_runs_the_harness_for_the_time_given_and_nothing_else(
    fuzzing: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_clang(tmp_path / "bin", crash=False)
    assert main(["bench", "--fuzz-only", "--fuzz-seconds", "120", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["executions"] == 904242 and result["exec_per_s"] == 7535
    assert result["executions_required"] == fuzz.MIN_EXECUTIONS == 100_000
    assert result["crashes"] == 0 and result["seconds_requested"] == 120
    args = (fuzzing / "fuzz_decoders.args").read_text().split("\n")
    assert "-max_total_time=120" in args and not any(a.startswith("-runs=") for a in args)
    assert f"-artifact_prefix={fuzzing / 'findings'}/" in args
    assert not (fuzzing.parent / "bench").exists()


def test_a_finding_fails_naming_the_file(
    fuzzing: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_clang(tmp_path / "bin", crash=True)
    assert main(["bench", "--fuzz-only", "--fuzz-seconds", "5"]) == 1
    err = capsys.readouterr().err
    finding = fuzzing / "findings" / "crash-0123abcd"
    assert finding.read_bytes() == b"LW"
    assert f"dgr: bench: the fuzzer found a crash (libFuzzer exit 1): {finding}" in err
    assert "AddressSanitizer: SEGV" in err
    assert f"next: reproduce it with `{fuzzing / 'fuzz_decoders'} {finding}`" in err


def test_without_a_time_limit_the_runs_are_the_limit(fuzzing: Path, tmp_path: Path) -> None:
    fake_clang(tmp_path / "bin", crash=False)
    assert main(["bench", "--fuzz-only"]) == 0
    assert "-runs=1000000" in (fuzzing / "fuzz_decoders.args").read_text().split("\n")
    assert main(["bench", "--fuzz-only", "--fuzz-runs", "10", "--fuzz-seconds", "3"]) == 0
    args = (fuzzing / "fuzz_decoders.args").read_text().split("\n")
    assert "-runs=10" in args and "-max_total_time=3" in args


def test_a_run_of_too_few_executions_fails_naming_the_count_and_the_minimum(
    fuzzing: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # libFuzzer exits 0 having run nothing (a corpus it cannot read, a harness that returns at once)
    fake_clang(tmp_path / "bin", crash=False, executions=0)
    assert main(["bench", "--fuzz-only", "--fuzz-seconds", "120"]) == 1
    err = capsys.readouterr().err
    assert (
        "dgr: bench: the fuzzer ran 0 executions, fewer than the minimum of 100,000: too few to pass" in err
    )
    assert "actual:   0 in " in err and "libFuzzer exit 0" in err


def test_runs_asked_below_the_minimum_are_their_own_minimum(fuzzing: Path, tmp_path: Path) -> None:
    fake_clang(tmp_path / "bin", crash=False, executions=10_000)
    assert main(["bench", "--fuzz-only", "--fuzz-runs", "10000"]) == 0
    assert main(["bench", "--fuzz-only", "--fuzz-runs", "10001"]) == 1
    assert main(["bench", "--fuzz-only", "--fuzz-seconds", "60"]) == 1
    assert fuzz.required_executions(None) == fuzz.required_executions(10**9) == fuzz.MIN_EXECUTIONS
