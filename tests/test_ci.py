"""The README starts with the two commands; .ci/run runs the second (the test command) literally."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dgr.cli import build_parser

from tests.helpers import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```sh\n(.+?)\n```", text, flags=re.M)[:2]


def test_readme_starts_with_build_and_test_commands() -> None:
    build, test = readme_commands()
    assert "dgr build" in build
    assert "pytest" in test


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script
    assert readme_commands()[1] in script.splitlines()


def test_ci_fuzzes_the_decoders_for_a_bounded_time_and_installs_clang_only_when_missing() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    install = "if ! command -v clang++ >/dev/null; then"
    assert lines[lines.index(install) : lines.index(install) + 4] == [
        install,
        "    apt-get update",
        "    apt-get install -y clang",
        "fi",
    ]
    fuzz = [line for line in lines if line.startswith(".venv/bin/dgr bench")]
    assert len(fuzz) == 1 and lines.index(install) < lines.index(fuzz[0])
    # after the tests (which install dgr), with dgr's own options, bounded by time: a finding fails the
    # script (set -e, exit 1), and the whole of CI stays well under 90 min beside pytest's ~47 min
    assert lines.index(fuzz[0]) > next(i for i, line in enumerate(lines) if "pytest" in line)
    args = build_parser().parse_args(fuzz[0].split()[1:])
    assert args.fuzz_only and args.fuzz_runs is None
    assert 60 <= args.fuzz_seconds <= 300


# Every command .ci/run runs, in its order, as the stubs below log them (program name, then its arguments),
# on a machine without clang++: `apt-get` installs it.
CI_STEPS = [
    "python3 -m venv .venv",
    "pip install -e .[test]",
    "python -m pytest",
    "ruff check .",
    "ruff format --check .",
    "typecheck",
    "dgr rebase-check --matrix",
    "apt-get update",
    "apt-get install -y clang",
    "dgr bench --fuzz-only --fuzz-seconds 120",
]


def run_ci_copy(tmp_path: Path, fail: str | None, clang: bool = False) -> tuple[int, list[str]]:
    """Runs the real .ci/run, copied into a repository of stubs: every program it calls logs its command line
    and exits 0, except the one whose logged line is `fail` (exit 7). PATH holds only the stubs and the
    few real tools the script itself uses, so no real pip, ruff or apt-get can run."""
    repo, bin_dir, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "log"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    stubs = {repo / ".ci" / "typecheck": "typecheck"}
    stubs |= {bin_dir / name: name for name in ("python3", "apt-get")}
    stubs |= {repo / ".venv" / "bin" / name: name for name in ("pip", "python", "ruff", "dgr")}
    if clang:
        stubs[bin_dir / "clang++"] = "clang++"
    for path, name in stubs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f'#!/bin/sh\nline="{name} $*"\nline="${{line% }}"\necho "$line" >> "$CI_LOG"\n'
            '[ "$CI_FAIL" = "$line" ] && exit 7\nexit 0\n'
        )
        path.chmod(0o755)
    for tool in ("mktemp", "rm", "dirname"):
        real = shutil.which(tool)
        assert real is not None
        (bin_dir / tool).symlink_to(real)
    env = {"PATH": str(bin_dir), "CI_LOG": str(log), "CI_FAIL": fail or "", "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, str(repo / ".ci" / "run")], env=env, capture_output=True, text=True)
    return done.returncode, log.read_text().splitlines() if log.exists() else []


def test_ci_runs_every_step_in_order_and_exits_0_when_all_pass(tmp_path: Path) -> None:
    assert run_ci_copy(tmp_path, fail=None) == (0, CI_STEPS)


def test_ci_does_not_install_clang_when_it_is_there(tmp_path: Path) -> None:
    assert run_ci_copy(tmp_path, fail=None, clang=True) == (0, [s for s in CI_STEPS if "apt-get" not in s])


@pytest.mark.parametrize("step", CI_STEPS)
def test_ci_stops_with_a_failure_at_the_step_that_fails(tmp_path: Path, step: str) -> None:
    # the README's `venv && pip && pytest` line and `ruff check` included: nothing after the failing step runs
    code, ran = run_ci_copy(tmp_path, fail=step)
    assert code == 7
    assert ran == CI_STEPS[: CI_STEPS.index(step) + 1]


def test_a_workflow_runs_ci_on_every_push_and_pull_request() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    # YAML 1.1 (PyYAML) reads the bare key `on` as true
    assert set(workflow[True]) == {"push", "pull_request"}
    # no branch or path filter
    assert all(workflow[True][event] is None for event in ("push", "pull_request"))
    (job,) = workflow["jobs"].values()
    assert job["steps"][-1]["run"] == ".ci/run"
