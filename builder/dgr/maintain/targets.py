"""`dgr pin --add-target VERSION`: lock a new rebase target in locks/upstream.toml.

The sdist `llama-cpp-python==VERSION` (or `pypi:NAME==VERSION`) is downloaded with pip (as `rebase-check
--onto pypi:...` does), its vendor/llama.cpp git repository read for the commit, tree and committer date,
and the target written with the sdist's sha256 as downloaded now (tomli-w, atomically). From then on it is
verified like the pin: `rebase-check --matrix`, `verify --upstream`, `pin --to` accept it by name."""

from __future__ import annotations

import re
from pathlib import Path

from dgr.contracts import locks
from dgr.contracts.locks import Pin, RebaseTarget, UpstreamLock
from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import UpstreamError, UsageError
from dgr.maintain import rebase

DEFAULT_PACKAGE = "llama-cpp-python"
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+!-]*$")


def spec_of(value: str) -> str:
    """`VERSION` (of llama-cpp-python) or `pypi:NAME==VERSION`, as the target's name; UsageError else."""
    if rebase.PYPI.match(value):
        return value
    if _VERSION.match(value):
        return f"pypi:{DEFAULT_PACKAGE}=={value}"
    raise UsageError(
        f"--add-target {value!r} is neither a version nor pypi:NAME==VERSION",
        hint=f"give a version of {DEFAULT_PACKAGE} on PyPI, e.g. `dgr pin --add-target 0.3.37`",
    )


def _refuse_known(lock: UpstreamLock, spec: str) -> None:
    if spec in lock.rebase_targets:
        target = lock.rebase_targets[spec]
        raise UsageError(
            f"{spec} is a rebase target already (commit {target.pin.commit})",
            hint="nothing to do; `dgr rebase-check --matrix` checks the series on it",
        )
    pinned = [s.sdist.spec for s in lock.sources if s.sdist is not None]
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
    target = RebaseTarget(spec, onto.sdist, Pin(onto.commit, onto.tree, onto.commit_date))
    moved = UpstreamLock(lock.repo, lock.pin, lock.sources, {**lock.rebase_targets, spec: target})
    locks.write_toml(ctx.repo.locks_dir / "upstream.toml", moved.to_toml())
    log.info(f"recorded the sha256 of {onto.sdist.filename} as downloaded now: {onto.sdist.sha256}")
    return target
