"""`dgr pin --to SPEC`: move the pin to another upstream (dgr.maintain.pinning): promote its port or
rebase the series; refuse (exit 5) a series that is not clean on it, (exit 9) one without a passing verify
report, (exit 2) an upstream older than the pin unless --allow-older.

`dgr pin --add-target VERSION`: lock llama-cpp-python==VERSION's llama.cpp as a rebase target
(dgr.maintain.targets); refuse (exit 2) one locked already, (exit 4) a version PyPI does not have."""

from __future__ import annotations

import argparse

from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK, UsageError
from dgr.maintain import pinning, targets


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    if args.add_target is not None:
        if args.allow_older:
            raise UsageError("--allow-older is for --to", hint="a rebase target may be older than the pin")
        target = targets.add(ctx, args.add_target, args.mirror)
        print(
            f"locked {target.name}: commit {target.pin.commit} (tree {target.pin.tree}, "
            f"{target.pin.commit_date.isoformat()})"
        )
        print("wrote: locks/upstream.toml")
        log.info(f"next: `dgr rebase-check --onto {target.name}`, then review and commit the lock")
        return EXIT_OK
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
