"""The repository layer, on gitpython: Repo objects for refs, commit and tree ids and file contents, and
gitpython's `git` command wrapper, always with one fixed environment, for what git itself must do.

User and system git configuration are ignored (GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM=1) so that
`git am` and `git format-patch` give the same bytes on every machine; messages are forced to English
(LC_ALL=C) for parsing; `git am` commits with a fixed committer and date (`Identity`).

What goes through the command wrapper, and why it cannot be done through gitpython's object API: the
mails (`format-patch`, `am`, `apply`: gitpython has no mail or patch machinery, and the bytes and commit
ids must be git's own), `fetch` from a path or an sdist's repository into a shallow bare repository,
`init` (so that no user `init.templateDir` applies), worktrees (`worktree add/remove/prune`, `checkout`,
`clean`, `reset`: gitpython has no worktree API), `diff --check` and `diff --stat` (git's own output is
what the package shows).
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import git as gitpython

from dgr.contracts.locks import Pin, ToolchainLock
from dgr.core import log, proc
from dgr.errors import DgrError, GitError

BASE_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "LANGUAGE": "C",
}


@dataclass(frozen=True)
class GitRun:
    """What a git command did: its exit status, its stdout as bytes (exactly) and as text, its stderr."""

    returncode: int
    output: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.output.decode(errors="replace")


def _command(cwd: Path | None, env: Mapping[str, str] | None) -> gitpython.Git:
    runner = gitpython.Git(cwd)
    runner.update_environment(**BASE_ENV, **(env or {}))
    return runner


def git(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    error: type[DgrError] = GitError,
    what: str | None = None,
    hint: str | None = None,
) -> GitRun:
    """`git ARGS` in `cwd` through gitpython's command wrapper, with the fixed environment (and `env`)."""
    cmd = ["git", *(str(a) for a in args)]
    if log.is_verbose():
        log.detail(f"$ {shlex.join(cmd)}")
    try:
        status, out, err = _command(cwd, env).execute(
            cmd,
            with_extended_output=True,
            with_exceptions=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except gitpython.GitCommandNotFound as exc:
        raise error(what or "cannot run git", actual=str(exc), hint=hint or "install git") from exc
    output = out if isinstance(out, bytes) else str(out).encode()
    if log.is_verbose():
        for stream in (output.decode(errors="replace"), err):
            if stream.strip():
                log.detail(stream.rstrip("\n").replace("\n", "\n    "))
    if status == -signal.SIGINT:
        raise KeyboardInterrupt
    if check and status != 0:
        raise error(
            what or f"command failed: {shlex.join(cmd)}",
            hint=hint,
            detail=proc.failure_detail(cmd, status, err + "\n" + output.decode(errors="replace")),
        )
    return GitRun(status, output, err)


def out(args: Sequence[str | Path], *, cwd: Path | None = None, check: bool = True) -> str:
    """stdout of a git command, stripped."""
    return git(args, cwd=cwd, check=check).stdout.strip()


def repo(path: Path) -> gitpython.Repo:
    """The repository (bare, or a work tree) at `path`; every command gitpython runs for it has the fixed
    environment."""
    found = gitpython.Repo(path)
    found.git.update_environment(**BASE_ENV)
    return found


def rev_parse(path: Path, rev: str) -> str | None:
    """The object id `rev` names in the repository at `path`, or None when it does not resolve."""
    try:
        return repo(path).rev_parse(rev).hexsha
    except (gitpython.BadName, gitpython.BadObject, ValueError, IndexError, gitpython.GitError):
        return None


def head(path: Path) -> tuple[str, str]:
    """(commit, tree) of HEAD of the work tree at `path`."""
    commit = repo(path).head.commit
    return commit.hexsha, commit.tree.hexsha


def commit_date(path: Path, commit: str) -> dt.datetime:
    """The committer date of `commit`, with its UTC offset."""
    return repo(path).commit(commit).committed_datetime


def commits(path: Path, revs: str) -> Iterator[gitpython.Commit]:
    """The commits of `revs` (`A..B`), oldest first."""
    return repo(path).iter_commits(revs, reverse=True)


def file_at(path: Path, commit: str, name: str) -> str:
    """The text of the file `name` at `commit`."""
    blob = repo(path).commit(commit).tree / name
    data: bytes = blob.data_stream.read()
    return data.decode(errors="surrogateescape")


def init_bare(path: Path) -> None:
    # `git init` through the wrapper (gitpython's Repo.init would run it with the user's configuration)
    git(["init", "--quiet", "--bare", path])
    with repo(path).config_writer() as config:
        config.set_value("gc", "auto", "0")


def init(path: Path) -> None:
    """A new work tree at `path` (created), with automatic gc off."""
    git(["init", "--quiet", path])
    with repo(path).config_writer() as config:
        config.set_value("gc", "auto", "0")


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
    return repo(worktree).is_dirty(untracked_files=True)


def git_dir(worktree: Path) -> Path | None:
    """The git directory of a work tree (its own, for a linked worktree); None when it is none."""
    try:
        return Path(repo(worktree).git_dir)
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        return None


def am_in_progress(worktree: Path) -> bool:
    found = git_dir(worktree)
    return found is not None and (found / "rebase-apply").exists()


def set_config(config_file: Path, values: Mapping[tuple[str, str], str | None]) -> None:
    """Set (or with None remove) `section.option` keys in a git config file, through gitpython."""
    with gitpython.GitConfigParser(config_file, read_only=False) as config:
        for (section, option), value in values.items():
            if value is None:
                if config.has_option(section, option):
                    config.remove_option(section, option)
            else:
                config.set_value(section, option, value)
