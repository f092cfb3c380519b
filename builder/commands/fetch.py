"""`dgr fetch`: obtain and verify the upstream (and with --model the model); print their paths."""

from __future__ import annotations

import argparse

from dgr import locks, model, upstream
from dgr.errors import EXIT_OK
from dgr.paths import Context


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    pin, sources = upstream.select(lock, args.upstream)
    got = upstream.obtain(ctx.cache, pin, sources, args.mirror)
    print(got.repo)
    if args.model:
        print(model.fetch(ctx.cache, locks.load_model(ctx.repo.locks_dir)))
    return EXIT_OK
