"""`dgr rebase-check`: does the series apply onto another upstream? Per patch: clean / 3-way / conflict, or
redundant (upstream has the change already: the patch applies in reverse).

The other upstream (SOURCE) is a locked rebase target (`pypi:llama-cpp-python==0.3.36`,
verified like the pin), an unlocked `pypi:NAME==VERSION` (downloaded, reported
as unverified), a path to a llama.cpp git tree (its HEAD), or a commit in the
mirror. The check runs in a throwaway repository that borrows the objects of
the pin and of SOURCE (git alternates), so `git am --3way` finds every preimage.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dgr.contracts.locks import Pin, Release, SdistRef, UpstreamLock
from dgr.core import log
from dgr.core.paths import Cache, Repo
from dgr.errors import UpstreamError, UsageError
from dgr.git import apply, gitops
from dgr.maintain import rules
from dgr.series import generated, patchfile
from dgr.sources import pypi, release, upstream

PYPI = re.compile(r"^pypi:([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)$")
RELEASE = re.compile(r"^release:(b[1-9][0-9]*)$")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
DEFAULT_SUBDIR = "vendor/llama.cpp"


def _attributes(record: object, *names: str) -> dict[str, Any]:
    """The JSON of a report's record: the attributes `names`, in that order, under their own names."""
    return {name: getattr(record, name) for name in names}


@dataclass(frozen=True)
class Onto:
    """The upstream to check against: a bare repository holding `commit` at refs/dgr/upstream."""

    spec: str
    repo: Path
    commit: str
    tree: str
    source: str
    verified: bool
    sdist: SdistRef | None = None
    """The sdist that carries the commit (for an unlocked pypi: spec, as downloaded now)."""
    commit_date: dt.datetime | None = None
    """When the commit was made (an upstream older than the pin gets no port: the pin only moves forward)."""
    release: Release | None = None
    """For `release:bN`: the tag, and the commit dgr made of its sdist's tree (dgr.sources.release)."""

    def to_json(self) -> dict[str, Any]:
        return _attributes(self, "spec", "commit", "tree", "source", "verified")


def resolve(cache: Cache, lock: UpstreamLock, spec: str, mirror: Path | None, tmp: Path) -> Onto:
    """Obtain SOURCE: verified when it is a locked target, else staged under `tmp` (unverified)."""
    if spec in lock.rebase_targets:
        pin, sources = upstream.select(lock, spec)
        got = upstream.obtain(cache, pin, sources, mirror)
        target = lock.rebase_targets[spec]
        return Onto(
            spec,
            got.repo,
            pin.commit,
            pin.tree,
            got.source,
            True,
            target.sdist,
            pin.commit_date,
            target.release,
        )
    stage = tmp / "onto.git"
    gitops.init_bare(stage)
    sdist: SdistRef | None = None
    if match := RELEASE.match(spec):
        return _unlocked_release(cache, lock, spec, match.group(1), mirror, stage, tmp)
    if match := PYPI.match(spec):
        package, version = match.groups()
        log.warn(f"{spec} has no entry in locks/upstream.toml [rebase.targets]: its sdist is UNVERIFIED")
        filename = f"{package.replace('-', '_')}-{version}.tar.gz"
        archive = pypi.fetch(cache, pypi.Download(package, version, filename, None, False))
        source, rev = str(upstream.sdist_git_dir(archive, DEFAULT_SUBDIR, tmp / "sdist")), "HEAD"
        label = f"{spec} (unverified sdist)"
        # downloads/<sha256>/<file>: the digest it is filed under is the one it has
        sdist = SdistRef(package, version, filename, archive.parent.name, DEFAULT_SUBDIR)
    elif Path(spec).exists():
        source, rev, label = str(Path(spec).resolve()), "HEAD", f"git tree {Path(spec).resolve()}"
    elif _HEX.match(spec):
        where = upstream.mirror_path(mirror)
        if where is None:
            raise UsageError(
                f"{spec} looks like a commit, but no mirror is configured to find it in",
                hint=f"pass --mirror PATH or set ${upstream.MIRROR_ENV}",
            )
        source, rev, label = str(where.resolve()), spec, f"mirror {where.resolve()}"
    else:
        raise UsageError(
            f"cannot resolve {spec!r} as an upstream",
            hint="use a locked target ("
            + ", ".join(lock.rebase_targets)
            + "), release:bN, pypi:NAME==VERSION, "
            "a path to a llama.cpp git tree, or a commit in the mirror",
        )
    gitops.git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", source, f"{rev}:{upstream.VERIFIED_REF}"],
        cwd=stage,
        error=UsageError,
        what=f"cannot fetch {rev} from {label}",
    )
    fetched = gitops.repo(stage).commit(upstream.VERIFIED_REF)
    commit, tree = fetched.hexsha, fetched.tree.hexsha
    return Onto(spec, stage, commit, tree, label, False, sdist, gitops.commit_date(stage, commit))


def _unlocked_release(
    cache: Cache, lock: UpstreamLock, spec: str, tag: str, mirror: Path | None, stage: Path, tmp: Path
) -> Onto:
    """A release not in the lock: its sdist as PyPI serves it now (UNVERIFIED), committed on the pin."""
    log.warn(f"{spec} has no entry in locks/upstream.toml [rebase.targets]: its sdist is UNVERIFIED")
    unverified = release.sdist_ref(tag, "")
    download = pypi.Download(unverified.package, unverified.version, unverified.filename, None, False)
    try:
        archive = pypi.fetch(cache, download)
    except UpstreamError as exc:
        if "No matching distribution" not in (exc.detail or ""):
            raise
        raise UpstreamError(
            f"release {tag} is not on PyPI: pip found no sdist {unverified.package}=={unverified.version}",
            hint=f"`pip index versions {unverified.package}` lists the releases there (version N.0.0 is bN)",
        ) from exc
    # downloads/<sha256>/<file>: the digest it is filed under is the one it has
    sdist = release.sdist_ref(tag, archive.parent.name)
    pin, sources = upstream.select(lock, None)
    base = upstream.obtain(cache, pin, sources, mirror)
    gitops.git(
        [
            "fetch",
            "--quiet",
            "--no-tags",
            "--depth=1",
            str(base.repo),
            f"{pin.commit}:{upstream.VERIFIED_REF}",
        ],
        cwd=stage,
    )
    made = release.make(stage, archive, Release(tag, pin.commit), sdist, tmp, None)
    gitops.git(["update-ref", upstream.VERIFIED_REF, made.commit], cwd=stage)
    found = Release(tag, pin.commit, made.omitted, made.changed)
    label = f"{spec} (unverified sdist {sdist.filename}, sha256 {sdist.sha256})"
    return Onto(spec, stage, made.commit, made.tree, label, False, sdist, made.commit_date, found)


def scratch_repo(where: Path, repos: list[Path]) -> Path:
    """A bare repository borrowing the objects (and shallow boundaries) of `repos`."""
    scratch = where / "scratch.git"
    gitops.init_bare(scratch)
    (scratch / "objects" / "info" / "alternates").write_text(
        "".join(f"{(r / 'objects').resolve()}\n" for r in repos)
    )
    shallow = [
        line for r in repos if (r / "shallow").is_file() for line in (r / "shallow").read_text().split()
    ]
    if shallow:
        (scratch / "shallow").write_text("".join(f"{oid}\n" for oid in dict.fromkeys(shallow)))
    return scratch


ApplyStatus = Literal["clean", "3-way", "regenerated", "conflict", "redundant"]
"""`clean`: plain `git am`; `3-way`: `git am --3way`; `regenerated`: a generated patch (dgr.series.generated)
made again by its rule on that upstream (its hand-written part with `git am --3way`), where plain `git am`
gives another tree; `conflict`: none of these; `redundant`: the upstream has the change already (the patch
applies in reverse), so it is not applied."""


@dataclass
class PatchReport:
    name: str
    subject: str
    status: ApplyStatus
    after_failure: bool
    """An earlier patch conflicted and was skipped: this result is on top of an incomplete series."""
    files: list[str] = field(default_factory=list)
    rejections: list[apply.Rejection] = field(default_factory=list)
    rule: rules.RuleCounts | None = None
    """A generated patch: what its rule did on that upstream (or where it refused it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **_attributes(self, "name", "subject", "status", "after_failure", "files"),
            "rule": self.rule.to_json() if self.rule else None,
            "hunks": [
                {"file": r.file, "index": n, "header": header}
                for r in self.rejections
                for n, header in r.hunks
            ],
        }


@dataclass
class RebaseReport:
    onto: Onto
    base: Pin
    patches: list[PatchReport]

    @property
    def ok(self) -> bool:
        return all(p.status != "conflict" for p in self.patches)

    def next_step(self) -> str:
        spec = self.onto.spec
        if self.onto.commit_date is not None and self.onto.commit_date < self.base.commit_date:
            return (
                f"{spec} is older than the pin ({self.onto.commit_date.date()} < "
                f"{self.base.commit_date.date()}): a row for the record, the series is not ported back to it"
            )
        redundant = [p.name for p in self.patches if p.status == "redundant"]
        if redundant:
            return (
                f"upstream {self.onto.commit[:12]} has the change of {', '.join(redundant)} already: drop "
                "it from series/series (and its file), then check again"
            )
        if not self.ok:
            return (
                f"run `dgr edit --onto {spec}`: it stops at the first conflict; resolve it, "
                "`git am --continue`, repeat, then `dgr export-patches --dir <that tree>`"
            )
        if any(p.status == "regenerated" for p in self.patches):
            return (
                f"the generated patches were made again by their rules on it: refresh the series with "
                f"`dgr edit --onto {spec}` (which regenerates them too) then `dgr export-patches`, and move "
                "the pin with `dgr pin --to`"
            )
        if any(p.status == "3-way" for p in self.patches):
            return (
                f"the series applies with 3-way merges: refresh it with `dgr edit --onto {spec}` then "
                "`dgr export-patches`, and move the pin in locks/upstream.toml"
            )
        return f"the series applies cleanly onto {self.onto.commit[:12]}: move the pin in locks/upstream.toml"

    def to_json(self) -> dict[str, Any]:
        return {
            "onto": self.onto.to_json(),
            "base": {"commit": self.base.commit, "tree": self.base.tree},
            "ok": self.ok,
            "patches": [p.to_json() for p in self.patches],
            "next": self.next_step(),
        }


def check(
    scratch: Path,
    onto: Onto,
    base: Pin,
    patches: list[apply.PatchRef],
    identity: gitops.Identity,
    where: Path,
    repo: Repo | None = None,
) -> RebaseReport:
    """Apply each patch onto `onto` in order, reporting every one (a conflicting patch is skipped); with
    `repo`, its generated patches are regenerated by their rule."""
    reports: list[PatchReport] = []
    rules_of = generated.rules_of(repo) if repo is not None else {}
    with apply.temp_worktree(scratch, onto.commit, where) as worktree:
        for patch in patches:
            subject = patchfile.load(patch.path).subject
            failed_before = any(r.status == "conflict" for r in reports)
            if apply.applies_in_reverse(worktree, patch.path):
                reports.append(PatchReport(patch.name, subject, "redundant", failed_before))
                continue
            if repo is not None and patch.name in rules_of:
                reports.append(
                    _regenerated(
                        repo, rules_of[patch.name], worktree, patch, subject, identity, failed_before
                    )
                )
                continue
            if apply.am(worktree, patch.path, identity)[0]:
                reports.append(PatchReport(patch.name, subject, "clean", failed_before))
                continue
            applied, output = apply.am(worktree, patch.path, identity, three_way=True)
            if applied:
                reports.append(PatchReport(patch.name, subject, "3-way", failed_before))
                continue
            rejections = apply.diagnose(worktree, patch.path)
            files = apply.conflicted_files(output) or [r.file for r in rejections]
            reports.append(PatchReport(patch.name, subject, "conflict", failed_before, files, rejections))
    return RebaseReport(onto, base, reports)


def _regenerated(
    repo: Repo,
    rule: str,
    worktree: Path,
    patch: apply.PatchRef,
    subject: str,
    identity: gitops.Identity,
    failed_before: bool,
) -> PatchReport:
    """A generated patch, made by its rule on the work tree's upstream: `clean` when that is what plain
    `git am` of the committed patch gives, else `regenerated`; `conflict` naming what stopped it."""
    done, stopped, counts = rules.regenerate(repo, rule, worktree, patch.path, identity)
    if not done:
        return PatchReport(patch.name, subject, "conflict", failed_before, stopped, rule=counts)
    made = gitops.git(["rev-parse", "HEAD"], cwd=worktree).stdout.strip()
    gitops.git(["reset", "--quiet", "--hard", "HEAD~1"], cwd=worktree)
    plain = (
        apply.am(worktree, patch.path, identity)[0]
        and gitops.git(["rev-parse", "HEAD^{tree}"], cwd=worktree).stdout.strip()
        == gitops.git(["rev-parse", f"{made}^{{tree}}"], cwd=worktree).stdout.strip()
    )
    gitops.git(["reset", "--quiet", "--hard", made], cwd=worktree)
    return PatchReport(patch.name, subject, "clean" if plain else "regenerated", failed_before, rule=counts)
