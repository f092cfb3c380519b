"""The branches of the upstream package: one per pull request, each a git bundle.

The series is applied on the pin as `dgr build` applies it (`apply.apply_series`); its commits are written
out with `git format-patch`, cut to their subject lines (`subject_only`: the submitter writes the bodies), and
applied again with
`git am` in a scratch repository that borrows the upstream's objects, so the branch commits are git's own and
the upstream repository of the cache gets no refs. Pull request k takes its patches on top of pull request
k - 1 (stacked); its bundle holds the commits from the pin to its head. Each bundle is then fetched into a
fresh repository that has the pin: it must need exactly the pin, and give the tree of the series after the
last patch of its pull request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dgr.errors import ApplyError
from dgr.export import upstream_package
from dgr.git import apply, gitops
from dgr.series import patchfile


@dataclass(frozen=True)
class AppliedSeries:
    """The series applied on the pin: each patch's text, parsed mail and commit, in series order."""

    git_dir: Path
    base: str
    head: str
    tree: str
    texts: dict[str, str]
    patches: dict[str, patchfile.Patch]
    commits: dict[str, str]

    def tree_after(self, patch: str) -> str:
        """The tree of the series once `patch` (and every patch before it) is applied."""
        return gitops.repo(self.git_dir).commit(self.commits[patch]).tree.hexsha


@dataclass(frozen=True)
class FileStat:
    path: str
    """The post-image path (the pre-image one for a deleted file)."""
    added: int
    deleted: int

    @property
    def lines(self) -> int:
        return self.added + self.deleted


@dataclass(frozen=True)
class Stat:
    files: int
    added: int
    deleted: int
    by_file: tuple[FileStat, ...] = ()
    """`git diff --numstat` per file, in git's order."""

    @property
    def lines(self) -> int:
        return self.added + self.deleted


@dataclass(frozen=True)
class Branch:
    """The branch of one pull request: its commits (one per patch, trailers removed) and its bundle."""

    pull: upstream_package.Pull
    base: str
    """The pin: the one commit the bundle needs."""
    parent: str
    """Where the pull request's own commits start: the pin, or the head of the previous pull request."""
    head: str
    tree: str
    commits: tuple[tuple[str, str], ...]
    """(patch name, commit id) of the pull request's own commits."""
    bundle: bytes
    stat: Stat
    """Of the pull request's own commits."""
    commit_stats: tuple[Stat, ...]

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.pull.branch}"


def drop_trailers(mail: str, keys: tuple[str, ...]) -> str:
    """Remove the trailers named `keys` (ours, e.g. Upstream-Status) from the message of a mail."""
    if not keys:
        return mail
    head, sep, rest = mail.partition("\n---\n")
    wanted = {k.lower() for k in keys}
    lines = [
        line for line in head.split("\n") if line.split(":", 1)[0].lower() not in wanted or ":" not in line
    ]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + sep + rest


def subject_only(mail: str) -> str:
    """The mail with its message cut to the subject line: upstream's AGENTS.md asks that the human who sends
    the code writes the body of each commit ("BEST: Let the user write the commit"), so the branches carry
    upstream's `<module> : <title>` subject and nothing of ours below it."""
    head, sep, rest = mail.partition("\n---\n")
    headers = head.split("\n\n", 1)[0]
    return headers + "\n" + sep + rest


def scratch_repository(path: Path, borrow: Path) -> Path:
    """A bare repository at `path` borrowing the objects (and shallow boundary) of `borrow`."""
    gitops.init_bare(path)
    (path / "objects" / "info" / "alternates").write_text(f"{(borrow / 'objects').resolve()}\n")
    if (borrow / "shallow").is_file():
        (path / "shallow").write_text((borrow / "shallow").read_text())
    return path


def _mails(
    series: AppliedSeries, names: list[str], where: Path, drop: tuple[str, ...]
) -> list[apply.PatchRef]:
    """`git format-patch` of the series' commits, each with its subject line only (no body, none of our
    trailers), in series order."""
    where.mkdir(parents=True)
    gitops.git(
        [
            "format-patch",
            "--quiet",
            "--zero-commit",
            "--no-numbered",
            "--no-signature",
            "--full-index",
            "--encoding=UTF-8",
            "-o",
            where,
            f"{series.base}..{series.head}",
        ],
        cwd=series.git_dir,
    )
    produced = sorted(where.iterdir())
    if len(produced) != len(names):
        raise ApplyError(f"git format-patch wrote {len(produced)} mail(s) for {len(names)} patch(es)")
    for path in produced:
        mail = drop_trailers(path.read_bytes().decode(errors="surrogateescape"), drop)
        path.write_bytes(subject_only(mail).encode(errors="surrogateescape"))
    return [apply.PatchRef(name, path, "") for name, path in zip(names, produced, strict=True)]


def _stat(repo: Path, base: str, head: str) -> Stat:
    """`git diff --numstat -z`: per file (a rename under its new path), and the totals."""
    fields = gitops.out(["diff", "--numstat", "-z", base, head], cwd=repo).split("\0")
    found: list[FileStat] = []
    i = 0
    while i < len(fields) and fields[i]:
        plus, minus, path = fields[i].split("\t", 2)
        if not path:  # a rename or copy: the old path and the new one follow
            path, i = fields[i + 2], i + 3
        else:
            i += 1
        # a binary file counts as no line
        found.append(FileStat(path, int(plus) if plus.isdigit() else 0, int(minus) if minus.isdigit() else 0))
    return Stat(len(found), sum(f.added for f in found), sum(f.deleted for f in found), tuple(found))


def bundle(repo: Path, ref: str, base: str, target: Path) -> bytes:
    """`git bundle create` of `base..ref`; one pack thread, so the same commits give the same bytes."""
    gitops.git(["-c", "pack.threads=1", "bundle", "create", "--quiet", target, ref, f"^{base}"], cwd=repo)
    return target.read_bytes()


_HEADER = re.compile(rb"^# v[23] git bundle\n")


def bundle_header(data: bytes) -> tuple[list[str], dict[str, str]]:
    """The prerequisites (commit ids) and refs (name -> commit) of a bundle."""
    if not _HEADER.match(data):
        raise ApplyError("git bundle create wrote no bundle header")
    head = data.split(b"\n\n", 1)[0].decode("ascii", errors="replace").split("\n")[1:]
    needs = [line[1:].split(" ", 1)[0] for line in head if line.startswith("-")]
    refs = {
        line.split(" ", 1)[1]: line.split(" ", 1)[0]
        for line in head
        if line and not line.startswith(("-", "@")) and " " in line
    }
    return needs, refs


def make(
    series: AppliedSeries,
    pulls: tuple[upstream_package.Pull, ...],
    drop: tuple[str, ...],
    identity: gitops.Identity,
    tmp: Path,
) -> list[Branch]:
    """The branch and bundle of every pull request, from the applied series."""
    names = list(series.patches)
    store = scratch_repository(tmp / "branches.git", series.git_dir)
    mails = _mails(series, names, tmp / "mails", drop)
    try:
        applied = apply.apply_series(store, series.base, mails, identity, tmp / "am")
    except ApplyError as exc:
        exc.what = f"the commit of {exc.what}, without its trailers (a bug in export-upstream)"
        raise
    commits = dict(applied.commits)
    branches: list[Branch] = []
    parent = series.base
    for pull in pulls:
        head = commits[pull.patches[-1]]
        ref = f"refs/heads/{pull.branch}"
        gitops.git(["update-ref", ref, head], cwd=store)
        data = bundle(store, ref, series.base, tmp / f"pull-{pull.number}.bundle")
        own = [(name, commits[name]) for name in pull.patches]
        stats, before = [], parent
        for _, commit in own:
            stats.append(_stat(store, before, commit))
            before = commit
        branches.append(
            Branch(
                pull=pull,
                base=series.base,
                parent=parent,
                head=head,
                tree=gitops.repo(store).commit(head).tree.hexsha,
                commits=tuple(own),
                bundle=data,
                stat=_stat(store, parent, head),
                commit_stats=tuple(stats),
            )
        )
        parent = head
    return branches


def check(series: AppliedSeries, branches: list[Branch], tmp: Path) -> None:
    """Fetch every bundle into a fresh repository that has the pin: ApplyError unless it needs exactly the
    pin, names its branch, and gives the tree of the series after its last patch (what `dgr build` builds)."""
    for branch in branches:
        name = f"the bundle of pull request {branch.pull.number} (branch {branch.pull.branch})"
        needs, refs = bundle_header(branch.bundle)
        if needs != [series.base] or refs != {branch.ref: branch.head}:
            raise ApplyError(
                f"{name} does not stand on the pin alone",
                expected=f"needs {series.base}, holds {branch.ref} = {branch.head}",
                actual=f"needs {', '.join(needs) or 'nothing'}, holds "
                + (", ".join(f"{r} = {c}" for r, c in refs.items()) or "no ref"),
            )
        where = tmp / f"check-{branch.pull.number}"
        repo = scratch_repository(where / "repo.git", series.git_dir)
        path = where / "pull.bundle"
        path.write_bytes(branch.bundle)
        fetched = gitops.git(["fetch", "--quiet", path, f"{branch.ref}:{branch.ref}"], cwd=repo, check=False)
        if fetched.returncode != 0:
            raise ApplyError(
                f"{name} does not apply on {series.base[:12]}",
                detail=fetched.stderr.strip() or fetched.stdout.strip(),
            )
        tree = gitops.repo(repo).commit(branch.ref).tree.hexsha
        expected = series.tree_after(branch.pull.patches[-1])
        if tree != expected:
            raise ApplyError(
                f"{name} does not give the tree of the series",
                expected=f"tree {expected} (the series applied on {series.base[:12]}, as `dgr build` does)",
                actual=f"tree {tree}",
            )
