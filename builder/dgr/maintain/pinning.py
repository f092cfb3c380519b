"""`dgr pin --to SPEC`: move the pin to another upstream in one step.

1. resolve SPEC: a locked rebase target (verified by commit and tree, as the pin is), or, like rebase-check,
   an unlocked `pypi:NAME==VERSION` (its sdist's sha256 recorded as downloaded), a path to a llama.cpp git
   tree or a commit in the mirror (commit and tree read from it);
2. the new series: the target's port when it has one (series/ports/<port>, patches/ports/<port>/,
   locks/ports/<port>.toml, verified against that manifest), else the series rebased onto SPEC with
   `git am --3way` (as `dgr edit --onto`), stopping at the first conflict (exit 5);
3. it must apply cleanly (plain `git am`) on SPEC (exit 5);
4. a passing verify report must exist for the inputs digest the promoted repository will have (exit 9):
   the digest is computed by `buildplan.plan` over a staged copy, and does not depend on where the series
   lived, so the report of `dgr verify --upstream SPEC` on the port is the report of the promoted series;
5. everything is written at once (dgr.fs.write_all_atomic): locks/upstream.toml (the new [upstream]
   commit, tree, date and sources; the old pin kept as a rebase target, so `rebase-check --matrix` shows
   it; SPEC's own target entry gone), series/series, patches/, locks/patches.toml, and the port's files
   removed. On any failure nothing changed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dgr.builds import buildplan, harness, reportstore
from dgr.contracts import locks
from dgr.contracts.locks import Pin, RebaseTarget, Source, UpstreamLock
from dgr.core import log
from dgr.core.digest import sha256_bytes
from dgr.core.fs import prune_empty_dirs, write_all_atomic
from dgr.core.paths import Cache, Context, Repo
from dgr.errors import ApplyError, UsageError
from dgr.git import apply, gitops
from dgr.maintain import editing, rebase
from dgr.series import order as series
from dgr.series import patchmanifest
from dgr.sources import upstream


@dataclass(frozen=True)
class Target:
    """The upstream the pin moves to, and how its series was found."""

    onto: rebase.Onto
    pin: Pin
    port: str | None


@dataclass
class Change:
    """What `dgr pin` writes: every file's new bytes (paths in the repository) and the files it removes."""

    lock: UpstreamLock
    series: bytes
    patches: dict[str, bytes]
    removes: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def files(self, repo: Repo) -> dict[Path, bytes]:
        staged = Repo(repo.root)
        data = {staged.patches_dir / name: text for name, text in self.patches.items()}
        data[staged.series_file] = self.series
        digests = {name: sha256_bytes(text) for name, text in self.patches.items()}
        data[staged.manifest_file] = patchmanifest.serialize(
            locks.PatchManifest(sha256_bytes(self.series), digests), staged
        )
        data[staged.locks_dir / "upstream.toml"] = locks.dumps(self.lock.to_toml())
        return data


def resolve(
    ctx: Context, lock: UpstreamLock, spec: str, mirror: Path | None, tmp: Path, allow_older: bool = False
) -> Target:
    """SPEC as an upstream holding its commit; UsageError when it is the pin already, or older than the pin
    (its commit date) unless `allow_older`."""
    onto = rebase.resolve(ctx.cache, lock, spec, mirror, tmp)
    target = lock.rebase_targets.get(spec)
    pin = target.pin if target else Pin(onto.commit, onto.tree, gitops.commit_date(onto.repo, onto.commit))
    if pin.commit == lock.pin.commit:
        raise UsageError(f"{spec} is commit {pin.commit}: that is the pin already", hint="nothing to do")
    if pin.commit_date < lock.pin.commit_date and not allow_older:
        raise UsageError(
            f"{spec} is commit {pin.short} of {pin.commit_date.isoformat()}, older than the pin "
            f"{lock.pin.short} of {lock.pin.commit_date.isoformat()}: the pin only moves forward",
            hint="to move it back on purpose, run `dgr pin --to SPEC --allow-older`",
        )
    if not onto.verified:
        log.warn(
            f"{spec} is not a locked rebase target: its commit {pin.commit} and tree {pin.tree} are taken "
            f"from {onto.source} as they are, and recorded as the new pin"
        )
    return Target(onto, pin, target.port if target else None)


def _sources(lock: UpstreamLock, onto: rebase.Onto) -> tuple[Source, ...]:
    """The new pin's sources, in lock order: the mirror, SPEC's sdist (if one carries it: a release's is made
    into its commit on its base again), the remotes."""
    remotes = tuple(s for s in lock.sources if s.kind == "git")
    sdist = onto.sdist
    if sdist is not None and onto.release is not None:
        return (Source("mirror"), Source("release-sdist", sdist=sdist, release=onto.release), *remotes)
    return (Source("mirror"), *((Source("pypi-sdist", sdist=sdist),) if sdist else ()), *remotes)


def new_lock(lock: UpstreamLock, target: Target) -> tuple[UpstreamLock, list[str]]:
    """locks/upstream.toml after the move: SPEC's pin; the old pin kept as a rebase target."""
    notes: list[str] = []
    old = next((s for s in lock.sources if s.kind in ("pypi-sdist", "release-sdist") and s.sdist), None)
    targets: dict[str, RebaseTarget] = {}
    if old is not None and old.sdist is not None:
        name = old.release.spec if old.release else old.sdist.spec
        targets[name] = RebaseTarget(name, old.sdist, lock.pin, release=old.release)
        notes.append(f"the old pin {lock.pin.short} is kept as the rebase target {name}")
    else:
        notes.append(f"the old pin {lock.pin.short} has no sdist source: no rebase target can keep it")
    targets |= {name: t for name, t in lock.rebase_targets.items() if name != target.onto.spec}
    if target.onto.sdist is None:
        notes.append(f"no sdist carries {target.pin.short}: a mirror or the git remote must provide it")
    return UpstreamLock(lock.repo, target.pin, _sources(lock, target.onto), targets), notes


def _check_on(
    ctx: Context,
    lock: UpstreamLock,
    target: Target,
    patches: list[apply.PatchRef],
    work: Path,
    title: str,
    repo: Repo | None = None,
) -> rebase.RebaseReport:
    """`rebase.check` of `patches` on the target, in a scratch repository under `work` (created)."""
    pin_repo = upstream.obtain_pin(ctx.cache, lock).repo
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    work.mkdir()
    scratch = rebase.scratch_repo(work, [pin_repo, target.onto.repo])
    with log.step(title):
        return rebase.check(scratch, target.onto, lock.pin, patches, identity, work, repo)


def _clean_on(
    ctx: Context, lock: UpstreamLock, target: Target, patches: list[apply.PatchRef], tmp: Path
) -> None:
    """Every patch applies with plain `git am` on the target, in order; ApplyError (exit 5) otherwise."""
    title = f"apply {len(patches)} patch(es) onto {target.pin.short} with plain git am"
    report = _check_on(ctx, lock, target, patches, tmp / "check", title)
    unclean = [p for p in report.patches if p.status != "clean"]
    if unclean:
        raise ApplyError(
            f"the new series does not apply cleanly on {target.onto.spec}; the pin stays",
            detail="\n".join(f"patches/{p.name}: {p.status}" for p in unclean),
            hint=f"refresh it with `dgr edit --onto {target.onto.spec}` and `dgr export-patches`",
        )


def _promoted(ctx: Context, lock: UpstreamLock, target: Target, tmp: Path) -> tuple[bytes, dict[str, bytes]]:
    """The port's series and patches, verified against the port's manifest and clean on the target."""
    assert target.port is not None
    port = ctx.repo.for_port(target.port)
    refs = apply.verified_series(port)
    _clean_on(ctx, lock, target, refs, tmp)
    return port.series_file.read_bytes(), {ref.name: ref.path.read_bytes() for ref in refs}


def _rebased(ctx: Context, lock: UpstreamLock, target: Target, tmp: Path) -> tuple[bytes, dict[str, bytes]]:
    """The series rebased onto the target with `git am --3way`, exported as `dgr export-patches` would."""
    refs = apply.verified_series(ctx.repo)
    pin_repo = upstream.obtain_pin(ctx.cache, lock).repo
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    edit_dir = tmp / "rebase"
    base = editing.EditBase(target.onto.repo, target.pin.commit, pin_repo)
    with log.step(f"rebase {len(refs)} patch(es) onto {target.pin.short} with git am --3way"):
        stopped = editing.create(edit_dir, base, refs, identity, ctx.repo, three_way=True)
    if stopped:
        spec = target.onto.spec
        raise ApplyError(
            f"patches/{stopped} conflicts on {spec}; the pin stays",
            hint=f"run `dgr edit --onto {spec}`, resolve the conflict there, `git am --continue`, "
            f"`dgr export-patches --dir <that tree>`, `dgr verify --upstream {spec}` (a locked target), "
            f"then `dgr pin --to {spec}` again",
        )
    exported = editing.export(ctx.repo, edit_dir)
    refs_new = []
    for name, data in exported.patches.items():
        path = tmp / "rebased" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        refs_new.append(apply.PatchRef(name, path, sha256_bytes(data)))
    _clean_on(ctx, lock, target, refs_new, tmp)
    return exported.series_text, dict(exported.patches)


def _refuse_redundant(ctx: Context, lock: UpstreamLock, target: Target, tmp: Path) -> None:
    """UsageError when the target has the change of a patch of the series it would get already (the patch
    applies there in reverse, as `rebase-check` reports it): the series drops it before the pin moves."""
    repo = ctx.repo.for_port(target.port) if target.port is not None else ctx.repo
    refs = apply.verified_series(repo)
    title = f"which patches {target.pin.short} has already"
    report = _check_on(ctx, lock, target, refs, tmp / "redundant", title, repo)
    redundant = [p.name for p in report.patches if p.status == "redundant"]
    if redundant:
        raise UsageError(
            f"{target.onto.spec} has the change of {', '.join(redundant)} already (it applies there in "
            "reverse); the pin stays",
            hint="drop it from the series (series/series and its file, `dgr manifest`), then `dgr pin --to` "
            "again",
        )


def _staged_digest(ctx: Context, change: Change, tmp: Path) -> str:
    """The inputs digest of the repository as it will be: `buildplan.plan` over a staged copy of it."""
    root = tmp / "staged"
    shutil.copytree(ctx.repo.locks_dir, root / "locks", ignore=shutil.ignore_patterns("ports"))
    if ctx.repo.worker_dir.is_dir():
        shutil.copytree(ctx.repo.worker_dir, root / "verify" / "worker")
    for path, data in change.files(Repo(root)).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    with log.step("compute the inputs digest of the moved pin and its series"):
        return buildplan.plan(Context(Repo(root), ctx.cache), buildplan.Request()).digest


def _removes(repo: Repo, change: Change, port: str | None) -> list[Path]:
    """The main series' patches that leave it, and the promoted port's own files."""
    old = set(series.load(repo.series_file).names) if repo.series_file.is_file() else set()
    gone = [repo.patches_dir / name for name in sorted(old - set(change.patches))]
    if port is not None:
        promoted = repo.for_port(port)
        gone += [promoted.series_file, promoted.manifest_file]
        gone += sorted(p for p in promoted.patches_dir.rglob("*") if p.is_file())
    return gone


def move(ctx: Context, spec: str, mirror: Path | None = None, allow_older: bool = False) -> Change:
    """Move the pin to `spec` (see the module's docstring); returns what changed."""
    lock = locks.load_upstream(ctx.repo.locks_dir)
    with ctx.cache.tmpdir("pin") as tmp:
        target = resolve(ctx, lock, spec, mirror, tmp, allow_older)
        _refuse_redundant(ctx, lock, target, tmp)
        if target.port is not None:
            log.info(f"{spec} has the port {target.port}: it becomes the series")
            series, patches = _promoted(ctx, lock, target, tmp)
        else:
            log.info(f"{spec} has no port: the series is rebased onto it")
            series, patches = _rebased(ctx, lock, target, tmp)
        moved, notes = new_lock(lock, target)
        change = Change(moved, series, patches, notes=notes)
        digest = _staged_digest(ctx, change, tmp)
        current = harness.current(ctx.repo)
        reportstore.load_passing(ctx.cache, digest, current, hint=_report_hint(ctx, lock, target, change))
        _keep_upstream(ctx.cache, target)
    change.removes = _removes(ctx.repo, change, target.port)
    write_all_atomic(change.files(ctx.repo), change.removes)
    prune_empty_dirs({p.parent for p in change.removes}, ctx.repo.root)
    return change


def _report_hint(ctx: Context, lock: UpstreamLock, target: Target, change: Change) -> str:
    spec = target.onto.spec
    if spec not in lock.rebase_targets:
        return (
            f"lock {spec} as a rebase target in locks/upstream.toml (commit {target.pin.commit}, tree "
            f"{target.pin.tree}), `dgr verify --upstream {spec}`, then `dgr pin --to {spec}` again"
        )
    if target.port is None:
        current = {ref.name: ref.path.read_bytes() for ref in apply.verified_series(ctx.repo)}
        if current != change.patches:
            return (
                f"the series rebased onto {spec} differs from patches/: refresh it with `dgr edit --onto "
                f"{spec}` and `dgr export-patches --dir <that tree>`, `dgr verify --upstream {spec}`, then "
                f"`dgr pin --to {spec}` again"
            )
    return f"run `dgr verify --upstream {spec}` (all groups), then `dgr pin --to {spec}` again"


def _keep_upstream(cache: Cache, target: Target) -> None:
    """An unlocked target was staged in tmp/: publish it as the verified upstream of the new pin."""
    if target.onto.verified:
        return
    upstream.adopt(cache, target.onto.repo, target.pin, target.onto.source)
