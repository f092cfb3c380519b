"""`dgr fetch`: obtain and verify the upstream (and with --model every locked model); print their paths."""

from __future__ import annotations

import argparse

from dgr.contracts import locks
from dgr.core.paths import Context
from dgr.errors import EXIT_OK
from dgr.sources import model, upstream


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    lock = locks.load_upstream(ctx.repo.locks_dir)
    models = locks.load_models(ctx.repo.locks_dir) if args.model else None  # a bad lock before any download
    pin, sources = upstream.select(lock, args.upstream)
    got = upstream.obtain(ctx.cache, pin, sources, args.mirror)
    print(got.repo)
    if models is not None:
        for path in model.fetch_all(ctx.cache, models.all()):
            print(path)
    return EXIT_OK
