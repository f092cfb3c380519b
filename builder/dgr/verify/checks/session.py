"""What a group of `dgr verify` runs against, and how a group is found.

The registry of groups is `dgr.contracts.report.Group`, one line per group, in the order they run. The group
`<name>` is the module `dgr.verify.checks.<name>`, found by its name (as `dgr.cli` finds a command); it
defines `GROUP`, a `GroupSpec`. A group is therefore one module plus one line of the registry."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from dgr.contracts.buildmanifest import BuildManifest
from dgr.contracts.expectations import Expectations
from dgr.contracts.report import REAL_MODEL, SYNTHETIC, Check, Evidence, Group
from dgr.errors import VerifyError
from dgr.verify.checks.report import nonempty
from dgr.verify.checks.results import ResultStore, build_digest
from dgr.verify.checks.testrun import TestRun
from dgr.verify.models.env import Env, RealModel


class Built(Protocol):
    """A published build, as the groups see it (dgr.builds.build's outcome)."""

    @property
    def path(self) -> Path: ...

    @property
    def manifest(self) -> BuildManifest: ...


class WorkBuild(Protocol):
    """The work build dir of the baseline (`upstream_only`) or of the patched build, brought to the build's
    commit and built with the executables of upstream's own tests (`only`: of these tests, by CTest name;
    None: of all; `()`: configured only), for the backend of the run (dgr.builds.build.work_build)."""

    def __call__(self, upstream_only: bool, only: tuple[str, ...] | None = None) -> Path: ...


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
    work_build: WorkBuild | None = None
    """The work build dir of the baseline (True) or of the patched build (False), brought to the build's
    commit and built with upstream's own test executables, for the backend of the run
    (dgr.builds.build.work_build): where upstream's own tests run, and where the unpatched
    test-llama-archs is."""
    durations: dict[str, float] = field(default_factory=dict)
    on_part: Callable[[str, list[Check], float], None] | None = None
    """Called as each timed part finishes, with its name, checks and seconds (`dgr verify`'s progress)."""
    expected: Callable[[], Expectations] | None = None
    """What the series declares that the checks hold it to (series/verify.toml, read when a group asks)."""
    results: ResultStore | None = None
    """The results kept by what they ran (None: every check runs)."""

    def upstream_build(self) -> Built:
        """The upstream-only build (there is one when a group with `needs_baseline` runs)."""
        assert self.baseline is not None, "a group that needs the baseline runs without one"
        return self.baseline

    def expectations(self) -> Expectations:
        """series/verify.toml; VerifyError when this run was given none."""
        if self.expected is None:
            raise VerifyError("this dgr verify was given no series/verify.toml to hold the series to")
        return self.expected()

    def built(self, build: Built | None) -> dict[str, str] | None:
        """What a published build runs (dgr.verify.checks.results.build_digest)."""
        return None if build is None else build_digest(build.path, build.manifest.artifacts)

    def kept(
        self, part: str, inputs: Mapping[str, Any], run: Callable[[], tuple[list[Check], Mapping[str, str]]]
    ) -> tuple[list[Check], dict[str, str]]:
        """The checks of `part` and the outputs it leaves: a kept result for `inputs` (what the part runs,
        beside the harness), else `run()`'s (dgr.verify.checks.results)."""
        if self.results is None:
            checks, outputs = run()
            return checks, dict(outputs)
        return self.results.run(part, inputs, run)

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


def _kept(
    session: Session, part: str, inputs: Mapping[str, Any], run: Callable[[], list[Check]]
) -> list[Check]:
    """The checks of a part that leaves nothing for the others, kept by what it ran."""
    return session.kept(part, inputs, lambda: (run(), {}))[0]


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
            inputs = {
                "part": f"{group}/{part}",
                "patched": session.built(session.patched),
                "baseline": session.built(session.baseline),
                "threads": session.env.threads,
                "device": session.env.device,
            }
            checked = partial(_nonempty, group, part, evidence, run)
            out += session.timed(
                f"{group}/{part}", partial(_kept, session, f"{group}/{part}", inputs, checked)
            )
        return out

    return GroupSpec(verify, needs_baseline=needs_baseline)
