"""Apply the series with `git am` (one commit per patch, fixed committer) and explain failures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dgr.core import log
from dgr.core.paths import Repo
from dgr.errors import ApplyError
from dgr.git import gitops
from dgr.git.gitops import Identity
from dgr.series import patchfile, patchmanifest

EDIT_HINT = (
    "run `dgr edit`, repair the commit of this patch there (`git am --3way` / rebase), "
    "then `dgr export-patches`"
)

_CHECKING = re.compile(r"^Checking patch (.+)\.\.\.$")
_APPLYING = re.compile(r"^Applying patch (.+) with (\d+) reject")
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.$")
_FILE_ERROR = re.compile(
    r"^error: (.+?): (does not exist in index|No such file or directory|already exists in "
    r"(?:index|working directory)|does not match index|patch does not apply)$"
)
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): .*?(?:Merge conflict in|in) (\S+)")


@dataclass(frozen=True)
class PatchRef:
    name: str
    path: Path
    sha256: str


def verified_series(repo: Repo) -> list[PatchRef]:
    """The series in order, after checking it and every patch against locks/patches.toml."""
    verified = patchmanifest.verify(repo)
    return [PatchRef(name, repo.patches_dir / name, digest) for name, digest in verified.patches.items()]


@dataclass(frozen=True)
class Rejection:
    """Why one file of a patch did not apply: the hunks rejected, or a whole-file problem."""

    file: str
    hunks: tuple[tuple[int, str], ...]
    """(1-based hunk number, `@@ ... @@` header) of each rejected hunk."""
    problem: str

    def describe(self) -> str:
        if not self.hunks:
            return f"{self.file}: {self.problem}"
        return "\n".join(f"{self.file}: hunk #{n} {header} does not apply" for n, header in self.hunks)


@dataclass(frozen=True)
class Applied:
    commit: str
    tree: str
    commits: tuple[tuple[str, str], ...]
    """(patch name, commit id) in series order."""


@contextmanager
def temp_worktree(repo: Path, commit: str, where: Path) -> Iterator[Path]:
    """A detached `git worktree` of `repo` at `commit` under `where`, removed on exit."""
    worktree = where / "src"
    gitops.git(["worktree", "add", "--quiet", "--detach", worktree, commit], cwd=repo)
    try:
        yield worktree
    finally:
        gitops.git(["worktree", "remove", "--force", worktree], cwd=repo, check=False)
        gitops.git(["worktree", "prune"], cwd=repo, check=False)


def applies_in_reverse(worktree: Path, patch: Path) -> bool:
    """The change of `patch` is already in the work tree: `git apply --check --reverse` takes it."""
    return (
        gitops.git(["apply", "--check", "--reverse", str(patch)], cwd=worktree, check=False).returncode == 0
    )


def am(worktree: Path, patch: Path, identity: Identity, *, three_way: bool = False) -> tuple[bool, str]:
    """`git am` one patch: (applied?, git's output). On failure the am session is aborted."""
    args = ["am", "--3way" if three_way else "--no-3way", str(patch)]
    result = gitops.git(args, cwd=worktree, env=identity.env(), check=False)
    if result.returncode != 0:
        gitops.git(["am", "--abort"], cwd=worktree, env=identity.env(), check=False)
        return False, result.stdout + result.stderr
    return True, ""


def apply_series(repo: Path, base: str, patches: list[PatchRef], identity: Identity, where: Path) -> Applied:
    """Apply every patch on `base` in a fresh temporary worktree; ApplyError naming files and hunks."""
    if not patches:
        return Applied(base, gitops.repo(repo).commit(base).tree.hexsha, ())
    commits: list[tuple[str, str]] = []
    with (
        log.step(f"apply {len(patches)} patch(es) with git am onto {base[:12]}"),
        temp_worktree(repo, base, where) as worktree,
    ):
        for patch in patches:
            if not am(worktree, patch.path, identity)[0]:
                rejections = diagnose(worktree, patch.path)
                raise ApplyError(
                    f"patches/{patch.name} does not apply onto {base[:12]} (after {len(commits)} patch(es))",
                    detail="\n".join(r.describe() for r in rejections) or "git am failed (no detail)",
                    hint=EDIT_HINT,
                )
            commits.append((patch.name, gitops.head(worktree)[0]))
            log.detail(f"applied {patch.name} -> {commits[-1][1][:12]}")
        commit, tree = gitops.head(worktree)
    return Applied(commit, tree, tuple(commits))


def diagnose(worktree: Path, patch: Path, exclude: str | None = None) -> list[Rejection]:
    """Which files and hunks of `patch` (but those matching `exclude`) do not apply to the worktree's HEAD
    (worktree left clean)."""
    skip = [f"--exclude={exclude}"] if exclude else []
    result = gitops.git(["apply", "--reject", "--verbose", *skip, str(patch)], cwd=worktree, check=False)
    parsed = patchfile.load(patch)
    rejected: dict[str, list[int]] = {}
    problems: dict[str, str] = {}
    current = ""
    for line in (result.stderr + result.stdout).splitlines():
        if match := _CHECKING.match(line) or _APPLYING.match(line):
            current = match.group(1)
        elif (match := _REJECTED.match(line)) and current:
            rejected.setdefault(current, []).append(int(match.group(1)))
        elif match := _FILE_ERROR.match(line):
            problems.setdefault(match.group(1), match.group(2))
    gitops.git(["reset", "--quiet", "--hard", "HEAD"], cwd=worktree, check=False)
    gitops.git(["clean", "-fdxq"], cwd=worktree, check=False)
    rejections: list[Rejection] = []
    for file in dict.fromkeys([*problems, *rejected]):
        diff = parsed.file(file)
        headers = diff.hunks if diff else ()
        numbers = rejected.get(file, [])
        hunks = tuple((n, headers[n - 1] if 0 < n <= len(headers) else "") for n in numbers)
        problem = "hunks rejected" if numbers else problems.get(file, "does not apply")
        rejections.append(Rejection(file, hunks, problem))
    return rejections


def conflicted_files(text: str) -> list[str]:
    """The files a failed `git am --3way` reported as conflicts."""
    return list(dict.fromkeys(m.group(1) for line in text.splitlines() if (m := _CONFLICT.match(line))))
