"""`dgr verify [--only GROUP,...] [--json] [--junit FILE]`: native tests and conformance checks against the
published build of the current inputs (built first if needed), with every locked model and synthetic
fixtures; the report is kept in the cache under `reports/<inputs-digest>.json` (`durations_s`: each group,
and each part of a conformance group: `ownership/fixtures`, `ownership/<model>`, ...); exit 9 on a
failure."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dgr.builds import backends, build, buildplan, harness, reportstore
from dgr.builds.cmake import Toolchain
from dgr.contracts import expectations, locks
from dgr.contracts.backend import Backend
from dgr.contracts.parts import load_lock as load_parts_lock
from dgr.contracts.report import GPU_GROUPS, GROUPS, NATIVE, SYNTHETIC, Check, Group, Report
from dgr.core import log
from dgr.core.fs import write_atomic
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, DgrError, UsageError, VerifyError
from dgr.sources import model
from dgr.verify.checks import progress
from dgr.verify.checks.registry import load
from dgr.verify.checks.report import junit_xml, nonempty, table
from dgr.verify.checks.results import ResultStore
from dgr.verify.checks.session import Session
from dgr.verify.models.env import Env, RealModel
from dgr.verify.models.parts import PartsStore

DEVICES: dict[str, str] = {"vulkan": "Vulkan0"}
"""The ggml device of each GPU backend that the checks offload to: the first one."""


def groups_of(only: str | None, backend: Backend = "cpu") -> tuple[Group, ...]:
    """The groups of `--only` (of the backend: GPU_GROUPS for a GPU backend), in the order they run;
    UsageError naming the unknown ones."""
    groups = GROUPS if backend == "cpu" else GPU_GROUPS
    if only is None:
        return groups
    named = {g.strip() for g in only.split(",") if g.strip()}
    if not named:  # `--only ''` (a variable that expanded to nothing) is not "every group"
        raise UsageError(
            f"--only {only!r} names no group",
            hint=f"name one or more of {', '.join(groups)} (comma-separated), or leave out --only for all",
        )
    unknown = sorted(named - set(groups))
    if unknown:
        raise UsageError(
            f"unknown group(s) in --only {only!r}: {', '.join(unknown)}",
            hint=f"choose from {', '.join(groups)}",
        )
    return tuple(g for g in groups if g in named)


def run_groups(
    groups: tuple[Group, ...], session: Session, finished: Callable[[str, list[Check], float], None]
) -> tuple[list[Check], Exception | None]:
    """The checks of every group, in order, and the error of the group that raised (None: none did). A group
    that raises ends the run: its checks so far are lost, and it is recorded as the failed check
    `<group>/ran` carrying the error (evidence: a native test, the group's own run), so that the report keeps
    every group that finished."""
    results: list[Check] = []
    for group in groups:
        start = time.monotonic()
        try:
            with log.step(f"verify {group}"):
                # a group that ran no check is a failed check of its own, not a pass
                evidence = NATIVE if group in ("native", "upstream", "series") else SYNTHETIC
                checks = nonempty(group, "all", evidence, load(group).verify(session))
        except Exception as exc:
            detail = exc.render() if isinstance(exc, DgrError) else f"{type(exc).__name__}: {exc}"
            results.append(Check(group=group, name="ran", evidence=NATIVE, passed=False, detail=detail))
            session.durations[group] = round(time.monotonic() - start, 1)
            return results, exc
        if not any(part.startswith(f"{group}/") for part in session.durations):  # a group of one part
            finished(group, checks, time.monotonic() - start)
        results += checks
        session.durations[group] = round(time.monotonic() - start, 1)
    return results, None


def _device(backend: Backend) -> str | None:
    """The device the checks of a GPU backend offload to, after checking that the machine can run it. Vulkan
    lists no CPU-type device (Mesa's lavapipe, on a machine without a GPU) unless GGML_VK_VISIBLE_DEVICES
    names it: the first device is made visible when the variable is not set."""
    if backend == "cpu":
        return None
    backends.require_run(backend)
    if backend == "vulkan" and "GGML_VK_VISIBLE_DEVICES" not in os.environ:
        os.environ["GGML_VK_VISIBLE_DEVICES"] = "0"
        log.info("GGML_VK_VISIBLE_DEVICES=0: the checks run on the first Vulkan device, whatever its type")
    return DEVICES[backend]


def run(args: argparse.Namespace) -> int:
    groups = groups_of(args.only, args.backend)
    sanitize = buildplan.parse_sanitizers(args.sanitize)
    device = _device(args.backend)
    if sanitize:
        # a finding of a sanitizer fails the test or the request instead of scrolling by
        os.environ.setdefault("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=1")
        os.environ.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    ctx = Context.discover()
    ran = harness.current(ctx.repo)  # what runs the checks, read before they run
    parts_lock = load_parts_lock(ctx.repo.locks_dir)  # a bad lock before anything is built
    patched = build.run(
        ctx,
        buildplan.Request(
            mirror=args.mirror, upstream=args.upstream, sanitize=sanitize, backend=args.backend
        ),
    )
    baseline = (
        build.run(
            ctx,
            buildplan.Request(
                upstream_only=True, mirror=args.mirror, upstream=args.upstream, sanitize=sanitize
            ),
        )
        if any(load(group).needs_baseline for group in groups)
        else None
    )
    worker = patched.path / "bin" / "layer-worker"
    models = locks.load_models(ctx.repo.locks_dir).all()
    paths = model.fetch_all(ctx.cache, models)
    # each range of a split run from the parts loads from its own directory under tmp/, removed at the end
    parts = PartsStore(
        ctx.cache.root,
        ctx.cache.tmp / f"verify-parts.{os.getpid()}",
        parts_lock,
        {lock.name: (path, lock.sha256) for lock, path in zip(models, paths, strict=True)},
    )
    env = Env(
        worker=worker,
        models=tuple(RealModel.read(lock.name, path) for lock, path in zip(models, paths, strict=True)),
        fixtures=ctx.cache.root / "fixtures",
        threads=args.threads,
        baseline_worker=baseline.path / "bin" / "layer-worker" if baseline else None,
        sanitized=bool(sanitize),
        device=device,
        parts=parts,
    )
    toolchain = Toolchain.find(locks.load_toolchain(ctx.repo.locks_dir))

    def build_prefix(k: int) -> build.BuildOutcome:
        request = buildplan.Request(
            mirror=args.mirror, upstream=args.upstream, sanitize=sanitize, prefix=k, backend=args.backend
        )
        return build.run(ctx, request)

    def work_build(upstream_only: bool, only: tuple[str, ...] | None = None) -> Path:
        # with the backend of the run: the archs group judges a device failure by the unpatched build's
        # test-llama-archs on the same device
        request = buildplan.Request(
            upstream_only=upstream_only,
            mirror=args.mirror,
            upstream=args.upstream,
            sanitize=sanitize,
            backend=args.backend,
            upstream_tests=True,
            only_tests=only,
        )
        return build.work_build(ctx, request)

    tracker = progress.Progress(groups, progress.last_report(ctx.cache, groups))

    def finished(part: str, checks: list[Check], seconds: float) -> None:
        log.detail(tracker.line(part, checks, seconds))

    session = Session(
        env,
        toolchain.ctest,
        patched,
        baseline,
        build_prefix,
        work_build=work_build,
        on_part=finished,
        expected=functools.cache(functools.partial(expectations.load, ctx.repo.root)),
        results=None if args.rerun else ResultStore(ctx.cache.root / "results", ran.digest),
    )
    try:
        results, error = run_groups(groups, session, finished)
    finally:
        parts.close()

    report = Report(
        inputs_digest=patched.manifest.inputs_digest,
        baseline_digest=baseline.manifest.inputs_digest if baseline else None,
        groups=groups,
        durations_s=session.durations,
        checks=tuple(results),
        harness=ran,
        reused=dict(session.results.used) if session.results else {},
    )
    path, data = reportstore.write(ctx.cache, report)
    if args.junit:
        write_atomic(args.junit, junit_xml(results))
    print(table(results), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        sys.stdout.write(data.decode())
    if session.results and session.results.used:
        log.info(
            f"{len(session.results.used)} part(s) taken from results kept for the same binaries "
            f"({', '.join(session.results.used)}); `--rerun` runs them again"
        )
    log.info(f"report: {path}")
    if error is not None:  # the report keeps the groups that finished; the command ends with the error
        raise error
    return EXIT_OK if report.passed else VerifyError.exit_code
