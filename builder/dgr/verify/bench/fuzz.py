"""The worker's decoders (frames, fragments, bundles) under libFuzzer with ASan and UBSan: a number of
executions (`dgr bench --fuzz`) or a time limit (`dgr bench --fuzz-only --fuzz-seconds N`, what CI runs).

libFuzzer writes what it finds (`crash-<sha1>`, `timeout-…`, `leak-…`) into the cache's `fuzz/findings/`
and exits non-zero; the result records the exit code and the tail of its report, and the command fails. A
run that executed fewer inputs than `MIN_EXECUTIONS` (or than the `--fuzz-runs` asked for, when fewer) fails
too, whatever its exit code: a fuzzer that ran nothing found nothing."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dgr.core import proc
from dgr.core.paths import Context
from dgr.errors import BenchError, ConfigError
from dgr.verify.wire import bundle, frames

DEFAULT_RUNS = 1_000_000
MIN_EXECUTIONS = 100_000
"""The fewest executions that make a fuzz run: CI's 120 s run made 490,842 to 1,037,340 on 2 cores
(docs/records/ci-2026-12-05.md, ci-2026-12-06.md), a fifth of the fewest passes; a run of 0 executions does
not. A `--fuzz-runs` below it is its own minimum."""


def required_executions(runs: int | None) -> int:
    """The executions a run asked for `runs` (None: a time limit, or the default runs) must reach."""
    return MIN_EXECUTIONS if runs is None else min(runs, MIN_EXECUTIONS)


def compiler() -> str:
    """clang++ with libFuzzer; ConfigError (exit 8), saying what to install, when the machine has none."""
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if clang is None:
        raise ConfigError(
            "--fuzz needs clang++ with libFuzzer, and this machine has none",
            hint="install it (Debian: `apt-get update && apt-get install clang-14 libclang-rt-14-dev`), "
            "or run `dgr bench` without --fuzz",
        )
    return clang


def run(
    ctx: Context, vendor_dir: Path, runs: int | None, seconds: int | None = None
) -> dict[str, int | float | str | bool]:
    """Build the libFuzzer harness of the worker's decoders with clang (`vendor_dir`: upstream's `vendor/`,
    for nlohmann/json) and run it for `runs` executions or `seconds`, whichever ends first."""
    clang = compiler()
    work = ctx.cache.root / "fuzz"
    work.mkdir(parents=True, exist_ok=True)
    worker_dir = ctx.repo.worker_dir
    binary = work / "fuzz_decoders"
    proc.run(
        [
            clang,
            "-std=c++17",
            "-O1",
            "-g",
            "-fsanitize=fuzzer,address,undefined",
            "-fno-sanitize-recover=undefined",
            f"-I{worker_dir}",
            f"-I{vendor_dir}",
            worker_dir / "fuzz_decoders.cpp",
            worker_dir / "bundle.cpp",
            worker_dir / "frame.cpp",
            "-o",
            binary,
        ],
        error=BenchError,
        what="cannot build the fuzz harness",
    )
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    sample = bundle.encode(
        {"model": "0" * 16, "n_tokens": "2", "session": "s", "epoch": "1", "pos": "0"},
        {"residual": ("F32", np.ones((2, 4), np.float32))},
    )

    (corpus / "seed-bundle").write_bytes(sample)
    (corpus / "seed-frames").write_bytes(frames.encode_message({"id": 1, "op": "decode"}, sample, 64))
    findings = work / "findings"
    findings.mkdir(exist_ok=True)
    before = set(findings.iterdir())
    limits = ([f"-runs={runs}"] if runs is not None else []) + (
        [f"-max_total_time={seconds}"] if seconds is not None else []
    )
    start = time.monotonic()
    result = proc.run(
        [
            binary,
            *(limits or [f"-runs={DEFAULT_RUNS}"]),
            "-max_len=4096",
            "-timeout=10",
            "-print_final_stats=1",
            f"-artifact_prefix={findings}/",
            corpus,
        ],
        check=False,
        timeout=3600 if seconds is None else seconds + 600,
    )
    elapsed = time.monotonic() - start
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", result.stderr, re.M))
    crashed = result.returncode != 0
    return {
        "ran": True,
        **({"runs_requested": runs} if runs is not None else {}),
        **({"seconds_requested": seconds} if seconds is not None else {}),
        "executions": int(stats.get("number_of_executed_units", 0)),
        "executions_required": required_executions(runs),
        "seconds": round(elapsed, 1),
        "exec_per_s": int(stats.get("average_exec_per_sec", 0)),
        "crashes": int(crashed),
        "exit_code": result.returncode,
        "tail": result.stderr[-1500:] if crashed else "",
        "findings": ", ".join(str(p) for p in sorted(set(findings.iterdir()) - before)),
        "binary": str(binary),
    }


def judge(fuzzed: Mapping[str, Any] | None) -> None:
    """BenchError (exit 1) naming what libFuzzer found, when it found something, or the executions and the
    minimum, when it ran fewer than that (nothing to judge: None)."""
    if fuzzed is None:
        return
    if fuzzed.get("crashes", 0):
        found = str(fuzzed.get("findings", "")) or "(no file written)"
        raise BenchError(
            f"the fuzzer found a crash (libFuzzer exit {fuzzed.get('exit_code')}): {found}",
            detail=str(fuzzed.get("tail", "")),
            hint=f"reproduce it with `{fuzzed.get('binary')} {found.split(', ')[0]}`",
        )
    ran, required = int(fuzzed.get("executions", 0)), int(fuzzed.get("executions_required", MIN_EXECUTIONS))
    if ran < required:
        raise BenchError(
            f"the fuzzer ran {ran:,} executions, fewer than the minimum of {required:,}: too few to pass",
            expected=f"at least {required:,} executions (libFuzzer's stat::number_of_executed_units)",
            actual=f"{ran:,} in {fuzzed.get('seconds', 0)} s, libFuzzer exit {fuzzed.get('exit_code')}",
            hint="give it more time (--fuzz-seconds) or runs (--fuzz-runs), or see why the fuzzer stopped",
        )
