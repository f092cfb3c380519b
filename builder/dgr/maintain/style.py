"""The style of the series as upstream checks it: `git diff --check` and `git clang-format` on the commit of
each patch, applied on the pin.

clang-format follows llama.cpp's own .clang-format. It judges the lines a patch adds: where it would also
rewrite lines of upstream's around them (an aligned block, say), the patch follows the style of the code it is
in, and where it only moves the value of upstream's `/*.field =*/ value` initializers (an idiom clang-format
does not keep), that is not counted either.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dgr.contracts import locks
from dgr.core import log, proc
from dgr.core.paths import Context, Repo
from dgr.errors import ConfigError
from dgr.git import apply, gitops
from dgr.git.rangediff import HUNK
from dgr.maintain import rules
from dgr.series import generated as generated_patches
from dgr.sources.upstream import obtain, select

_FILE = re.compile(r"^\+\+\+ b/(.+)$")
_FIELD_COMMENT = re.compile(r"=\*/\s*")
FIX_HINT = (
    "in `dgr edit`, run `git clang-format HEAD~1` (or fix the whitespace) on the patch's commit, amend "
    "it, then `dgr export-patches`"
)


@dataclass(frozen=True)
class StyleFinding:
    patch: str
    problem: str
    kind: Literal["style", "generated"] = "style"
    """generated: the patch's mechanical part is not its rule's output (dgr.maintain.rules)."""


def _added_lines(worktree: Path, parent: str, commit: str) -> dict[str, set[int]]:
    """The line numbers (in `commit`) of the lines that `commit` adds, by file."""
    out = gitops.git(["diff", "-U0", "--no-color", "--no-ext-diff", parent, commit], cwd=worktree).stdout
    added: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in out.splitlines():
        if m := _FILE.match(line):
            current = added.setdefault(m.group(1), set())
        elif (m := HUNK.match(line)) and current is not None:
            start, count = int(m.group(3)), int(m.group(4) or 1)
            current.update(range(start, start + count))
    return added


@dataclass(frozen=True)
class _Hunk:
    file: str
    first: int
    removed: tuple[str, ...]
    """Lines of the commit that clang-format would replace."""
    added: tuple[str, ...]


def _hunks(diff: str) -> Iterator[_Hunk]:
    file, first = "", 0
    removed: list[str] = []
    added: list[str] = []
    in_hunk = False

    def flush() -> Iterator[_Hunk]:
        if in_hunk and (removed or added):
            yield _Hunk(file, first, tuple(removed), tuple(added))

    for line in diff.splitlines():
        if line.startswith("diff --git"):
            yield from flush()
            in_hunk, removed, added = False, [], []
        elif m := _FILE.match(line):
            file = m.group(1)
        elif m := HUNK.match(line):
            yield from flush()
            in_hunk, first, removed, added = True, int(m.group(1)), [], []
        elif in_hunk and line.startswith("-"):
            removed.append(line[1:])
        elif in_hunk and line.startswith("+"):
            added.append(line[1:])
    yield from flush()


def _removed_line_numbers(diff: str) -> dict[tuple[str, int], list[int]]:
    """For each hunk (file, first line): the line numbers, in the commit, of the lines it replaces."""
    numbers: dict[tuple[str, int], list[int]] = {}
    file, key, line_no = "", ("", 0), 0
    for line in diff.splitlines():
        if m := _FILE.match(line):
            file = m.group(1)
        elif m := HUNK.match(line):
            key, line_no = (file, int(m.group(1))), int(m.group(1))
            numbers[key] = []
        elif key[0] and line.startswith("-") and not line.startswith("---"):
            numbers[key].append(line_no)
            line_no += 1
        elif key[0] and line.startswith(" "):
            line_no += 1
    return numbers


def _only_field_comments(hunk: _Hunk) -> bool:
    def norm(lines: tuple[str, ...]) -> list[str]:
        return [_FIELD_COMMENT.sub("=*/ ", line) for line in lines]

    return norm(hunk.removed) == norm(hunk.added)


def clang_format_findings(diff: str, added: dict[str, set[int]]) -> list[str]:
    """The hunks of `git clang-format --diff` that rewrite only lines the patch added (see the module)."""
    numbers = _removed_line_numbers(diff)
    problems = []
    for hunk in _hunks(diff):
        lines = numbers.get((hunk.file, hunk.first), [])
        ours = added.get(hunk.file, set())
        if not lines or any(n not in ours for n in lines) or _only_field_comments(hunk):
            continue
        before = "\n".join(f"    - {line}" for line in hunk.removed)
        after = "\n".join(f"    + {line}" for line in hunk.added)
        problems.append(f"{hunk.file}:{hunk.first}: clang-format would write it as\n{before}\n{after}")
    return problems


def _tool(name: str) -> Path:
    """clang-format and git-clang-format come with the environment dgr runs in (the `clang-format` wheel)."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise ConfigError(
            f"{name} is not installed next to {sys.executable}",
            hint="install dgr with its dependencies (`pip install -e .`): the clang-format wheel has it",
        )
    return path


def check(ctx: Context, repo: Repo, mirror: Path | None = None) -> list[StyleFinding]:
    """Apply the series on the pin and check the commit of each patch; the generated patches also against
    their rule's output."""
    refs = apply.verified_series(repo)
    if not refs:
        return []
    generated = {
        name: generated_patches.Generated(name, rule)
        for name, rule in generated_patches.rules_of(repo).items()
    }
    upstream_lock = locks.load_upstream(ctx.repo.locks_dir)
    spec = None
    if repo.port is not None:
        spec = next((s for s, t in upstream_lock.rebase_targets.items() if t.port == repo.port), None)
        if spec is None:
            return []  # a port that no rebase target names has no upstream to be checked on
    pin, sources = select(upstream_lock, spec)
    upstream = obtain(ctx.cache, pin, sources, mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(repo.locks_dir), pin)
    clang_format, git_clang_format = _tool("clang-format"), _tool("git-clang-format")
    findings: list[StyleFinding] = []
    with ctx.cache.tmpdir("style") as tmp:
        applied = apply.apply_series(upstream.repo, pin.commit, refs, identity, tmp)
        with (
            log.step(f"git diff --check and git clang-format on {len(refs)} patch(es)"),
            apply.temp_worktree(upstream.repo, applied.commit, tmp / "check") as worktree,
        ):
            parent = pin.commit
            for name, commit in applied.commits:
                ws = gitops.git(["diff", "--check", parent, commit], cwd=worktree, check=False)
                if ws.returncode != 0:
                    findings.append(StyleFinding(name, "git diff --check:\n" + ws.stdout.strip()))
                # the script of the clang-format package runs git itself: the same fixed environment
                formatted = proc.run(
                    [git_clang_format, "--binary", clang_format, "--diff", parent, commit],
                    cwd=worktree,
                    env=gitops.BASE_ENV,
                    check=False,
                    what="git clang-format",
                )
                for problem in clang_format_findings(
                    formatted.stdout, _added_lines(worktree, parent, commit)
                ):
                    findings.append(StyleFinding(name, problem))
                if name in generated:
                    with apply.temp_worktree(upstream.repo, parent, tmp / f"rule-{name}") as before:
                        rule_problem = rules.check_commit(repo, generated.pop(name), before, commit)
                    if rule_problem is not None:
                        findings.append(StyleFinding(name, rule_problem, "generated"))
                parent = commit
    series = [ref.name for ref in refs]
    findings += [
        StyleFinding(g.patch, generated_patches.MISSING, "generated")
        for g in generated_patches.missing(list(generated.values()), series)
    ]
    return findings
