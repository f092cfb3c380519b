"""The README starts with the two commands; .ci/run runs the second (the test command) literally."""

from __future__ import annotations

import re

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
    install = "command -v clang++ >/dev/null || { apt-get update && apt-get install -y clang; }"
    assert install in lines
    fuzz = [line for line in lines if line.startswith(".venv/bin/dgr bench")]
    assert len(fuzz) == 1 and lines.index(install) < lines.index(fuzz[0])
    # after the tests (which install dgr), with dgr's own options, bounded by time: a finding fails the
    # script (set -e, exit 1), and the whole of CI stays well under 90 min beside pytest's ~47 min
    assert lines.index(fuzz[0]) > next(i for i, line in enumerate(lines) if "pytest" in line)
    args = build_parser().parse_args(fuzz[0].split()[1:])
    assert args.fuzz_only and args.fuzz_runs is None
    assert 60 <= args.fuzz_seconds <= 300
