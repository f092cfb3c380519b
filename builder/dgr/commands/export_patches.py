"""`dgr export-patches [--dry-run]`: edit tree commits -> patches/, series/series, locks/patches.toml."""

from __future__ import annotations

import argparse

from dgr.contracts import locks
from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, LintError, UsageError
from dgr.git import gitops
from dgr.maintain import editing


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    edit_dir = (args.dir or ctx.cache.edit / lock.pin.commit).resolve()
    if not edit_dir.is_dir():
        raise UsageError(f"no edit tree at {edit_dir}", hint="run `dgr edit` first (or pass --dir)")
    if gitops.am_in_progress(edit_dir):
        raise UsageError(
            f"{edit_dir} has a `git am` in progress",
            hint=f"finish it first: `git -C {edit_dir} am --continue` (or `--abort`)",
        )
    if gitops.is_dirty(edit_dir):
        log.warn(f"{edit_dir} has uncommitted changes: they are not exported (commit them first)")
    base = gitops.rev_parse(edit_dir, editing.BASE_REF)
    if base is not None and base != lock.pin.commit:
        log.warn(
            f"the edit tree's base is {base}, but locks/upstream.toml pins {lock.pin.commit}: "
            "move the pin (commit, tree, commit_date, sources) together with these patches"
        )
    result = editing.export(ctx.repo, edit_dir)
    changes = result.changes()
    if args.dry_run:
        for change in changes:
            print(f"would change: {change}")
        if changes:
            log.info(f"{len(changes)} file(s) are stale: run `dgr export-patches` to update them")
            return LintError.exit_code
        log.info("patches/, series/series and locks/patches.toml are current")
        return EXIT_OK
    result.write()
    for change in changes:
        print(f"changed: {change}")
    log.info(f"exported {len(result.patches)} patch(es); {len(changes)} file(s) changed")
    return EXIT_OK
