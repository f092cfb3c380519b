"""What a group of `dgr verify` runs against, and how a group is found.

The registry of groups is `dgr.contracts.report.Group`, one line per group, in the order they run. The group
`<name>` is the module `dgr.verify.checks.<name>`, found by its name (as `dgr.cli` finds a command); it
defines `GROUP`, a `GroupSpec`. A group is therefore one module plus one line of the registry."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from dgr.contracts.buildmanifest import BuildManifest
from dgr.contracts.report import REAL_MODEL, SYNTHETIC, Check, Evidence, Group
from dgr.errors import VerifyError
from dgr.verify.checks.report import nonempty
from dgr.verify.checks.testrun import TestRun
from dgr.verify.models.env import Env, RealModel


class Built(Protocol):
    """A published build, as the groups see it (dgr.builds.build's outcome)."""

    @property
    def path(self) -> Path: ...

    @property
    def manifest(self) -> BuildManifest: ...


@dataclass
class Session:
    """One `dgr verify` run: the builds, the environment the checks run against, what the groups so far
    left for the next ones (the native tests' run), and the time of every part of a group."""

    env: Env
    ctest: Path
    patched: Built
    baseline: Built | None
    build_prefix: Callable[[int], Built]
    """The build of the first k patches of the series (cached by its own inputs digest)."""
    native_ran: TestRun | None = None
    work_build: Callable[[bool], Path] | None = None
    """The work build dir of the baseline (True) or of the patched build (False), brought to the build's
    commit and built (dgr.builds.build.work_build): where upstream's own tests run."""
    durations: dict[str, float] = field(default_factory=dict)
    on_part: Callable[[str, list[Check], float], None] | None = None
    """Called as each timed part finishes, with its name, checks and seconds (`dgr verify`'s progress)."""

    def upstream_build(self) -> Built:
        """The upstream-only build (there is one when a group with `needs_baseline` runs)."""
        assert self.baseline is not None, "a group that needs the baseline runs without one"
        return self.baseline

    def timed(self, part: str, run: Callable[[], list[Check]]) -> list[Check]:
        start = time.monotonic()
        checks = run()
        self.durations[part] = round(time.monotonic() - start, 1)
        if self.on_part is not None:
            self.on_part(part, checks, time.monotonic() - start)
        return checks


@dataclass(frozen=True)
class GroupSpec:
    """A group of `dgr verify`: its checks, and whether it runs against the upstream-only build too."""

    verify: Callable[[Session], list[Check]]
    needs_baseline: bool = False


FIXTURES = "fixtures"
"""The name of the part of a conformance group that runs on the synthetic fixtures."""

Fixtures = Callable[[Env], list[Check]]
PerModel = Callable[[Env, RealModel], list[Check]]


def parts(env: Env, fixtures: Fixtures, per_model: PerModel) -> list[tuple[str, Callable[[], list[Check]]]]:
    """The checks of one conformance group in the order they run, as (part, run) pairs: `fixtures`, then
    the name of every locked model; each run returns its part's checks (so that a caller can time them)."""
    out: list[tuple[str, Callable[[], list[Check]]]] = [(FIXTURES, partial(fixtures, env))]
    return out + [(m.name, partial(per_model, env, m)) for m in env.models]


def _nonempty(group: Group, part: str, evidence: Evidence, run: Callable[[], list[Check]]) -> list[Check]:
    return nonempty(group, part, evidence, run())


def conformance(
    group: Group, fixtures: Fixtures, per_model: PerModel, *, needs_baseline: bool = False
) -> GroupSpec:
    """A conformance group: layer workers of the patched build, on the synthetic fixtures, then on every
    locked model (the default one first), each part timed on its own (`<group>/<part>`)."""

    def verify(session: Session) -> list[Check]:
        worker = session.env.worker
        if not worker.is_file():
            raise VerifyError(
                f"the build at {session.patched.path} has no layer-worker",
                hint="run `dgr build`: it builds verify/worker against the patched library",
            )
        out: list[Check] = []
        for part, run in parts(session.env, fixtures, per_model):
            # a part that runs no check is a failed check of its own, not a pass
            evidence = SYNTHETIC if part == FIXTURES else REAL_MODEL
            out += session.timed(f"{group}/{part}", partial(_nonempty, group, part, evidence, run))
        return out

    return GroupSpec(verify, needs_baseline=needs_baseline)
