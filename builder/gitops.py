"""Git helpers, all through proc.run with one controlled environment.

User and system git configuration are ignored (GIT_CONFIG_GLOBAL=/dev/null,
GIT_CONFIG_NOSYSTEM=1) so that `git am` and `git format-patch` give the same
bytes on every machine; messages are forced to English for parsing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dgr import proc
from dgr.errors import DgrError
from dgr.locks import Pin, ToolchainLock

BASE_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "LANGUAGE": "C",
}


def git(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    error: type[DgrError] = DgrError,
    what: str | None = None,
    hint: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return proc.run(
        ["git", *args],
        cwd=cwd,
        env={**BASE_ENV, **(env or {})},
        check=check,
        error=error,
        what=what,
        hint=hint,
    )


def out(args: Sequence[str | Path], *, cwd: Path | None = None, check: bool = True) -> str:
    """stdout of a git command, stripped."""
    return git(args, cwd=cwd, check=check).stdout.strip()


def rev_parse(repo: Path, rev: str) -> str | None:
    """The object id `rev` names in `repo`, or None when it does not resolve."""
    result = git(["rev-parse", "--verify", "--quiet", f"{rev}^{{object}}"], cwd=repo, check=False)
    return result.stdout.strip() or None if result.returncode == 0 else None


def init_bare(path: Path) -> None:
    git(["init", "--quiet", "--bare", path])
    git(["config", "gc.auto", "0"], cwd=path)


@dataclass(frozen=True)
class Identity:
    """The fixed committer used for `git am`, so patched commit ids are reproducible."""

    name: str
    email: str
    date: str

    @classmethod
    def from_locks(cls, toolchain: ToolchainLock, pin: Pin) -> Identity:
        return cls(toolchain.committer_name, toolchain.committer_email, pin.git_date)

    def env(self) -> dict[str, str]:
        return {
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
            "GIT_COMMITTER_DATE": self.date,
        }


def is_dirty(worktree: Path) -> bool:
    return bool(out(["status", "--porcelain", "--untracked-files=normal"], cwd=worktree))


def am_in_progress(worktree: Path) -> bool:
    git_dir = Path(out(["rev-parse", "--absolute-git-dir"], cwd=worktree))
    return (git_dir / "rebase-apply").exists()
