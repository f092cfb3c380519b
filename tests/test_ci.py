"""The README starts with the two commands; .ci/run runs the second (the test command) literally."""

from __future__ import annotations

import re

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
