"""The patches whose mechanical part is the output of a rewrite rule: `series/rules/rules.toml` names them and
their rule, `series/rules/rewrite.py` is the rule (a program of its own, for reviewers too).

`dgr check` runs the rule on the tree each such patch applies to and compares the result with the patch's
commit, on the rule's paths (src/models/): a patch kept by hand in that part, or a rule that no longer gives
the patch, is a finding naming the rule and the first file that differs.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dgr.core import proc
from dgr.core.paths import Repo
from dgr.errors import ConfigError
from dgr.git import gitops

RULES_DIR = Path("series") / "rules"
CONFIG = RULES_DIR / "rules.toml"
PROGRAM = RULES_DIR / "rewrite.py"
PATHS = "src/models"
"""What the rules edit: the graph files of the architectures."""

_REFUSED = 2
"""The program's exit code for a tree it refuses (1: the tree differs from its output, with --check)."""

REGENERATE_HINT = (
    "in `dgr edit`, check out the patch's parent, run `python3 series/rules/rewrite.py RULE <tree>`, amend "
    "the patch's commit with the result, then `dgr export-patches`"
)


@dataclass(frozen=True)
class Generated:
    patch: str
    rule: str


@dataclass(frozen=True)
class RuleFinding:
    patch: str
    problem: str


def load(repo: Repo) -> list[Generated]:
    """The generated patches of the series (none when the repository has no rules.toml)."""
    path = repo.root / CONFIG
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{CONFIG}: cannot be read: {exc}", hint="fix the file") from exc
    entries = data.get("generated", [])
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and set(e) == {"patch", "rule"} and all(isinstance(v, str) for v in e.values())
        for e in entries
    ):
        raise ConfigError(
            f"{CONFIG}: each [[generated]] table has exactly the strings `patch` and `rule`",
            hint='write [[generated]] patch = "<file in patches/>" rule = "<rule of rewrite.py>"',
        )
    return [Generated(e["patch"], e["rule"]) for e in entries]


def check_commit(repo: Repo, generated: Generated, parent: Path, commit: str) -> RuleFinding | None:
    """Run the rule on `parent` (a work tree of the commit the patch applies to) and compare the result with
    `commit`, the patch's commit; `parent` is left edited."""
    result = proc.run(
        [sys.executable, repo.root / PROGRAM, generated.rule, parent],
        check=False,
        what=f"the rule {generated.rule}",
    )
    if result.returncode == _REFUSED:
        refusals = [line for line in result.stderr.splitlines() if ": " in line]
        return RuleFinding(
            generated.patch, f"the rule {generated.rule} refuses the tree: " + "; ".join(refusals[:3])
        )
    if result.returncode != 0:
        return RuleFinding(generated.patch, f"the rule {generated.rule} failed: {result.stderr.strip()}")
    differing = gitops.git(["diff", "--name-only", commit, "--", PATHS], cwd=parent).stdout.split()
    if differing:
        return RuleFinding(
            generated.patch,
            f"{differing[0]} is not the output of the rule {generated.rule} "
            f"({len(differing)} file(s) of {PATHS}/ differ)",
        )
    return None


def missing(generated: list[Generated], patches: list[str]) -> list[RuleFinding]:
    """The generated patches that the series does not have."""
    return [
        RuleFinding(g.patch, f"{CONFIG} names it, the series does not")
        for g in generated
        if g.patch not in patches
    ]
