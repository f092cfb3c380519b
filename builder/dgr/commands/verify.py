"""`dgr verify [--only GROUP,...] [--json] [--junit FILE]`: native tests and conformance checks against the
published build of the current inputs (built first if needed), with every locked model and synthetic
fixtures; the report is kept in the cache under `reports/<inputs-digest>.json` (`durations_s`: each group,
and each part of a conformance group: `ownership/fixtures`, `ownership/<model>`, ...); exit 9 on a
failure."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from dgr import locks
from dgr.builds import build, buildplan, reports
from dgr.builds.cmake import Toolchain
from dgr.contracts import GROUPS, Check, Group, Report
from dgr.core import log, proc
from dgr.core.fs import write_atomic
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, UsageError, VerifyError
from dgr.sources import model
from dgr.verify import checks
from dgr.verify.checks import archs, graphs, native
from dgr.verify.checks.report import junit_xml, table
from dgr.verify.models.env import Env, RealModel


def groups_of(only: str | None) -> tuple[Group, ...]:
    """The groups of `--only`, in the order they run; UsageError naming the unknown ones."""
    if not only:
        return GROUPS
    named = {g.strip() for g in only.split(",") if g.strip()}
    unknown = sorted(named - set(GROUPS))
    if unknown or not named:
        raise UsageError(
            f"unknown group(s) in --only {only!r}" + (f": {', '.join(unknown)}" if unknown else ""),
            hint=f"choose from {', '.join(GROUPS)}",
        )
    return tuple(g for g in GROUPS if g in named)


def _prefixes(
    ctx: Context,
    args: argparse.Namespace,
    sanitize: tuple[str, ...],
    toolchain: Toolchain,
    patched: build.Result,
    whole: native.Result | None,
) -> list[Check]:
    """A check per prefix of the series: the first k patches, built on their own (cached by their own inputs
    digest), pass the native tests they add; the whole series is the last prefix (its tests as the native
    group ran them, when it did)."""
    names = [p.name for p in patched.manifest.patches]
    out = []
    for k in range(1, len(names) + 1):
        if k == len(names):
            prefix = patched
        else:
            request = buildplan.Request(
                mirror=args.mirror, upstream=args.upstream, sanitize=sanitize, prefix=k
            )
            prefix = build.run(ctx, request)
        if not prefix.manifest.build.native_tests:
            # a prefix that registers no test of its own (the first patch: no change in behaviour) is judged
            # by its build here and by the graph comparison with upstream
            ran = native.Result([])
        elif k == len(names) and whole is not None:
            ran = whole
        else:
            ran = native.run(toolchain.ctest, prefix.path)
        out.append(native.prefix_check(k, names[:k], prefix.manifest.inputs_digest, ran))
    return out


def _archs(build_dir: Path, native_ran: native.Result | None) -> list[Check]:
    """The table of the layer-range test of every architecture: from the native group's run of it (its
    exit status as CTest judged it), else its own run."""
    ran = next((c for c in native_ran.checks if c.name == archs.TEST_NAME), None) if native_ran else None
    if native_ran is not None and ran is not None:
        return archs.checks(native_ran.outputs[archs.TEST_NAME], 0 if ran.passed else 1)
    exe = build_dir / "bin" / "test-llama-archs"
    if not exe.is_file():
        raise VerifyError(f"the build at {build_dir} has no test-llama-archs", hint="run `dgr build`")
    result = proc.run(
        [exe, *archs.ARGS], check=False, error=VerifyError, what="test-llama-archs", cwd=build_dir
    )
    return archs.checks(result.stdout, result.returncode)


def _graphs(patched: build.Result, baseline: build.Result) -> list[Check]:
    """The compute graph of every architecture of upstream's random-model generator, from the patched build
    and from the baseline: one check per architecture variant, equal or not."""
    with log.step(f"graphs of the patched build ({graphs.PROGRAM})"):
        ours = graphs.run(patched.path / "bin" / graphs.PROGRAM)
    with log.step(f"graphs of the baseline ({graphs.PROGRAM})"):
        theirs = graphs.run(baseline.path / "bin" / graphs.PROGRAM)
    return graphs.checks(ours, theirs)


def run(args: argparse.Namespace) -> int:
    groups = groups_of(args.only)
    sanitize = buildplan.parse_sanitizers(args.sanitize)
    if sanitize:
        # a finding of a sanitizer fails the test or the request instead of scrolling by
        os.environ.setdefault("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=1")
        os.environ.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    ctx = Context.discover()
    patched = build.run(ctx, buildplan.Request(mirror=args.mirror, upstream=args.upstream, sanitize=sanitize))
    baseline = (
        build.run(
            ctx,
            buildplan.Request(
                upstream_only=True, mirror=args.mirror, upstream=args.upstream, sanitize=sanitize
            ),
        )
        if {"boundary", "graph"} & set(groups)
        else None
    )
    worker = patched.path / "bin" / "layer-worker"
    models = locks.load_models(ctx.repo.locks_dir).all()
    env = Env(
        worker=worker,
        models=tuple(
            RealModel.read(lock.name, path)
            for lock, path in zip(models, model.fetch_all(ctx.cache, models), strict=True)
        ),
        fixtures=ctx.cache.root / "fixtures",
        threads=args.threads,
        baseline_worker=baseline.path / "bin" / "layer-worker" if baseline else None,
        sanitized=bool(sanitize),
    )
    toolchain = Toolchain.find(locks.load_toolchain(ctx.repo.locks_dir))
    results: list[Check] = []
    durations: dict[str, float] = {}
    native_ran: native.Result | None = None
    for group in groups:
        start = time.monotonic()
        with log.step(f"verify {group}"):
            if group == "native":
                native_ran = native.run(toolchain.ctest, patched.path)
                results += native_ran.checks
            elif group == "series":
                results += _prefixes(ctx, args, sanitize, toolchain, patched, native_ran)
            elif group == "archs":
                results += _archs(patched.path, native_ran)
            elif group == "graph":
                assert baseline is not None
                results += _graphs(patched, baseline)
            else:
                if not worker.is_file():
                    raise VerifyError(
                        f"the build at {patched.path} has no layer-worker",
                        hint="run `dgr build`: it builds verify/worker against the patched library",
                    )
                # the synthetic fixtures, then each locked model, each part timed on its own
                for part, run_part in checks.parts(group, env):
                    part_start = time.monotonic()
                    results += run_part()
                    durations[f"{group}/{part}"] = round(time.monotonic() - part_start, 1)
        durations[group] = round(time.monotonic() - start, 1)

    report = Report(
        inputs_digest=patched.manifest.inputs_digest,
        baseline_digest=baseline.manifest.inputs_digest if baseline else None,
        groups=groups,
        durations_s=durations,
        checks=tuple(results),
    )
    path, data = reports.write(ctx.cache, report)
    if args.junit:
        write_atomic(args.junit, junit_xml(results))
    print(table(results), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        sys.stdout.write(data.decode())
    log.info(f"report: {path}")
    return EXIT_OK if report.passed else VerifyError.exit_code
