"""`dgr edit`: a git work tree with the series as commits, for editing by hand; prints its path."""

from __future__ import annotations

import argparse

from dgr.contracts import locks
from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, ApplyError
from dgr.git import apply, gitops
from dgr.maintain import editing, rebase
from dgr.sources import upstream


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    patches = apply.verified_series(ctx.repo)
    pin = upstream.obtain_pin(ctx.cache, lock, args.mirror)
    identity = gitops.Identity.from_locks(locks.load_toolchain(ctx.repo.locks_dir), lock.pin)
    stopped: str | None = None
    if args.onto:
        with ctx.cache.tmpdir("edit-onto") as tmp:
            onto = rebase.resolve(ctx.cache, lock, args.onto, args.mirror, tmp)
            edit_dir = (args.dir or ctx.cache.edit / onto.commit).resolve()
            base = editing.EditBase(onto.repo, onto.commit, pin.repo)
            with log.step(
                f"create {edit_dir} at {onto.commit[:12]} ({onto.source}), git am --3way the series"
            ):
                stopped = editing.create(edit_dir, base, patches, identity, ctx.repo, three_way=True)
    else:
        edit_dir = (args.dir or ctx.cache.edit / lock.pin.commit).resolve()
        base = editing.EditBase(pin.repo, lock.pin.commit, pin.repo)
        with log.step(f"create {edit_dir} at {lock.pin.short}, git am the series"):
            editing.create(edit_dir, base, patches, identity, ctx.repo)
    print(edit_dir)
    if stopped:
        log.warn(
            f"patches/{stopped} conflicts: resolve it in {edit_dir}, `git add` the files, "
            f"`git am --continue` (repeat for later patches), then `dgr export-patches --dir {edit_dir}`"
        )
        return ApplyError.exit_code
    log.info(
        f"edit the commits on branch {editing.BRANCH} (base {editing.BASE_REF}), "
        f"then run `dgr export-patches{'' if args.dir is None else f' --dir {edit_dir}'}`"
    )
    return EXIT_OK
