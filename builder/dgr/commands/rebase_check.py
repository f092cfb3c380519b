"""`dgr rebase-check --onto SOURCE [--json]`: per patch clean / 3-way / conflict; exit 5 on a conflict.

`dgr rebase-check --matrix [--json]`: the same for every reachable upstream (the pin, then each locked rebase
target), and for each port of the series on its own target, as a patch x upstream table. Drift onto a newer
upstream is reported; only a series that does not apply cleanly on the pin (or a port that does not apply
cleanly on its target) fails (exit 5)."""

from __future__ import annotations

import argparse
import json

from dgr.contracts import locks
from dgr.core import log
from dgr.core.paths import Context, Repo
from dgr.errors import EXIT_OK, ApplyError
from dgr.git import apply, gitops
from dgr.maintain import rebase
from dgr.sources import upstream


def run(args: argparse.Namespace) -> int:
    if args.matrix:
        return run_matrix(args)
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    patches = apply.verified_series(ctx.repo)
    pin = upstream.obtain(ctx.cache, lock.pin, lock.sources, args.mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    with ctx.cache.tmpdir("rebase-check") as tmp:
        onto = rebase.resolve(ctx.cache, lock, args.onto, args.mirror, tmp)
        scratch = rebase.scratch_repo(tmp, [pin.repo, onto.repo])
        with log.step(f"apply {len(patches)} patch(es) onto {onto.commit[:12]} ({onto.source})"):
            report = rebase.check(scratch, onto, lock.pin, patches, identity, tmp, ctx.repo)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        verified = "verified" if onto.verified else "UNVERIFIED"
        print(f"onto {onto.spec}: {onto.commit} ({verified}, {onto.source})")
        for patch in report.patches:
            note = " (after an earlier conflict)" if patch.after_failure else ""
            print(f"  {patch.status:<8} {patch.name}{note}")
            for rejection in patch.rejections:
                for line in rejection.describe().splitlines():
                    print(f"           {line}")
            if not patch.rejections:
                for line in "\n".join(patch.files).splitlines():
                    print(f"           {line}")
        print(f"next: {report.next_step()}")
    return EXIT_OK if report.ok else ApplyError.exit_code


def run_matrix(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    pin_repo = upstream.obtain(ctx.cache, lock.pin, lock.sources, args.mirror)
    pin_onto = rebase.Onto(
        lock.pin.commit[:12], pin_repo.repo, lock.pin.commit, lock.pin.tree, pin_repo.source, True
    )
    columns: list[tuple[str, rebase.RebaseReport]] = []
    required: list[rebase.RebaseReport] = []
    with ctx.cache.tmpdir("rebase-matrix") as tmp:
        series_patches = apply.verified_series(ctx.repo)
        runs: list[tuple[str, Repo, str | None]] = [("pin " + lock.pin.commit[:7], ctx.repo, None)]
        runs += [(name, ctx.repo, name) for name in lock.rebase_targets]
        runs += [
            (f"{t.port} (port) on {name}", ctx.repo.for_port(t.port), name)
            for name, t in lock.rebase_targets.items()
            if t.port
        ]
        for i, (label, repo, spec) in enumerate(runs):
            patches = series_patches if repo.port is None else apply.verified_series(repo)
            work = tmp / str(i)
            work.mkdir()
            onto = pin_onto if spec is None else rebase.resolve(ctx.cache, lock, spec, args.mirror, work)
            scratch = rebase.scratch_repo(work, [pin_repo.repo, onto.repo])
            with log.step(f"{label}: apply {len(patches)} patch(es) onto {onto.commit[:12]}"):
                report = rebase.check(scratch, onto, lock.pin, patches, identity, work, repo)
            columns.append((label, report))
            if spec is None or repo.port is not None:
                required.append(report)
    failed = [r for r in required if not all(p.status == "clean" for p in r.patches)]
    if args.json:
        print(
            json.dumps(
                {"ok": not failed, "columns": [{"label": label, **r.to_json()} for label, r in columns]},
                indent=2,
            )
        )
    else:
        print(matrix_table(columns))
    return EXIT_OK if not failed else ApplyError.exit_code


def matrix_table(columns: list[tuple[str, rebase.RebaseReport]]) -> str:
    """A Markdown table: one row per patch name, one column per upstream (or port)."""
    names = list(dict.fromkeys(p.name for _, r in columns for p in r.patches))
    header = "| patch | " + " | ".join(label for label, _ in columns) + " |"
    lines = [header, "|" + " --- |" * (len(columns) + 1)]
    for name in names:
        cells = []
        for _, report in columns:
            found = next((p for p in report.patches if p.name == name), None)
            if found is None:
                cells.append("-")
                continue
            cell = found.status + (" (after a conflict)" if found.after_failure else "")
            if found.status == "conflict":
                # the rejected files, or (a generated patch) where its hand-written part or its rule stopped
                files = {r.file for r in found.rejections} or {f.split(":", 1)[0] for f in found.files}
                cell += ": " + ", ".join(sorted(files))
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for i, (label, report) in enumerate(columns):
        on_pin = i == 0 and all(p.status == "clean" for p in report.patches)
        step = "nothing: the series is current on the pin" if on_pin else report.next_step()
        lines.append(f"- {label}: {report.onto.commit[:12]} ({report.onto.source}); next: {step}")
    return "\n".join(lines)
