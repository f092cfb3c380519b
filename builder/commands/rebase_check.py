"""`dgr rebase-check --onto SOURCE [--json]`: per patch clean / 3-way / conflict; exit 5 on a conflict."""

from __future__ import annotations

import argparse
import json

from builder import apply, gitops, locks, log, rebase, upstream
from builder.errors import EXIT_OK, ApplyError
from builder.paths import Context


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    patches = apply.verified_series(ctx.repo)
    pin = upstream.obtain(ctx.cache, lock.pin, lock.sources, args.mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    with ctx.cache.tmpdir("rebase-check") as tmp:
        onto = rebase.resolve(ctx.cache, lock, args.onto, args.mirror, tmp)
        scratch = rebase.scratch_repo(tmp, [pin.repo, onto.repo])
        with log.step(f"apply {len(patches)} patch(es) onto {onto.commit[:12]} ({onto.source})"):
            report = rebase.check(scratch, onto, lock.pin, patches, identity, tmp)
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
        print(f"next: {report.next_step()}")
    return EXIT_OK if report.ok else ApplyError.exit_code
