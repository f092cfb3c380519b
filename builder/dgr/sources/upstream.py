"""Obtain the pinned llama.cpp commit into the cache and verify it (commit and tree id).

Sources are tried in lock order (mirror, PyPI sdist, git remote). Each fetch
goes into a fresh bare repository under tmp/, which is verified and only then
renamed to `upstream/<commit>.git`: a refused source leaves nothing behind.
A source that does not have the commit is skipped (and reported); a source
that hands over something else than the lock says is refused outright.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

from filelock import FileLock

from dgr.contracts.locks import Pin, Release, SdistRef, Source, UpstreamLock, Upstreams
from dgr.core import fs, log
from dgr.core.fs import publish_dir
from dgr.core.paths import Cache
from dgr.errors import ConfigError, IntegrityError, NetworkError, UpstreamError, UsageError
from dgr.git import gitops
from dgr.sources import pypi, release

MIRROR_ENV = "DGR_UPSTREAM_MIRROR"
VERIFIED_REF = "refs/dgr/upstream"
SOURCE_NOTE = "dgr-source"
_NETWORK = re.compile(
    r"Could not resolve host|unable to access|Failed to connect|Network is unreachable|"
    r"Connection timed out|Connection refused|Could not read from remote repository"
)


@dataclass(frozen=True)
class Upstream:
    """A verified bare repository holding `pin.commit` at refs/dgr/upstream."""

    repo: Path
    pin: Pin
    source: str


class _UnavailableSourceError(Exception):
    """This source cannot provide the commit; try the next one."""

    def __init__(self, reason: str, *, network: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.network = network


def verify(git_dir: Path, pin: Pin, label: str, ref: str = VERIFIED_REF) -> None:
    """Refuse unless `ref` is `pin.commit` and its tree is `pin.tree`."""
    hint = "the source does not hold the locked upstream: fix it, or update locks/upstream.toml on purpose"
    checks = (  # in order: the tree is read only once the commit is the locked one
        (ref, pin.commit, f"{ref} is not the locked commit"),
        (f"{pin.commit}^{{tree}}", pin.tree, f"commit {pin.commit} has another tree than the lock says"),
    )
    for rev, locked, problem in checks:
        found = gitops.rev_parse(git_dir, rev)
        if found != locked:
            raise UpstreamError(f"{label}: {problem}", expected=locked, actual=found or "nothing", hint=hint)


def select(lock: UpstreamLock, spec: str | None) -> Upstreams:
    """The pin and its sources: the lock's own, or those of a locked rebase target named `spec` (a release's
    with the pin and sources of its base, which the lock must hold)."""
    if spec is None:
        sources = tuple(
            replace(s, base=_base(lock, s.release, lock.pin.short)) if s.release else s for s in lock.sources
        )
        return lock.pin, sources
    target = lock.rebase_targets.get(spec)
    if target is None:
        raise UsageError(
            f"unknown upstream {spec!r}",
            hint="use one of the targets in locks/upstream.toml [rebase.targets]: "
            + (", ".join(lock.rebase_targets) or "(none)"),
        )
    # the mirror first, as for the pin: a local repository that has the commit needs no download
    if target.release is not None:
        base = _base(lock, target.release, spec)
        return target.pin, (
            Source("mirror", sdist=target.sdist, release=target.release, base=base),
            Source("release-sdist", sdist=target.sdist, release=target.release, base=base),
        )
    return target.pin, (Source("mirror"), Source("pypi-sdist", sdist=target.sdist))


def _base(lock: UpstreamLock, release: Release, name: str) -> Upstreams:
    """The pin and sources of a release's base: the pin's, or a locked target's of that commit."""
    if release.base == lock.pin.commit:
        return lock.pin, tuple(s for s in lock.sources if s.release is None)
    for target in lock.rebase_targets.values():
        if target.pin.commit == release.base and target.release is None:
            return select(lock, target.name)
    raise ConfigError(
        f"locks/upstream.toml: the base {release.base} of {name} ({release.tag}) is neither the pin nor a "
        "locked rebase target",
        hint="keep the upstream a release was locked on in [rebase.targets], or lock the release again "
        "(`dgr pin --add-target`)",
    )


def obtain_pin(cache: Cache, lock: UpstreamLock, mirror: Path | None = None) -> Upstream:
    """The verified repository of the lock's pin: its sources as `select` gives them (a release's with its
    base resolved), so that a pin made from a release sdist is obtained on an empty cache too."""
    pin, sources = select(lock, None)
    return obtain(cache, pin, sources, mirror)


def obtain(cache: Cache, pin: Pin, sources: tuple[Source, ...], mirror: Path | None = None) -> Upstream:
    """The verified upstream repository for `pin`, from the cache or the first source that has it."""
    target = cache.upstream_repo(pin.commit)
    with FileLock(cache.lock_file(f"upstream-{pin.commit}")):
        if target.is_dir():
            try:
                verify(target, pin, f"cached {target}")
                return Upstream(target, pin, (target / SOURCE_NOTE).read_text().strip())
            except (UpstreamError, OSError) as exc:
                log.warn(f"cache entry {target} is broken ({exc}); obtaining the upstream again")
                shutil.rmtree(target)
        skipped: list[_UnavailableSourceError] = []
        for source in sources:
            label = _label(source, mirror)
            log.info(f"upstream {pin.short}: trying {label}")
            try:
                return _from_source(cache, pin, source, mirror, target)
            except _UnavailableSourceError as skip:
                log.info(f"upstream {pin.short}: skipped {label}: {skip.reason}")
                skipped.append(skip)
        tried = "\n".join(f"{_label(s, mirror)}: {k.reason}" for s, k in zip(sources, skipped, strict=True))
        error = NetworkError if any(k.network for k in skipped) else UpstreamError
        raise error(
            f"no source provided the upstream commit {pin.commit}",
            detail=f"sources tried, in lock order:\n{tried}",
            hint=f"set ${MIRROR_ENV} or pass --mirror PATH (a llama.cpp git repository holding "
            f"{pin.commit}), or restore network access",
        )


def adopt(cache: Cache, staged: Path, pin: Pin, label: str) -> Upstream:
    """Publish a repository staged in the cache's tmp/ (by rebase-check's resolve) as the verified upstream
    of `pin`: checked like every source (commit and tree), then renamed into `upstream/<commit>.git`."""
    target = cache.upstream_repo(pin.commit)
    with FileLock(cache.lock_file(f"upstream-{pin.commit}")):
        if not target.is_dir():
            verify(staged, pin, label)
            (staged / SOURCE_NOTE).write_text(label + "\n")
            publish_dir(staged, target, replace=False)
    return Upstream(target, pin, label)


def _label(source: Source, mirror: Path | None) -> str:
    if source.kind == "mirror":
        tag = f" (tag {source.release.tag})" if source.release else ""
        return f"mirror {mirror_path(mirror) or '(not configured)'}{tag}"
    if source.kind == "release-sdist" and source.sdist and source.release:
        return f"PyPI sdist {source.sdist.package}=={source.sdist.version} (release {source.release.tag})"
    if source.kind == "pypi-sdist" and source.sdist:
        return f"PyPI sdist {source.sdist.package}=={source.sdist.version}"
    return f"git remote {source.url}"


def mirror_path(mirror: Path | None) -> Path | None:
    """`--mirror PATH` if given, else `$DGR_UPSTREAM_MIRROR`, else None."""
    if mirror is not None:
        return mirror
    env = os.environ.get(MIRROR_ENV)
    return Path(env) if env else None


def _from_source(cache: Cache, pin: Pin, source: Source, mirror: Path | None, target: Path) -> Upstream:
    with cache.tmpdir(f"upstream-{pin.short}") as tmp:
        stage = tmp / "repo.git"
        gitops.init_bare(stage)
        if source.release is not None:
            label = _fetch_release(cache, stage, pin, source, mirror, tmp)
        elif source.kind == "mirror":
            label = _fetch_mirror(stage, pin, mirror_path(mirror))
        elif source.kind == "pypi-sdist" and source.sdist:
            label = _fetch_sdist(cache, stage, source.sdist, tmp)
        else:
            label = _fetch_remote(stage, pin, source.url)
        verify(stage, pin, label)
        (stage / SOURCE_NOTE).write_text(label + "\n")
        publish_dir(stage, target, replace=False)
    log.info(f"upstream {pin.short}: verified commit {pin.commit} tree {pin.tree} from {label}")
    return Upstream(target, pin, label)


def _fetch(stage: Path, source: str, rev: str, label: str) -> None:
    result = gitops.git(
        ["fetch", "--quiet", "--no-tags", "--depth=1", source, f"{rev}:{VERIFIED_REF}"],
        cwd=stage,
        check=False,
    )
    if result.returncode != 0:
        output = (result.stderr + result.stdout).strip()
        raise _UnavailableSourceError(
            f"git fetch failed: {output.splitlines()[-1] if output else 'no output'}",
            network=bool(_NETWORK.search(output)),
        )
    log.info(f"fetched {rev[:12]} from {label}")


def _fetch_mirror(stage: Path, pin: Pin, mirror: Path | None) -> str:
    if mirror is None:
        raise _UnavailableSourceError(f"not configured (set ${MIRROR_ENV} or pass --mirror PATH)")
    if not mirror.exists():
        raise _UnavailableSourceError(f"{mirror} does not exist")
    if gitops.rev_parse(mirror, f"{pin.commit}^{{commit}}") is None:
        raise _UnavailableSourceError(f"{mirror} does not contain commit {pin.commit}")
    label = f"mirror {mirror.resolve()}"
    _fetch(stage, str(mirror.resolve()), pin.commit, label)
    return label


def _fetch_release(
    cache: Cache, stage: Path, pin: Pin, source: Source, mirror: Path | None, tmp: Path
) -> str:
    """The release's commit made in `stage` on its base (dgr.sources.release), from the mirror's tag or the
    sdist; a tree that is not the locked one is refused (exit 4) naming the tag and the files."""
    rel, sdist = source.release, source.sdist
    if rel is None or sdist is None or source.base is None:
        raise ConfigError(
            f"the release source of {pin.short} has no resolved base",
            hint="obtain a pin through upstream.select() or obtain_pin(), which resolve a release's base",
        )
    where = mirror_path(mirror)
    if source.kind == "mirror" and (where is None or not where.exists()):
        raise _UnavailableSourceError("not configured" if where is None else f"{where} does not exist")
    base_pin, base_sources = source.base
    base = obtain(cache, base_pin, base_sources, mirror)
    _fetch(stage, str(base.repo), base_pin.commit, f"the base {base_pin.short} of {rel.tag}")
    if source.kind == "mirror":
        assert where is not None
        tree = release.from_mirror(stage, where, rel, tmp)
        if tree is None:
            raise _UnavailableSourceError(f"{where} has no tag {rel.tag}")
        label = f"mirror {where.resolve()} (tag {rel.tag})"
        if tree != pin.tree:
            raise UpstreamError(
                f"{label}: the tag's tree (less the files the sdist leaves out) is not the locked one",
                expected=pin.tree,
                actual=tree,
                hint="the mirror's tag is not the release the lock holds: fix the mirror, or drop --mirror",
            )
        made = release.commit(stage, tree, rel, sdist, pin.commit_date)
    else:
        label = f"{sdist.spec} (release {rel.tag}, sha256 {sdist.sha256})"
        download = pypi.Download(sdist.package, sdist.version, sdist.filename, sdist.sha256, False)
        try:
            archive = pypi.fetch(cache, download, rejected=tmp / "rejected")
        except NetworkError as exc:
            raise _UnavailableSourceError(exc.what, network=True) from exc
        except IntegrityError as exc:
            bad = tmp / "rejected" / sdist.filename
            if bad.is_file():  # what differs: the files, not only the archive's digest
                other = release.make(stage, bad, rel, sdist, tmp / "rejected-tree", pin.commit_date)
                if other.tree != pin.tree:
                    raise release.refuse_tree(label, rel, pin, other, other.tree, rel.changed) from exc
            raise
        got = release.make(stage, archive, rel, sdist, tmp, pin.commit_date)
        if got.tree != pin.tree:
            raise release.refuse_tree(label, rel, pin, got, got.tree, rel.changed)
        made = got.commit
    gitops.git(["update-ref", VERIFIED_REF, made], cwd=stage)
    return label


def _fetch_remote(stage: Path, pin: Pin, url: str) -> str:
    label = f"git remote {url}"
    with log.step(f"fetch {pin.short} from {url}"):
        _fetch(stage, url, pin.commit, label)
    return label


def _fetch_sdist(cache: Cache, stage: Path, sdist: SdistRef, tmp: Path) -> str:
    try:
        archive = pypi.fetch(
            cache, pypi.Download(sdist.package, sdist.version, sdist.filename, sdist.sha256, False)
        )
    except NetworkError as exc:
        raise _UnavailableSourceError(exc.what, network=True) from exc
    git_dir = sdist_git_dir(archive, sdist.subdir, tmp / "sdist")
    label = f"{sdist.spec} (sha256 {sdist.sha256})"
    _fetch(stage, str(git_dir), "HEAD", label)
    return label


def sdist_git_dir(archive: Path, subdir: str, dest: Path) -> Path:
    """Extract the git repository of `subdir` from an sdist; returns a git dir ready to fetch from.

    In llama-cpp-python's sdist, `<top>/vendor/llama.cpp/.git` is a file
    (`gitdir: ../../.git/modules/vendor/llama.cpp`) and the (shallow) repository
    is under `<top>/.git/modules/`. Only those members are extracted.
    """
    with (
        log.step(f"extract the git repository of {subdir} from {archive.name}"),
        tarfile.open(archive) as tar,
    ):
        first = tar.next()
        if first is None:
            raise UpstreamError(f"{archive}: empty archive")
        top = first.name.split("/", 1)[0]
        wanted = (f"{top}/.git/", f"{top}/{subdir}/.git/")
        members = [
            m for m in tar.getmembers() if m.name == f"{top}/{subdir}/.git" or m.name.startswith(wanted)
        ]
        fs.extract_members(tar, dest, members, str(archive))
    dot_git = dest / top / subdir / ".git"
    if dot_git.is_file():
        pointer = dot_git.read_text().strip()
        if not pointer.startswith("gitdir:"):
            raise UpstreamError(f"{archive}: {top}/{subdir}/.git is not a gitdir pointer", actual=pointer)
        git_dir = (dot_git.parent / pointer.removeprefix("gitdir:").strip()).resolve()
    elif dot_git.is_dir():
        git_dir = dot_git
    else:
        raise UpstreamError(
            f"{archive}: no git repository at {top}/{subdir}",
            hint="this sdist does not carry llama.cpp as a git repository: use a mirror (--mirror PATH)",
        )
    if not git_dir.resolve().is_relative_to(dest.resolve()):
        raise UpstreamError(
            f"{archive}: the gitdir pointer of {subdir} leaves the archive", actual=str(git_dir)
        )
    # the submodule's config points core.worktree at the (not extracted) checkout: make it a bare repository
    config = git_dir / "config"
    if not config.is_file():
        raise ConfigError(f"{archive}: {git_dir.relative_to(dest)} is not a git repository")
    gitops.set_config(config, {("core", "worktree"): None, ("core", "bare"): "true"})
    return git_dir
