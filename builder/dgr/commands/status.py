"""`dgr status [--json]`: where the work stands, as `git status` says it for a work tree: the pin and the
series, the edit tree, the build of the current inputs, the verify report and the bench behind
`export-upstream`, and the next command to run. With `--backend NAME` (a GPU backend): its build and the
verify report of its groups instead (`export-upstream` is about the CPU build). It reads only; it builds,
fetches and writes nothing. A bench.json of the current inputs that is no bench result of `dgr bench` (read
strictly, as `export-upstream` reads it: dgr.export.measured) is its error, exit 8, naming the file and the
key."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field

from dgr.builds import buildcache, buildplan, harness, reportstore
from dgr.contracts import locks
from dgr.contracts.backend import Backend
from dgr.contracts.report import GPU_GROUPS, GROUPS
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, DgrError, StaleError, VerifyError
from dgr.export import measured
from dgr.git import gitops
from dgr.maintain import editing


@dataclass
class Status:
    backend: Backend
    pin: str
    series: list[str]
    inputs_digest: str
    edit_tree: str | None
    unexported: list[str]
    build: str | None
    verify: str
    bench: str
    export_needs: list[str] = field(default_factory=list)
    next: str = ""


def _edit_tree(ctx: Context, pin: str) -> tuple[str | None, list[str]]:
    """The default edit tree of the pin, and what in it `dgr export-patches` would write."""
    edit_dir = ctx.cache.edit / pin
    if not (edit_dir / ".git").exists() or gitops.rev_parse(edit_dir, editing.BASE_REF) is None:
        return None, []
    pending = editing.export(ctx.repo, edit_dir).changes()
    if gitops.is_dirty(edit_dir):
        pending.append("uncommitted changes")
    return str(edit_dir), pending


def status(ctx: Context, backend: Backend = "cpu") -> Status:
    lock = locks.load_upstream(ctx.repo.locks_dir)
    # read first, outside the reports' checks below (which report what they cannot read as missing): a broken
    # model lock is an error of its own (exit 8), not a bench to run
    models = locks.load_models(ctx.repo.locks_dir)
    plan = buildplan.plan(ctx, buildplan.Request(backend=backend))
    gpu = backend != "cpu"
    flag = f" --backend {backend}" if gpu else ""
    edit_dir, unexported = _edit_tree(ctx, lock.pin.commit)
    published = buildcache.BuildStore(ctx.cache).path(plan.digest)
    build = str(published) if (published / buildcache.MANIFEST).is_file() else None
    current = harness.current(ctx.repo)
    try:
        stored = reportstore.load_passing(
            ctx.cache, plan.digest, current, groups=GPU_GROUPS if gpu else GROUPS
        )
        verify = f"passed: {len(stored.report.checks)} checks ({stored.name})"
    except DgrError as exc:
        verify = f"{'stale' if isinstance(exc, StaleError) else 'missing'}: {exc.what}"
    if gpu:
        bench = "not this backend's: the bench and export-upstream are about the CPU build (`dgr status`)"
    else:
        full = measured.full_result(ctx.cache, plan.digest)
        try:
            measured.load(full, plan.digest, current, models)
            bench = "current (`dgr bench --rpc` of these inputs)"
        # missing, of other inputs, without --rpc, stale; a file that is no bench result (a key unknown or
        # twice, NaN, a `summary` its measurements do not give) is a ConfigError: its error, exit 8
        except VerifyError as exc:
            bench = f"{'stale' if isinstance(exc, StaleError) else 'missing'}: {exc.what}"
            if not full.exists() and (ctx.cache.bench_entry(plan.digest, quick=True) / full.name).exists():
                bench += " (there is a --quick one of these inputs: a quick run is no full bench)"
    result = Status(
        backend=backend,
        pin=f"llama.cpp {lock.pin.commit} ({lock.pin.commit_date.date()})",
        series=[ref.name for ref in plan.patches],
        inputs_digest=plan.digest,
        edit_tree=edit_dir,
        unexported=unexported,
        build=build,
        verify=verify,
        bench=bench,
    )
    if not gpu:
        if build is None:
            result.export_needs.append("a build of the current inputs (`dgr build`)")
        if not verify.startswith("passed"):
            result.export_needs.append("a passing verify report (`dgr verify`)")
        if not bench.startswith("current"):
            result.export_needs.append("a bench with the upstream comparisons (`dgr bench --rpc`)")
    if unexported:
        result.next = f"dgr export-patches --dir {edit_dir}"
    elif build is None:
        result.next = f"dgr build{flag}"
    elif not verify.startswith("passed"):
        result.next = f"dgr verify{flag}"
    elif gpu:
        result.next = "nothing for this backend; `dgr status` for the CPU build and export-upstream"
    elif not bench.startswith("current"):
        result.next = "dgr bench --rpc"
    else:
        result.next = "dgr export-upstream"
    return result


def run(args: argparse.Namespace) -> int:
    result = status(Context.discover(), args.backend)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return EXIT_OK
    print(f"pin:        {result.pin}")
    print(f"series:     {len(result.series)} patch(es): {', '.join(result.series)}")
    print(f"inputs:     {result.inputs_digest}")
    if result.edit_tree is None:
        print("edit tree:  none (`dgr edit` makes one)")
    elif result.unexported:
        print(f"edit tree:  {result.edit_tree}: not exported: {', '.join(result.unexported)}")
    else:
        print(f"edit tree:  {result.edit_tree}: nothing to export")
    if result.backend != "cpu":
        print(f"backend:    {result.backend}")
    print(f"build:      {result.build or 'not built'}")
    print(f"verify:     {result.verify}")
    print(f"bench:      {result.bench}")
    needs = "; ".join(result.export_needs)
    if result.backend == "cpu":
        print(f"export-upstream: {'ready' if not needs else 'needs ' + needs}")
    print(f"next:       {result.next}")
    return EXIT_OK
