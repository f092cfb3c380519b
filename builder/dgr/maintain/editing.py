"""`dgr edit` / `dgr export-patches`: the series as git commits and back, without churn.

The edit tree is a plain git repository with the upstream commit at
`refs/patches/upstream-head` (Electron's name) and one commit per patch on the
branch `patches`, made with the same `git am` and fixed committer as a build.
Export runs `git format-patch` with flags chosen so that an unchanged commit
gives back the same bytes:
  --zero-commit    no commit id in the `From` line (ids change on every rebase)
  --no-numbered    `[PATCH]`, not `[PATCH n/m]` (adding a patch renumbers none)
  --no-stat        no diffstat (it repeats the diff and churns with it)
  --no-signature   no `-- <git version>` trailer (differs between machines)
  --full-index     full blob ids, so `git am --3way` can find the preimage
and with the user's git configuration ignored (see gitops).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dgr.contracts.locks import PatchManifest
from dgr.core import log
from dgr.core.digest import sha256_bytes
from dgr.core.fs import write_all_atomic
from dgr.core.paths import Repo
from dgr.errors import ApplyError, UsageError
from dgr.git import apply, gitops
from dgr.maintain import rules
from dgr.series import generated, patchfile, patchmanifest
from dgr.series import order as series

BASE_REF = "refs/patches/upstream-head"
BRANCH = "patches"
FORMAT_PATCH_FLAGS = (
    "--stdout",
    "--zero-commit",
    "--no-numbered",
    "--no-stat",
    "--no-signature",
    "--full-index",
    "--encoding=UTF-8",
)


def format_patch(worktree: Path, commit: str) -> bytes:
    # git's own mail, byte for byte: gitpython has no format-patch of its own
    return gitops.git(["format-patch", "-1", *FORMAT_PATCH_FLAGS, commit], cwd=worktree).output


@dataclass(frozen=True)
class EditBase:
    """Where the edit tree starts: a verified (or staged) repository holding `commit`."""

    repo: Path
    commit: str
    pin_repo: Path
    """The repository of the locked pin, fetched too so that `git am --3way` finds preimages."""


def _require_reusable(edit_dir: Path, repo: Repo) -> None:
    """An existing edit tree may be reset only when nothing in it would be lost."""
    if not (edit_dir / ".git").exists():
        raise UsageError(
            f"{edit_dir} exists and is not a git work tree", hint="pass another --dir or remove the directory"
        )
    if gitops.am_in_progress(edit_dir):
        raise UsageError(
            f"{edit_dir} has a `git am` in progress",
            hint=f"finish it (`git -C {edit_dir} am --continue` or `--abort`), then export or retry",
        )
    if gitops.is_dirty(edit_dir):
        raise UsageError(
            f"{edit_dir} has uncommitted changes",
            hint="commit them and run `dgr export-patches`, or discard them, then retry",
        )
    if gitops.rev_parse(edit_dir, BASE_REF) is None:
        raise UsageError(f"{edit_dir} is not a dgr edit tree (no {BASE_REF})", hint="pass another --dir")
    pending = export(repo, edit_dir).changes()
    if pending:
        raise UsageError(
            f"{edit_dir} holds commits that differ from patches/ ({', '.join(pending)})",
            hint=f"keep them with `dgr export-patches --dir {edit_dir}`, or remove the directory to restart",
        )


def create(
    edit_dir: Path,
    base: EditBase,
    patches: list[apply.PatchRef],
    identity: gitops.Identity,
    repo: Repo,
    *,
    three_way: bool = False,
) -> str | None:
    """Create or reset the edit tree; returns None, or the name of the patch a 3-way `git am` stopped at."""
    if edit_dir.exists() and not edit_dir.is_dir():
        raise UsageError(f"the edit tree {edit_dir} is a file", hint="give --dir a directory (it is created)")
    if edit_dir.exists() and any(edit_dir.iterdir()):
        _require_reusable(edit_dir, repo)
    else:
        try:
            edit_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"the edit tree {edit_dir} cannot be created: {exc.strerror or exc}",
                hint="give --dir a directory you can write to",
            ) from exc
        gitops.init(edit_dir)
    gitops.git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", base.pin_repo, "refs/dgr/upstream:refs/patches/pin"],
        cwd=edit_dir,
    )
    gitops.git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", base.repo, f"{base.commit}:{BASE_REF}"], cwd=edit_dir
    )
    gitops.git(["checkout", "--quiet", "--force", "-B", BRANCH, BASE_REF], cwd=edit_dir)
    gitops.git(["clean", "-fdxq"], cwd=edit_dir)
    # onto another upstream, a generated patch is made again by its rule (a new model file gets it too)
    rules_of = generated.rules_of(repo) if three_way else {}
    for patch in patches:
        if patch.name in rules_of:
            if not rules.regenerate(repo, rules_of[patch.name], edit_dir, patch.path, identity)[0]:
                return patch.name
            continue
        args = ["am", "--quiet", "--3way" if three_way else "--no-3way", patch.path]
        result = gitops.git(args, cwd=edit_dir, env=identity.env(), check=False)
        if result.returncode == 0:
            continue
        if three_way:
            return patch.name
        gitops.git(["am", "--abort"], cwd=edit_dir, env=identity.env(), check=False)
        rejections = apply.diagnose(edit_dir, patch.path)
        raise ApplyError(
            f"patches/{patch.name} does not apply onto {base.commit[:12]}",
            detail="\n".join(r.describe() for r in rejections) or result.stderr.strip(),
            hint=apply.EDIT_HINT,
        )
    return None


# --------------------------------------------------------------------------- export


def _slug(subject: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return (words[:60].rstrip("-") or "patch") + ".patch"


@dataclass
class Export:
    """What `export-patches` would write: every file's new bytes, and what it removes."""

    repo: Repo
    patches: dict[str, bytes] = field(default_factory=dict)
    series_text: bytes = b""
    manifest_text: bytes = b""
    removed: list[str] = field(default_factory=list)

    def files(self) -> dict[Path, bytes]:
        written = {self.repo.patches_dir / name: data for name, data in self.patches.items()}
        written[self.repo.series_file] = self.series_text
        written[self.repo.manifest_file] = self.manifest_text
        return written

    def changes(self) -> list[str]:
        """Repository paths that would change (new, modified or removed)."""
        changed = [
            self.repo.rel(path)
            for path, data in self.files().items()
            if not path.is_file() or path.read_bytes() != data
        ]
        return changed + [f"patches/{name} (removed)" for name in self.removed]

    def write(self) -> None:
        """Write every changed file and delete the removed patches, all or nothing (dgr.core.fs)."""
        write_all_atomic(
            {
                path: data
                for path, data in self.files().items()
                if not path.is_file() or path.read_bytes() != data
            },
            removes=[self.repo.patches_dir / name for name in self.removed],
        )


def export(repo: Repo, edit_dir: Path) -> Export:
    """Format the commits `refs/patches/upstream-head..HEAD` of the edit tree as the series."""
    if gitops.rev_parse(edit_dir, BASE_REF) is None:
        raise UsageError(f"{edit_dir} has no {BASE_REF}: not a dgr edit tree", hint="run `dgr edit` first")
    history = list(gitops.commits(edit_dir, f"{BASE_REF}..HEAD"))
    merges = [c.hexsha for c in history if len(c.parents) > 1]
    if merges:
        raise UsageError(
            f"{edit_dir}: the series contains merge commits ({merges[0][:12]} ...)",
            hint="rebase them into a linear series (`git rebase`), then export again",
        )
    commits = [c.hexsha for c in history]
    old = series.load(repo.series_file)
    by_subject: dict[str, list[str]] = {}
    for name in old.names:
        path = repo.patches_dir / name
        try:
            by_subject.setdefault(patchfile.load(path).subject, []).append(name)
        except (OSError, patchfile.PatchParseError):
            continue
    result = Export(repo)
    exported = [format_patch(edit_dir, commit) for commit in commits]
    subjects = [patchfile.parse(data.decode(errors="surrogateescape")).subject for data in exported]
    for i, (data, subject) in enumerate(zip(exported, subjects, strict=True)):
        candidates = [n for n in by_subject.get(subject, []) if n not in result.patches]
        # a reworded commit keeps the name of the patch at its place, unless a commit has that patch's subject
        if not candidates and i < len(old.names) and old.names[i] not in result.patches:
            old_subjects = [s for s, names in by_subject.items() if old.names[i] in names]
            if not any(s in subjects for s in old_subjects):
                candidates = [old.names[i]]
        name = candidates[0] if candidates else _slug(subject)
        stem, n = name.removesuffix(".patch"), 2
        while name in result.patches:
            name, n = f"{stem}-{n}.patch", n + 1
        result.patches[name] = data
    names = list(result.patches)
    if names == old.names:
        result.series_text = repo.series_file.read_bytes()
    else:
        result.series_text = series.render(old.header, names).encode()
    result.removed = [name for name in old.names if name not in result.patches]
    digests = {name: sha256_bytes(data) for name, data in result.patches.items()}
    result.manifest_text = patchmanifest.serialize(PatchManifest(sha256_bytes(result.series_text), digests))
    if not commits:
        log.warn(f"{edit_dir} has no commits on top of {BASE_REF}: the series becomes empty")
    return result
