"""`dgr check` of the generated patches (dgr.series.generated): the rule of each, run on the tree the patch
applies to, must give the patch's commit on the rule's paths (src/models/); a patch kept by hand in that part,
or a rule that no longer gives the patch, is a finding naming the rule and the first file that differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dgr.core import proc
from dgr.core.paths import Repo
from dgr.git import gitops
from dgr.series.generated import PATHS, PROGRAM, Generated, RuleFinding

_REFUSED = 2
"""The program's exit code for a tree it refuses (1: the tree differs from its output, with --check)."""

REGENERATE_HINT = (
    "in `dgr edit`, check out the patch's parent, run `python3 series/rules/rewrite.py RULE <tree>`, amend "
    "the patch's commit with the result, then `dgr export-patches`"
)


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
