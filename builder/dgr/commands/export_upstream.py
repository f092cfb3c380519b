"""`dgr export-upstream [--out DIR] [--json] [--bench FILE]`: render the upstream package (dgr.export)."""

from __future__ import annotations

import argparse
import json

from dgr.core import log
from dgr.core.paths import Context
from dgr.errors import EXIT_OK
from dgr.export import export


def run(args: argparse.Namespace) -> int:
    ctx = Context.discover()
    out = args.out.resolve() if args.out else ctx.repo.root / export.DEFAULT_OUT
    result = export.run(ctx, out, args.mirror, args.bench.resolve() if args.bench else None)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.out)
    log.info(
        f"wrote {len(result.files)} file(s) to {result.out} (report {result.report}, bench {result.bench})"
    )
    for pull in result.pulls:
        log.info(
            f"PR-{pull['number']}: {pull['title']} (branch {pull['branch']}, "
            f"{len(pull['commits'])} commit(s), {pull['files']} files; lines: {pull['core_lines']} "
            f"hand-written core, {pull['test_lines']} hand-written tests, "
            f"{pull['mechanical_lines']} mechanical)"
        )
    return EXIT_OK
