"""`dgr check` of the generated patches (dgr.series.generated): the rule of each, run on the tree the patch
applies to, must give the patch's commit on the rule's paths (src/models/); a patch kept by hand in that part,
or a rule that no longer gives the patch, is a finding naming the rule and the first file that differs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dgr.contracts import convert
from dgr.core import proc
from dgr.core.paths import Repo
from dgr.git import apply, gitops
from dgr.series.generated import PATHS, PROGRAM, Generated

_REFUSED = 2
"""The program's exit code for a tree it refuses (1: the tree differs from its output, with --check)."""

REGENERATE_HINT = (
    "in `dgr edit`, check out the patch's parent, run `python3 series/rules/rewrite.py RULE <tree>`, amend "
    "the patch's commit with the result, then `dgr export-patches`"
)


_SUMMARY = re.compile(
    r"^(?P<rule>[\w-]+): (?P<changed>\d+) (?:changed|to change), (?P<done>\d+) done, "
    r"(?P<no_loop>\d+) without a layer loop, (?P<skipped>\d+) not for this rule, (?P<refused>\d+) refused$",
    re.M,
)


@dataclass(frozen=True)
class RuleCounts(convert.Record):
    """What a rule did to a tree, from its summary line: files changed, already done, without a layer loop,
    not for the rule, and its refusals (`file:line: reason`)."""

    changed: int
    done: int
    no_loop: int = field(metadata=convert.keyed("without_layer_loop"))
    skipped: int = field(metadata=convert.keyed("not_for_rule"))
    refused: list[str] = field(default_factory=list, hash=False)

    def describe(self) -> str:
        return (
            f"{self.changed} changed, {self.no_loop} without a layer loop, {len(self.refused)} refused"
            + "".join(f"; {r}" for r in self.refused[:3])
        )


def _run(repo: Repo, rule: str, tree: Path) -> tuple[int, list[str], RuleCounts | None]:
    """Run the rule on `tree` in place: its exit code, what went wrong (its refusals, `file:line: ...`) and
    its counts (None when it printed no summary)."""
    result = proc.run([sys.executable, repo.root / PROGRAM, rule, tree], check=False, what=f"the rule {rule}")
    refusals = [line for line in result.stderr.splitlines() if line.startswith(f"{PATHS}/")]
    summary = _SUMMARY.search(result.stderr)
    counts = (
        RuleCounts(
            int(summary["changed"]),
            int(summary["done"]),
            int(summary["no_loop"]),
            int(summary["skipped"]),
            refusals,
        )
        if summary
        else None
    )
    if result.returncode == _REFUSED:
        return result.returncode, refusals, counts
    return result.returncode, [result.stderr.strip()] if result.returncode != 0 else [], counts


def check_commit(repo: Repo, generated: Generated, parent: Path, commit: str) -> str | None:
    """Run the rule on `parent` (a work tree of the commit the patch applies to) and compare the result with
    `commit`, the patch's commit; `parent` is left edited. The problem (None: the commit is the rule's
    output)."""
    code, problems, _ = _run(repo, generated.rule, parent)
    if code == _REFUSED:
        return f"the rule {generated.rule} refuses the tree: " + "; ".join(problems[:3])
    if code != 0:
        return f"the rule {generated.rule} failed: {'; '.join(problems)}"
    differing = gitops.git(["diff", "--name-only", commit, "--", PATHS], cwd=parent).stdout.split()
    if differing:
        return (
            f"{differing[0]} is not the output of the rule {generated.rule} "
            f"({len(differing)} file(s) of {PATHS}/ differ)"
        )
    return None


def regenerate(
    repo: Repo, rule: str, worktree: Path, patch: Path, identity: gitops.Identity
) -> tuple[bool, list[str], RuleCounts | None]:
    """Apply a generated patch on another upstream by regeneration: its hand-written part with
    `git am --3way` (the rule's paths left out), then the rule on the tree, amended into that commit, so that
    a model file new in that upstream gets the edit too. (done?, what stopped it: conflicting files or the
    rule's refusals by file and line), and the rule's counts when it ran; on failure the work tree is back
    where it was."""
    env = identity.env()
    am = gitops.git(
        ["am", "--quiet", "--3way", f"--exclude={PATHS}/*", str(patch)], cwd=worktree, env=env, check=False
    )
    if am.returncode != 0:
        gitops.git(["am", "--abort"], cwd=worktree, env=env, check=False)
        conflicts = apply.conflicted_files(am.stdout + am.stderr)
        found = conflicts or [r.describe() for r in apply.diagnose(worktree, patch, f"{PATHS}/*")]
        return False, found, None
    code, problems, counts = _run(repo, rule, worktree)
    if code != 0:
        gitops.git(["reset", "--quiet", "--hard", "HEAD~1"], cwd=worktree, env=env)
        return False, problems, counts
    gitops.git(["commit", "--quiet", "--amend", "--no-edit", "--all"], cwd=worktree, env=env)
    return True, [], counts
