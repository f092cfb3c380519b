"""`dgr pin --to SPEC`: move the pin to another upstream (dgr.maintain.pinning): promote its port or
rebase the series; refuse (exit 5) a series that is not clean on it, (exit 9) one without a passing verify
report, (exit 2) an upstream older than the pin unless --allow-older."""

from __future__ import annotations

import argparse

from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK
from dgr.maintain import pinning


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    change = pinning.move(ctx, args.to, args.mirror, args.allow_older)
    pin = change.lock.pin
    print(f"pinned {pin.commit} (tree {pin.tree}, {pin.commit_date.isoformat()})")
    for path in sorted(change.files(ctx.repo)):
        print(f"wrote: {ctx.repo.rel(path)}")
    for path in change.removes:
        print(f"removed: {ctx.repo.rel(path)}")
    for note in change.notes:
        log.info(note)
    log.info("review and commit the change: `git status`, `dgr check`, `dgr build`")
    return EXIT_OK
